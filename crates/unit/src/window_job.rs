//! What every writer of a burst is given: the window, its frame step and chunks, and where the
//! burst's reach stands (`reach`). Shared by the writers (`window_writer`) and the watchdog that
//! may give one up (`watchdog`).

use std::sync::Arc;

use snbuf_burst::{LinkWriter, Window};
use snbuf_persist::Sink;

/// A link of the burst on whichever sink was opened for it.
pub(crate) type DynLink = LinkWriter<Box<dyn Sink>>;

/// What every writer of a burst needs to know about the window and its chunks.
#[derive(Clone)]
pub(crate) struct WindowJob {
    pub window: Window,
    pub ticks_per_frame: u64,
    pub chunk_frames: u32,
    /// The fewest frames that make whole blocks (`chunk_cuts`): chunks are cut on them.
    pub block_frames: u64,
    /// Puts a chunk's CRC-32C together from its frames'.
    pub crcs: snbuf_burst::chunk::FrameCrcCombiner,
    pub chunks_per_persist: u32,
    /// Frames per second a link produces: how long until a chunk fills.
    pub frames_per_s: f64,
    /// Ticks a second of the detector clock the frames' timestamps count.
    pub clock_hz: u64,
    /// Where the window ends now (it moves out when a trigger joins the burst), when a link that
    /// has nothing more to read stops waiting for the rest of its window (its source stopped
    /// sending: a detector switched off, a sender that ended; what never came is counted lost;
    /// nothing waits forever), and how much file each link may fill. `window`'s own end is the
    /// first trigger's; this one is read at every turn.
    pub reach: Arc<crate::reach::BurstReach>,
    /// The largest file a link may grow to from a given size: its share of the room its
    /// output (and, on a memory-backed one, memory) still has (`snbuf_burst::opening::sizing::room_to_grow`).
    pub room_to_grow: Arc<dyn Fn(u64) -> u64 + Send + Sync>,
    /// How far ahead of its writes a link's file is grown toward the window's region: about a
    /// second of the link's data (`window_writer::grow_ahead`).
    pub grow_ahead_bytes: u64,
    /// For the logs: which burst of which unit.
    pub burst_id: String,
    pub unit_id: String,
}
