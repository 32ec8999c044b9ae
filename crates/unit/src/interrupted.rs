//! Bursts a unit left unsealed when it stopped (killed, crashed, the power cut), recovered when
//! a unit starts on the same output: nobody need be there to run `snbuf recover`.
//!
//! Each is recovered exactly as `snbuf recover` does it (`snbuf_burst::recover_burst`: per link
//! the longest valid prefix of sequence-contiguous chunks, the rest cut off and the window's
//! missing frames counted lost), which seals it `recovered`; then it is verified. Idempotent: a
//! unit stopped during a recovery leaves the burst `recording` (the manifest is replaced
//! atomically, last), and the next start recovers it again. The caller reports each as a burst
//! of its own (log, fleet event, export).
//!
//! A burst being recorded is never touched: its recorder holds a lock on the burst's directory
//! until it is sealed (`snbuf_burst::being_recorded`), which the kernel releases when that
//! process dies, however it dies. So two units on one output (or `record` beside `serve`) leave
//! each other's live bursts alone.

use std::path::{Path, PathBuf};

use snbuf_burst::manifest::{link_of_file_name, MANIFEST_FILE};
use snbuf_burst::{being_recorded, recover_burst, verify_burst, BurstState, Manifest};

use crate::protocol::{BurstOutcome, OutcomeState};

/// The bursts under `output` that a stopped unit left unsealed: a manifest still `recording`
/// that no live recorder holds (`snbuf_burst::being_recorded`). Anything else is left as it is:
/// a directory whose manifest cannot be read, or link files without a manifest, is said (a
/// warning) and left to `snbuf recover` and a person; hidden entries are not bursts.
pub fn find(output: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(output) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .filter(|p| match Manifest::read(p) {
            Ok(m) => m.state == BurstState::Recording && !being_recorded(p),
            Err(e) => {
                if p.join(MANIFEST_FILE).exists() || has_link_files(p) {
                    tracing::warn!(dir = %p.display(), error = %e,
                        "not recovered at start: its manifest cannot be read; `snbuf recover` \
                         rebuilds it from the data, if that is what it should be");
                }
                false
            }
        })
        .collect();
    found.sort();
    found
}

fn has_link_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| link_of_file_name(&e.file_name().to_string_lossy()).is_some())
    })
}

/// Recovers and verifies every burst `find` returns; one outcome each, state `recovered` (or
/// `error`, with why, when it could not be recovered: it is left as it was).
pub fn recover_all(output: &Path, clock_hz: Option<u64>) -> Vec<BurstOutcome> {
    find(output)
        .into_iter()
        .map(|dir| recover_one(&dir, clock_hz))
        .collect()
}

/// The detector time the most of any link lost, in seconds of its clock (`clock_hz`, else the
/// frame type's): None without a frame type.
fn lost_seconds(manifest: &Manifest, clock_hz: Option<u64>) -> Option<f64> {
    let step_s = manifest
        .frame
        .as_ref()
        .map(|f| f.step_ticks() as f64 / clock_hz.unwrap_or(f.clock_hz).max(1) as f64)?;
    let most = manifest.links.iter().map(|l| l.lost_frames).max();
    Some(most.unwrap_or(0) as f64 * step_s)
}

