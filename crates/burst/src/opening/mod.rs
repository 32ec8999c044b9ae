//! Opening a burst's files, in one place: how large each link's file is (`sizing`), how each is
//! opened through the persistence engine (`sinks`), the files made ready before a trigger
//! (`prepared`, and `ahead`, which prepares them in the background), and a trigger's burst
//! opened from them, or anew when they do not fit (`open`).
//!
//! Why ahead of the trigger: opening a burst costs time in proportion to its window —
//! allocating each link's file for the whole window and, on a mapped medium, first-touching
//! every page (about 1 s per 600 MiB on tmpfs on this project's VM). Done when the trigger
//! arrives, that time is taken from the pre-trigger data, which keeps ageing in the latency
//! buffers meanwhile. So a unit prepares the burst of its configured window while it waits, and
//! a trigger only renames the directory and writes the manifest. A trigger whose window is
//! larger than prepared, or that comes when nothing is prepared, opens its files itself,
//! without populating the mapping.
//!
//! When the output cannot hold the whole window (a memory-backed output's RAM, a full disk),
//! the files are sized to what fits: each link then stops, failed "full", when its share is
//! used, and the rest of its window is counted lost. A supernova burst is worth what fits.

pub mod ahead;
pub mod open;
pub mod prepared;
pub mod sinks;
pub mod sizing;

use std::path::PathBuf;
use std::time::Duration;

use snbuf_frames::FrameType;
use snbuf_persist::fault::FaultPlan;
use snbuf_persist::{Method, PageSize, SyncMode};

use crate::spec::BurstError;

/// What a unit's bursts are made of: where they go, how many links of which frames, how chunks
/// are cut, and how each link's file is written. The unit's configuration, as opening a burst
/// needs it.
#[derive(Clone, Debug)]
pub struct BurstFiles {
    /// The burst's home, and every output its links are spread over (the home first; link `i`
    /// writes to output `i mod n`).
    pub outputs: Vec<PathBuf>,
    pub links: u32,
    pub frame_type: FrameType,
    /// Frames each link delivers a second (sizes a window in frames).
    pub link_frames_per_s: f64,
    /// Most frames a chunk holds.
    pub chunk_frames: u32,
    pub method: Method,
    pub page_size: PageSize,
    pub sync_mode: SyncMode,
    /// How long a write may take to complete before its link is given up as stalled.
    pub completion_deadline: Duration,
    /// Faults injected into the links' sinks (reliability tests).
    pub faults: Vec<FaultPlan>,
    /// The run and unit the manifest names.
    pub run_number: Option<u32>,
    pub unit_id: Option<String>,
}

impl BurstFiles {
    /// The burst's home: where its manifest is, and the first output.
    pub fn home(&self) -> &PathBuf {
        assert!(!self.outputs.is_empty(), "a burst has a home");
        &self.outputs[0]
    }

    /// The frames per link a window of `pre + post` holds.
    pub fn window_frames(&self, pre: Duration, post: Duration) -> u64 {
        assert!(
            self.link_frames_per_s > 0.0,
            "links run at some frames a second"
        );
        ((pre + post).as_secs_f64() * self.link_frames_per_s).ceil() as u64 + 1
    }
}

/// Why a burst's files could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{dir}: no room left (space, or memory on a memory-backed file system) for even one chunk per link")]
    NoSpace { dir: PathBuf },
    #[error(transparent)]
    Burst(#[from] BurstError),
}
