//! The recorder's live state as a JSON file (`snbuf record --status-file PATH`), rewritten about
//! ten times a second while a burst records: per link, what went in, what is durable (the durable
//! watermark), what was lost, and whether the link failed.
//!
//! The promise: a chunk counts in `durable_chunks` (and its newest frame in
//! `durable_until_timestamp`) only after the persist that covers it returned. So whatever this
//! file said at any moment is on the medium after a crash, and `snbuf recover` keeps it. The crash
//! trials (`bench/crash_trials.sh`) check exactly that against the real binary.
//!
//! The file is replaced by rename, so a reader sees one whole version or the one before, never
//! half of one. It is not fsynced: it reports durability, it does not provide it. After a power
//! cut it may be older than the data, which only understates what survived.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::recorder::{LinkProgress, Progress};

/// One link's figures as JSON: the same fields in the status file and in `snbuf status`.
pub fn link_json(l: &LinkProgress) -> Value {
    json!({
        "link": l.link,
        "frames_in": l.frames_in,
        "frames_out": l.frames_out,
        "durable_chunks": l.durable_chunks,
        "durable_frames": l.frames_out,
        "durable_until_timestamp": l.durable_until_timestamp,
        "lost_frames": l.lost_frames,
        "buffer_fill_frames": l.buffer_fill_frames,
        "backlog_frames": l.backlog_frames,
        "failed": l.failed,
    })
}

pub struct StatusFile {
    path: PathBuf,
    temp: PathBuf,
}

impl StatusFile {
    pub fn new(path: &Path) -> StatusFile {
        let mut temp = path.as_os_str().to_owned();
        temp.push(".tmp");
        StatusFile {
            path: path.to_path_buf(),
            temp: PathBuf::from(temp),
        }
    }

    /// Replaces the file with this state of the burst `burst_id` (written to a temporary file
    /// beside it, then renamed over it).
    pub fn write(
        &self,
        burst_id: &str,
        burst_dir: Option<&Path>,
        p: &Progress,
    ) -> std::io::Result<()> {
        let v = json!({
            "pid": std::process::id(),
            "phase": p.phase,
            "elapsed_s": p.elapsed.as_secs_f64(),
            "burst_id": burst_id,
            "burst_dir": burst_dir.map(|d| d.display().to_string()),
            "links": p.links.iter().map(link_json).collect::<Vec<_>>(),
        });
        let mut f = std::fs::File::create(&self.temp)?;
        f.write_all(v.to_string().as_bytes())?;
        f.write_all(b"\n")?;
        drop(f);
        std::fs::rename(&self.temp, &self.path)
    }
}
