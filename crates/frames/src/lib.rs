//! snbuf-frames: DUNE's readout frame layouts, as snbuf reads and (to emulate a detector)
//! writes them. A frame type (`FrameType`) says how big a link's frames are and how far apart
//! in time; its layout (`FrameLayout`) says where each frame keeps its timestamp, sequence
//! number and identity (crate, slot, stream), byte for byte as DUNE-DAQ's fddetdataformats and
//! detdataformats define them. Everything that looks inside a frame goes through a layout: the
//! latency buffer's lookup, the writers' window edges, `verify`'s and `recover`'s checks, the
//! network receiver's routing.

#![forbid(unsafe_code)]

pub mod adc;
pub mod clock;
pub mod frame_type;
pub mod layout;

pub use clock::DetectorClock;
pub use frame_type::{FrameType, FrameTypeError, MIN_FRAME_BYTES};
pub use layout::{
    FrameLayout, HeaderKind, Identity, SubframeMismatch, TimestampField, SEQUENCE_MODULUS,
};
