//! The manifest: one human-readable JSON file per burst saying what it is and what it holds.
//!
//! It is replaced atomically and durably (`snbuf_persist::replace`), so a crash leaves either the
//! old manifest or the new one, never a mixture. The data files are the ground truth: `recover` can rebuild a manifest from them.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use snbuf_persist::replace::{replace_file, ReplaceDurability};

pub const MANIFEST_FILE: &str = "manifest.json";
pub const MANIFEST_FORMAT: &str = "snbuf-burst";
/// 2: frames are stored in their frame type's own layout (snbuf-frames), and links carry their
/// detector identity. 1: frames carried snbuf's own timestamp at bytes 0..8 (still read).
pub const MANIFEST_VERSION: u32 = 2;

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

impl BurstState {
    /// The state as the manifest writes it.
    pub fn name(self) -> &'static str {
        match self {
            BurstState::Recording => "recording",
            BurstState::Sealed => "sealed",
            BurstState::Failed => "failed",
            BurstState::Recovered => "recovered",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Ok,
    Failed,
}

/// Where a link's data comes from in the detector: DUNE's geographic identity of its frames and
/// the SourceID the offline format files them under.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkIdentity {
    pub det_id: u8,
    pub crate_id: u16,
    pub slot_id: u8,
    pub stream_id: u8,
    /// DUNE SourceID (subsystem detector readout) of the link's fragments.
    pub source_id: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameInfo {
    /// `protodune-wib`, `wib2`, `wibeth`, `custom`.
    pub frame_type: String,
    pub frame_bytes: u32,
    pub ticks_per_frame: u64,
    /// The detector's clock the timestamps count (Hz): a second is this many ticks.
    pub clock_hz: u64,
    /// Ticks between a link's frames: `ticks_per_frame` for a detector at its own rate (and in
    /// bursts that do not say), more for a sub-sampled one (see `snbuf_frames::clock`). Gaps and
    /// the window's frame count are reckoned in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frame_step_ticks: Option<u64>,
}

impl FrameInfo {
    /// Ticks between a link's frames (see `frame_step_ticks`).
    pub fn step_ticks(&self) -> u64 {
        self.frame_step_ticks.unwrap_or(self.ticks_per_frame)
    }
}

/// A trigger's window, decided once when the trigger is accepted: the same in the reply to the
/// trigger, in the recording and in the manifest.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    pub trigger_timestamp: u64,
    /// The window to record, [start, end) in ticks.
    pub window_start_timestamp: u64,
    pub window_end_timestamp: u64,
    /// The clock the ticks count (Hz), and the window in its seconds: from its start to the
    /// trigger, and from the trigger to its end (absent in bursts recorded before they were kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_hz: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_s: Option<f64>,
    /// How much of the window's start the latency buffers no longer held when the trigger was
    /// accepted (s of the detector's clock): asked for, never recordable, counted in the links'
    /// lost frames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_buffered_s: Option<f64>,
}

impl Window {
    /// The window [start, end) around `trigger`, in ticks of a `clock_hz` clock.
    pub fn new(trigger: u64, start: u64, end: u64, clock_hz: u64) -> Window {
        assert!(
            start <= trigger && trigger <= end,
            "a window holds its trigger"
        );
        let s = |ticks: u64| ticks as f64 / clock_hz.max(1) as f64;
        Window {
            trigger_timestamp: trigger,
            window_start_timestamp: start,
            window_end_timestamp: end,
            clock_hz: Some(clock_hz),
            pre_s: Some(s(trigger - start)),
            post_s: Some(s(end - trigger)),
            not_buffered_s: None,
        }
    }

    /// The window's length in seconds of its clock (None when the burst does not say the clock).
    pub fn length_s(&self) -> Option<f64> {
        self.clock_hz.map(|hz| {
            self.window_end_timestamp
                .saturating_sub(self.window_start_timestamp) as f64
                / hz.max(1) as f64
        })
    }
}

