//! snbuf-bench: the characterization suites and their result schema.
//!
//! Every suite drives the same persistence code as the recorder (`snbuf_persist::open`), records
//! the machine it ran on, and returns raw results (`results`: the schema of docs/RESULTS.md,
//! which `snbuf report` reads back). `command` runs a suite for the command line: its
//! arguments, a progress bar, its table in human units and its JSON.

pub mod app;
pub mod checksum;
pub mod clock;
pub mod codec;
pub mod command;
pub mod defaults;
pub mod error;
pub mod join;
pub mod kernels;
pub mod latency;
pub mod machine;
pub mod paper;
pub mod results;
pub mod throughput;

pub use clock::OpClock;
pub use error::BenchError;
pub use machine::Machine;
pub use results::{Results, ThroughputResult};
pub use throughput::{Direction, Pattern, PersistEvery, Point, TargetFiles, ThroughputConfig};
