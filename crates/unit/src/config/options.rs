//! A unit's options as given: `snbuf record`'s and `snbuf serve`'s command line, with what its
//! config file adds, before any default or check. Named after the long options (`--rate-per-link`
//! is `rate_per_link`), which the errors quote. `from_options` turns them into a `RecordConfig`.

use std::path::PathBuf;
use std::time::Duration;

/// Every option of a recording unit, each None (or empty) when not given.
#[derive(Clone, Debug, Default)]
pub struct UnitOptions {
    pub links: Option<u32>,
    pub frame: Option<String>,
    pub source: Option<String>,
    pub streams: Vec<u8>,
    pub header_version: Option<String>,
    pub rcvbuf: Option<u64>,
    pub gro: Option<bool>,
    /// `--receive-nap`: the longest sleep between the receiver's poll rounds (zero: never).
    pub receive_nap: Option<Duration>,
    /// `--receive-batch`: the most coalesced buffers one receive call takes.
    pub receive_batch: Option<u32>,
    pub run: Option<u32>,
    /// The unit's id, already resolved (given, or made from the host name) by the caller.
    pub unit: Option<String>,
    pub source_ids: Vec<u32>,
    pub rate_per_link: Option<String>,
    pub buffer: Option<Duration>,
    pub pre: Option<Duration>,
    pub post: Option<Duration>,
    pub trigger_after: Option<Duration>,
    pub method: Option<String>,
    pub writers: Option<usize>,
    pub chunk_frames: Option<u32>,
    pub chunks_per_persist: Option<u32>,
    pub cpus: Option<String>,
    pub page_size: Option<u64>,
    pub replay: Option<PathBuf>,
    pub output: Vec<PathBuf>,
    pub burst_id: Option<String>,
    pub profile: Option<String>,
    pub status_file: Option<PathBuf>,
    pub inject_fault: Vec<String>,
    pub completion_deadline: Option<Duration>,
    pub max_window: Option<Duration>,
}

/// Options that make no unit: the user's mistake (`Usage`, one line quoting the option), or the
/// machine's (`Machine`: a medium that could not be probed).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Machine(String),
}

impl SetupError {
    pub fn usage(why: impl Into<String>) -> SetupError {
        SetupError::Usage(why.into())
    }
}
