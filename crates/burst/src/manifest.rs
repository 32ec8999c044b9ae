//! The manifest: one human-readable JSON file per burst saying what it is and what it holds.
//!
//! It is replaced atomically: written to a temporary file, fsync'ed, renamed over the old one,
//! and the directory fsync'ed, so a crash leaves either the old manifest or the new one, never a
//! mixture. The data files are the ground truth: `recover` can rebuild a manifest from them.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const MANIFEST_FILE: &str = "manifest.json";
pub const MANIFEST_FORMAT: &str = "snbuf-burst";
pub const MANIFEST_VERSION: u32 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BurstState {
    /// Being written: the counts may trail the data.
    Recording,
    /// Complete: every link's writer finished and its counts are final.
    Sealed,
    /// At least one link failed (its `error` says how); the others may be complete.
    Failed,
    /// Rebuilt or truncated by `snbuf recover` after a crash.
    Recovered,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Ok,
    Failed,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameInfo {
    /// `protodune-wib`, `wib2`, `wibeth`, `custom`.
    pub frame_type: String,
    pub frame_bytes: u32,
    pub ticks_per_frame: u64,
    pub clock_hz: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TriggerInfo {
    pub trigger_timestamp: u64,
    /// The window to record, [start, end) in ticks.
    pub window_start_timestamp: u64,
    pub window_end_timestamp: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    pub link: u32,
    /// The data file, relative to the burst directory.
    pub file: String,
    pub state: LinkState,
    pub chunks: u64,
    pub frames: u64,
    pub payload_bytes: u64,
    pub file_bytes: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
    /// Frames of the window the link could not record (overwritten in the buffer before they
    /// were written, or never produced).
    pub lost_frames: u64,
    /// What failed this link: names the operation and the file.
    pub error: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub burst_id: String,
    pub state: BurstState,
    pub created_unix_ns: u64,
    pub sealed_unix_ns: Option<u64>,
    pub trigger: Option<TriggerInfo>,
    pub frame: Option<FrameInfo>,
    /// Persistence method and what its persist achieved (`fdatasync`, `map_sync`, `volatile`, …).
    pub method: String,
    pub durability: String,
    pub links: Vec<LinkRecord>,
    /// What `recover` did, if anything.
    pub recovery: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: no manifest")]
    Missing { path: PathBuf },
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: io::Error },
    #[error("{path}: not a valid manifest: {cause}")]
    Invalid { path: PathBuf, cause: String },
    #[error("{path}: manifest format version {version} is newer than this snbuf understands ({MANIFEST_VERSION})")]
    FutureVersion { path: PathBuf, version: u32 },
}

impl LinkRecord {
    /// A link with nothing recorded yet, in its standard file.
    pub fn empty(link: u32) -> Self {
        LinkRecord {
            link,
            file: link_file_name(link),
            state: LinkState::Ok,
            chunks: 0,
            frames: 0,
            payload_bytes: 0,
            file_bytes: 0,
            first_timestamp: None,
            last_timestamp: None,
            lost_frames: 0,
            error: None,
        }
    }
}

/// The data file name of a link: `link-0003.dat`.
pub fn link_file_name(link: u32) -> String {
    format!("link-{link:04}.dat")
}

/// Parses `link-0003.dat` back to 3.
pub fn link_of_file_name(name: &str) -> Option<u32> {
    name.strip_prefix("link-")?
        .strip_suffix(".dat")?
        .parse()
        .ok()
}

pub fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Manifest {
    pub fn read(dir: &Path) -> Result<Manifest, ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(ManifestError::Missing { path })
            }
            Err(cause) => return Err(ManifestError::Io { path, cause }),
        };
        // Look at the version before the shape: a newer snbuf may have changed the rest.
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ManifestError::Invalid {
                path: path.clone(),
                cause: e.to_string(),
            })?;
        if let Some(v) = value.get("format_version").and_then(|v| v.as_u64()) {
            if v > MANIFEST_VERSION as u64 {
                return Err(ManifestError::FutureVersion {
                    path,
                    version: v as u32,
                });
            }
        }
        let m: Manifest = serde_json::from_value(value).map_err(|e| ManifestError::Invalid {
            path: path.clone(),
            cause: e.to_string(),
        })?;
        if m.format != MANIFEST_FORMAT {
            return Err(ManifestError::Invalid {
                path,
                cause: format!("format is '{}', not '{MANIFEST_FORMAT}'", m.format),
            });
        }
        Ok(m)
    }

    /// Replaces the manifest atomically and durably.
    pub fn write_atomic(&self, dir: &Path) -> Result<(), ManifestError> {
        let path = dir.join(MANIFEST_FILE);
        let tmp = dir.join(format!(".{MANIFEST_FILE}.tmp"));
        let io_err = |p: &Path, cause: io::Error| ManifestError::Io {
            path: p.to_path_buf(),
            cause,
        };
        let text = serde_json::to_string_pretty(self).expect("a manifest always serialises");
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(|e| io_err(&tmp, e))?;
        f.write_all(text.as_bytes()).map_err(|e| io_err(&tmp, e))?;
        f.write_all(b"\n").map_err(|e| io_err(&tmp, e))?;
        f.sync_all().map_err(|e| io_err(&tmp, e))?;
        drop(f);
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))?;
        // The rename is only durable once the directory is.
        sync_dir(dir).map_err(|e| io_err(dir, e))?;
        Ok(())
    }
}

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir).and_then(|d| d.sync_all())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_file_names_round_trip() {
        assert_eq!(link_file_name(3), "link-0003.dat");
        assert_eq!(link_of_file_name("link-0003.dat"), Some(3));
        assert_eq!(link_of_file_name("link-x.dat"), None);
        assert_eq!(link_of_file_name("manifest.json"), None);
    }
}