/// What a link's data file holds: its chunks, from the start of the file. The chunk writer
/// counts it as chunks are acknowledged, `scan` as it reads them back, and the manifest keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkData {
    pub chunks: u64,
    pub frames: u64,
    pub payload_bytes: u64,
    /// Bytes of file used, padding included: where the next chunk goes.
    pub file_bytes: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkRecord {
    pub link: u32,
    /// The data file, relative to the burst directory.
    pub file: String,
    pub state: LinkState,
    #[serde(flatten)]
    pub data: LinkData,
    /// Frames of the window the link could not record (overwritten in the buffer before they
    /// were written, or never produced).
    pub lost_frames: u64,
    /// What failed this link: names the operation and the file.
    pub error: Option<String>,
    /// The link's detector identity (version 2 on).
    #[serde(default)]
    pub identity: Option<LinkIdentity>,
    /// Where the data file lives when it is on another output than the burst directory (an
    /// absolute path); the burst directory then holds a symbolic link to it under `file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub burst_id: String,
    pub state: BurstState,
    pub created_unix_ns: u64,
    pub sealed_unix_ns: Option<u64>,
    pub trigger: Option<Window>,
    pub frame: Option<FrameInfo>,
    /// Persistence method and what its persist achieved (`fdatasync`, `map_sync`, `volatile`, …).
    pub method: String,
    pub durability: String,
    pub links: Vec<LinkRecord>,
    /// What `recover` did, if anything.
    pub recovery: Option<String>,
    /// The run the burst belongs to (`--run`), and the readout unit that recorded it.
    #[serde(default)]
    pub run_number: Option<u32>,
    #[serde(default)]
    pub unit: Option<String>,
    /// The recorder's own check of the sealed burst (a full `verify`), when it made one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verified: Option<Verified>,
    /// Every trigger this burst answers, the one that opened it first, then each one that
    /// joined it while it was recorded (its window began inside the burst's; `trigger`'s end
    /// moved out to hold it). Empty in bursts recorded before triggers could join.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub triggers: Vec<AnsweredTrigger>,
    /// A burst grown by joins past the unit's --max-burst stops there and goes on as the next
    /// burst, without a gap: the burst this one continues (its first frame follows that one's
    /// last), and the burst that continues this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continued_in: Option<String>,
    /// In a copy an export wrote coded (`export --codec frames`): the codec of its link files,
    /// each stored as `<file>.snbl` (`coded_link`), which every reader of this crate opens as
    /// the file it stands for. Absent in a burst as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coded: Option<String>,
    /// Faults injected while it was recorded (`--inject-fault`, for reliability tests): a burst
    /// recorded so is no evidence of snbuf's durability, and `verify` says so. Absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected_faults: Vec<String>,
}

/// A trigger a burst answers: its own window, and the part of it the burst holds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AnsweredTrigger {
    /// The trigger's id (a fleet trigger's, or the burst id a trigger asked for).
    pub trigger_id: String,
    pub trigger_timestamp: u64,
    /// The window it asked for, [start, end) in ticks.
    pub window_start_timestamp: u64,
    pub window_end_timestamp: u64,
    /// What of that window the burst records, [start, end) in ticks (the whole of it, unless
    /// the output had no room for all of an extension).
    pub covered_start_timestamp: u64,
    pub covered_end_timestamp: u64,
    /// When the unit took it (ns since the Unix epoch).
    pub taken_unix_ns: u64,
}

impl AnsweredTrigger {
    /// Trigger `id` with window `w`, all of it covered.
    pub fn whole(id: &str, w: &Window) -> AnsweredTrigger {
        AnsweredTrigger {
            trigger_id: id.to_string(),
            trigger_timestamp: w.trigger_timestamp,
            window_start_timestamp: w.window_start_timestamp,
            window_end_timestamp: w.window_end_timestamp,
            covered_start_timestamp: w.window_start_timestamp,
            covered_end_timestamp: w.window_end_timestamp,
            taken_unix_ns: snbuf_quantity::now_unix_ns(),
        }
    }
}

/// A verification of the burst as sealed: when, and what it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verified {
    pub valid: bool,
    pub problems: u64,
    pub at_unix_ns: u64,
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
            data: LinkData::default(),
            lost_frames: 0,
            error: None,
            identity: None,
            path: None,
        }
    }
}

/// The data file name of a link: `link-0003.dat`.
pub fn link_file_name(link: u32) -> String {
    let name = format!("link-{link:04}.dat");
    debug_assert_eq!(link_of_file_name(&name), Some(link), "the name reads back");
    name
}

/// Parses `link-0003.dat` back to 3.
pub fn link_of_file_name(name: &str) -> Option<u32> {
    name.strip_prefix("link-")?
        .strip_suffix(".dat")?
        .parse()
        .ok()
}

impl Manifest {
    /// Where the burst's frames keep their timestamps: the frame type's layout, or, for a
    /// version 1 burst, snbuf's old stamp at bytes 0..8. None when the frame type is unknown to
    /// this snbuf or does not match the frame size (then frames are not looked inside).
    pub fn frame_layout(&self) -> Option<snbuf_frames::FrameLayout> {
        let f = self.frame.as_ref()?;
        let t: snbuf_frames::FrameType = if self.format_version < 2 {
            snbuf_frames::FrameType::Custom {
                frame_bytes: f.frame_bytes,
                ticks_per_frame: f.ticks_per_frame.max(1),
                timestamp_offset: 0,
            }
        } else {
            f.frame_type.parse().ok()?
        };
        let layout = t.layout();
        (layout.frame_bytes == f.frame_bytes && layout.ticks_per_frame == f.ticks_per_frame)
            .then_some(layout)
    }

