//! snbuf-readout: where detector data enters snbuf. The sources that produce frames in their
//! frame type's own layout (`snbuf-frames`): an emulator on an absolute schedule, a replayed
//! recording; and the per-link DRAM latency buffer that holds the last seconds of a link for a
//! trigger to reach back into.
//!
//! Nothing here knows about storage: a source never waits, and the buffer overwrites its oldest
//! frame when full. The unit (`snbuf-unit`) reads windows out of the buffers and persists them.

pub mod emit;
pub mod emulated_detector;
pub mod frame_run;
pub mod framegen;
pub mod latency_buffer;
pub mod source;
pub mod udp;

pub use framegen::{FrameGen, Payload, SourceError};
pub use latency_buffer::{
    latency_buffer, latency_buffer_on_node, LatencyBuffer, Lookup, Producer, RingReadError,
};
pub use snbuf_frames::{FrameLayout, FrameType};
pub use source::Emulator;