/// Recovers and verifies the interrupted burst in `dir` (one `find` returned): its outcome,
/// state `recovered` (or `error`, with why: it is left as it was).
pub fn recover_one(dir: &Path, clock_hz: Option<u64>) -> BurstOutcome {
    let burst_id = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let failed = |why: String| {
        tracing::error!(burst = %burst_id, "an interrupted burst could not be recovered: {why}");
        BurstOutcome {
            burst_id: burst_id.clone(),
            state: OutcomeState::Error,
            dir: Some(dir.to_path_buf()),
            error: Some(why),
            ..BurstOutcome::default()
        }
    };
    // Held while it is recovered: another process starting on this output leaves it alone.
    let Some(_recovering) = snbuf_burst::hold_burst(dir) else {
        return failed("another process holds it (recording or recovering it)".into());
    };
    let report = match recover_burst(dir, false) {
        Ok(r) => r,
        Err(e) => return failed(e.to_string()),
    };
    let manifest = match Manifest::read(dir) {
        Ok(m) => m,
        Err(e) => return failed(format!("after recovery: {e}")),
    };
    let verify = verify_burst(dir);
    let valid = verify.as_ref().is_ok_and(|v| v.valid);
    let frames: u64 = manifest.links.iter().map(|l| l.data.frames).sum();
    let lost_frames: u64 = manifest.links.iter().map(|l| l.lost_frames).sum();
    let lost_s = lost_seconds(&manifest, clock_hz);
    tracing::info!(
        burst = %burst_id,
        frames,
        lost_frames,
        dropped_pieces = report.dropped.len(),
        valid,
        "a burst interrupted when the unit stopped was recovered: every chunk that was durable \
         is kept, the rest of its window counted lost"
    );
    BurstOutcome {
        burst_id,
        state: OutcomeState::of(manifest.state),
        dir: Some(dir.to_path_buf()),
        frames: Some(frames),
        lost_frames: Some(lost_frames),
        lost_s,
        valid,
        window: manifest.trigger.clone(),
        error: match verify {
            Ok(v) if v.valid => None,
            Ok(v) if v.problems.is_empty() => Some(format!("{} problem(s)", v.problem_count())),
            Ok(v) => Some(v.problems.join("; ")),
            Err(e) => Some(e.to_string()),
        },
        triggers: manifest
            .triggers
            .iter()
            .map(|t| t.trigger_id.clone())
            .collect(),
        ..BurstOutcome::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_recording_burst_no_live_recorder_holds_is_found() {
        let out = tempfile::tempdir().unwrap();
        let spec = |id: &str| snbuf_burst::BurstSpec {
            burst_id: id.into(),
            frame: snbuf_burst::manifest::FrameInfo {
                frame_type: "custom".into(),
                frame_bytes: 512,
                ticks_per_frame: 25,
                clock_hz: 50_000_000,
                frame_step_ticks: None,
            },
            trigger: None,
            method: "buffered".into(),
            links: vec![0],
            max_payload_bytes: 4 * 512,
            identities: vec![],
            run_number: None,
            unit: None,
            injected_faults: Vec::new(),
        };
        let open = |_: u32, p: &Path| {
            snbuf_persist::open(&snbuf_persist::SinkConfig::new(
                snbuf_persist::Method::Buffered,
                p,
                1 << 20,
            ))
        };
        // Live: its writer (and so its lock) is held here.
        let live = snbuf_burst::BurstWriter::create(out.path(), spec("live"), open).unwrap();
        // Interrupted: created, then its writer let go without a seal (as a killed unit does).
        drop(snbuf_burst::BurstWriter::create(out.path(), spec("cut"), open).unwrap());
        // Neither: a manifest that is not one, link files without a manifest, hidden entries.
        let junk = out.path().join("junk");
        std::fs::create_dir(&junk).unwrap();
        std::fs::write(junk.join(MANIFEST_FILE), b"{ not json").unwrap();
        let bare = out.path().join("bare");
        std::fs::create_dir(&bare).unwrap();
        std::fs::write(bare.join("link-0000.dat"), [7u8; 512]).unwrap();
        std::fs::create_dir(out.path().join(".prepared-1")).unwrap();
        assert_eq!(find(out.path()), vec![out.path().join("cut")]);
        drop(live);
        assert_eq!(
            find(out.path()),
            vec![out.path().join("cut"), out.path().join("live")]
        );
        assert_eq!(
            std::fs::read(junk.join(MANIFEST_FILE)).unwrap(),
            b"{ not json"
        );
        assert_eq!(
            std::fs::read(bare.join("link-0000.dat")).unwrap(),
            [7u8; 512]
        );
    }
}