    /// Whether this burst answers trigger `id` (it opened the burst, or joined it), as its
    /// `triggers` say; a manifest that lists none (one rebuilt by `recover`) answers the trigger
    /// it is named after. A burst named apart (`x-2`, for trigger `x`) does not answer a trigger
    /// named `x-2`.
    pub fn answers(&self, id: &str) -> bool {
        match self.triggers.is_empty() {
            true => self.burst_id == id,
            false => self.triggers.iter().any(|t| t.trigger_id == id),
        }
    }

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
        debug_assert!(
            m.format_version <= MANIFEST_VERSION,
            "only a manifest version this snbuf understands is read"
        );
        Ok(m)
    }

    /// Replaces the manifest atomically and durably: it states what the data holds, so once
    /// this returns a power cut cannot bring an older version back.
    pub fn write_atomic(&self, dir: &Path) -> Result<(), ManifestError> {
        self.replace(dir, ReplaceDurability::Durable)
    }

    /// `write_atomic` by the recording itself: a burst recorded under `lost-dir-sync` skips the
    /// directory's sync, as the fault asks. Anything else that rewrites the manifest later (a
    /// recovery, a verify) syncs it as always.
    pub(crate) fn write_as_recorded(&self, dir: &Path) -> Result<(), ManifestError> {
        self.replace(
            dir,
            if directory_syncs_lost(&self.injected_faults) {
                ReplaceDurability::DurableButDirectoryLost
            } else {
                ReplaceDurability::Durable
            },
        )
    }

    fn replace(&self, dir: &Path, durability: ReplaceDurability) -> Result<(), ManifestError> {
        assert!(
            self.format == MANIFEST_FORMAT && self.format_version <= MANIFEST_VERSION,
            "a manifest is written in a format this snbuf reads back"
        );
        let path = dir.join(MANIFEST_FILE);
        let mut text = serde_json::to_string_pretty(self).expect("a manifest always serialises");
        text.push('\n');
        replace_file(&path, text.as_bytes(), durability)
            .map_err(|cause| ManifestError::Io { path, cause })
    }
}

/// Whether `injected_faults` (a spec's or a manifest's, as `FaultPlan`s say themselves) holds
/// `lost-dir-sync`: then the burst's directory syncs are skipped, its renames (the directory's
/// own, the manifest's as it records it) not made durable, as the fault asks. Only that burst's
/// recording: nothing else of the process, nor a later recovery of it, skips a sync.
pub fn directory_syncs_lost(injected_faults: &[String]) -> bool {
    let lost = snbuf_persist::fault::FaultKind::LostDirSync.name();
    injected_faults
        .iter()
        .any(|f| f.split_whitespace().next() == Some(lost))
}

#[cfg(test)]
mod tests {
    use super::BurstState;

    #[test]
    fn a_states_name_is_what_the_manifest_writes() {
        for st in [
            BurstState::Recording,
            BurstState::Sealed,
            BurstState::Failed,
            BurstState::Recovered,
        ] {
            assert_eq!(serde_json::to_value(st).unwrap(), st.name());
        }
    }

    use super::*;

    #[test]
    fn link_file_names_round_trip() {
        assert_eq!(link_file_name(3), "link-0003.dat");
        assert_eq!(link_of_file_name("link-0003.dat"), Some(3));
        assert_eq!(link_of_file_name("link-x.dat"), None);
        assert_eq!(link_of_file_name("manifest.json"), None);
    }
}

#[cfg(test)]
mod fault_tests {
    use super::directory_syncs_lost;
    use snbuf_persist::fault::FaultPlan;

    #[test]
    fn only_a_burst_recorded_under_lost_dir_sync_skips_its_directory_syncs() {
        let said = |plans: &[&str]| -> Vec<String> {
            plans
                .iter()
                .map(|p| FaultPlan::parse(p).unwrap().to_string())
                .collect()
        };
        assert!(directory_syncs_lost(&said(&["lost-dir-sync"])));
        assert!(directory_syncs_lost(&said(&[
            "write-eio:link=1",
            "lost-dir-sync"
        ])));
        assert!(!directory_syncs_lost(&said(&["lost-flush", "late-flush"])));
        assert!(!directory_syncs_lost(&[]));
    }
}
