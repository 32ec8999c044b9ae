//! The recorder's live state as a JSON file (`snbuf record --status-file PATH`), rewritten about
//! ten times a second while a burst records: per link, what went in, what is durable (the durable
//! watermark), what was lost, and whether the link failed.
//!
//! The promise: a chunk counts in `durable_chunks` (and its newest frame in
//! `durable_until_timestamp`) only after the persist that covers it returned. So whatever this
//! file said at any moment is on the medium after a crash, and `snbuf recover` keeps it. The crash
//! trials (`bench/crash_trials.sh`) check exactly that against the real binary.
//!
//! The file is replaced whole (`ReplaceDurability::Atomic`), so a reader sees one version or the
//! one before, never half of one. It is not fsynced: it reports durability, it does not provide
//! it. After a power cut it may be older than the data, which only understates what survived.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use snbuf_persist::replace::{replace_file, ReplaceDurability};

use crate::counters::{LinkCounters, Progress};

/// How often the status file is rewritten while a burst records.
pub const STATUS_FILE_INTERVAL: Duration = Duration::from_millis(100);

/// One link's figures as JSON: the same fields in the status file and in `snbuf status`
/// (`protocol::LinkStatus`).
pub fn link_json(l: &LinkCounters) -> Value {
    serde_json::to_value(crate::protocol::LinkStatus::from(l)).expect("link figures serialise")
}

pub struct StatusFile {
    path: PathBuf,
    /// At most one rewrite per interval, unless forced (`update`).
    interval: Duration,
    written: Option<Instant>,
}

impl StatusFile {
    pub fn new(path: &Path) -> StatusFile {
        StatusFile {
            path: path.to_path_buf(),
            interval: Duration::ZERO,
            written: None,
        }
    }

    /// Rewrites at most once per `interval` through `update`.
    pub fn every(mut self, interval: Duration) -> StatusFile {
        self.interval = interval;
        self
    }

    /// Replaces the file with this state of the burst `burst_id`.
    pub fn write(
        &mut self,
        burst_id: &str,
        burst_dir: Option<&Path>,
        p: &Progress,
    ) -> std::io::Result<()> {
        debug_assert!(
            p.links.windows(2).all(|w| w[0].link < w[1].link),
            "links in link order"
        );
        let v = json!({
            "pid": std::process::id(),
            "phase": p.phase,
            "elapsed_s": p.elapsed.as_secs_f64(),
            "burst_id": burst_id,
            "burst_dir": burst_dir.map(|d| d.display().to_string()),
            "links": p.links.iter().map(link_json).collect::<Vec<_>>(),
        });
        self.written = Some(Instant::now());
        replace_file(
            &self.path,
            format!("{v}\n").as_bytes(),
            ReplaceDurability::Atomic,
        )
    }

    /// Writes the state `progress` gives when the interval has passed since the last write, or
    /// at once when `force`d (a phase change a reader must see).
    pub fn update(
        &mut self,
        burst_id: &str,
        burst_dir: Option<&Path>,
        force: bool,
        progress: impl FnOnce() -> Progress,
    ) -> std::io::Result<()> {
        let due = self.written.is_none_or(|t| t.elapsed() >= self.interval);
        if force || due {
            self.write(burst_id, burst_dir, &progress())?;
        }
        Ok(())
    }
}
