//! `bench write` and `bench read`: throughput, request rate and per-operation latency of a
//! persistence method against block size and thread count (DUNE paper Figs 2, 3 and 5, Table II).
//!
//! Each point: every thread opens its own sink (through `snbuf_persist::open`, the recorder's
//! code) on its own region of a target — one shared target is the paper's interleaved case, one
//! target per thread the non-interleaved one — prefaults it, is pinned to a CPU, warms up, then
//! runs for the set duration. A write copies a block from a DRAM source buffer and, at each
//! persist point, makes it durable; a read walks the region (sequentially or at random, never one
//! cached line) and checks the content against what the prefill wrote, so a read that returned
//! nothing real fails the point.

mod config;
mod drive;
mod run;
mod summary;
mod targets;

pub use config::{Direction, Pattern, PersistEvery, Point, ThroughputConfig, REGION_ALIGN_BYTES};
pub use drive::SOURCE_BYTES;
pub use run::run_point;
pub use targets::TargetFiles;
