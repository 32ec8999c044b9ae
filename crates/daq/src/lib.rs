//! snbuf-daq: readout emulation and buffering — frame types, rate-limited link sources, and the
//! per-link DRAM latency buffer that holds the last seconds of a link for a trigger to reach
//! back into.

pub mod control;
pub mod frame;
pub mod latency_buffer;
pub mod metrics;
mod next_burst;
pub mod recorder;
pub mod source;
pub mod status_file;

pub use frame::FrameType;
pub use latency_buffer::{latency_buffer, LatencyBuffer, Lookup, Producer, ReadError};
pub use recorder::{
    record, LinkProgress, LinkTotals, Progress, RecordConfig, RecordError, RecordReport, TriggerAt,
    Unit,
};
pub use source::{Emulator, GapSpec, Payload};
