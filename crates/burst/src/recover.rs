//! `recover`: after a crash, keep for each link the longest prefix of valid, sequence-contiguous
//! chunks, cut off the rest (reporting exactly what and why), and rebuild the manifest from the
//! data. It never invents, reorders or repairs data, and running it twice changes nothing the
//! second time. Chunks from a newer format version make it refuse to touch anything.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::manifest::{
    BurstState, LinkData, LinkRecord, LinkState, Manifest, ManifestError, MANIFEST_FORMAT,
    MANIFEST_VERSION,
};
use crate::scan::{scan, End, Expect, ScanReport};
use crate::verify::{check_dir, link_files, window_coverage, BurstDirError};

#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    #[error(transparent)]
    Dir(#[from] BurstDirError),
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Manifest(#[from] ManifestError),
}

#[derive(Clone, Debug, Serialize)]
pub struct DroppedRegion {
    pub file: String,
    pub offset: u64,
    pub bytes: u64,
    pub why: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct LinkRecovery {
    pub link: u32,
    pub file: String,
    pub kept_chunks: u64,
    pub kept_frames: u64,
    pub kept_bytes: u64,
    /// Unused preallocated space (all zeros) trimmed from the end: no data.
    pub trimmed_zero_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct RecoverReport {
    pub dir: String,
    pub dry_run: bool,
    pub links: Vec<LinkRecovery>,
    pub dropped: Vec<DroppedRegion>,
    pub manifest_rebuilt: bool,
    pub manifest_problem: Option<String>,
    pub changed: bool,
}

/// One piece: one pass over the burst (manifest, each link, the rebuilt manifest) whose decisions
/// all feed one report, and which the dry run must take exactly as the real one.
pub fn recover_burst(dir: &Path, dry_run: bool) -> Result<RecoverReport, RecoverError> {
    check_dir(dir)?;
    let mut manifest_problems = Vec::new();
    let old = match Manifest::read(dir) {
        Ok(m) => Some(m),
        Err(e @ ManifestError::FutureVersion { .. }) => {
            return Err(RecoverError::Refused(format!("{e}; nothing was changed")));
        }
        Err(e) => {
            manifest_problems.push(e.to_string());
            None
        }
    };
    let coded = old.as_ref().and_then(|m| m.coded.as_ref());
    if let Some(codec) = coded {
        // A copy an export made (its link files `<file>.snbl`): nothing was torn in a
        // recording, and rebuilding would call every link missing.
        return Err(RecoverError::Refused(format!(
            "{}: a coded copy of a sealed burst (codec {codec}), not a recording: nothing to recover; `snbuf verify` checks it",
            dir.display()
        )));
    }
    let frame_step_ticks = old
        .as_ref()
        .and_then(|m| m.frame.as_ref())
        .map(|f| f.step_ticks());
    let files = link_files(dir, old.as_ref())?;
    if old.is_none() && files.is_empty() {
        return Err(RecoverError::Refused(format!(
            "{}: no manifest and no link data files: not a burst, nothing to recover",
            dir.display()
        )));
    }

    // Read everything first: if anything must be refused, nothing is changed.
    let mut scans: Vec<(u32, String, PathBuf, Option<ScanReport>)> = Vec::new();
    for (link, name) in files {
        if name.contains('/') || name.contains("..") {
            return Err(RecoverError::Refused(format!(
                "manifest names file '{name}' outside the burst; nothing was changed"
            )));
        }
        let path = dir.join(&name);
        let report = match std::fs::File::open(&path) {
            Ok(f) => Some(
                scan(
                    &f,
                    Expect {
                        link: Some(link),
                        frame_step_ticks,
                        frame: old.as_ref().and_then(Manifest::frame_layout),
                    },
                )
                .map_err(|cause| BurstDirError::Io {
                    path: path.clone(),
                    cause,
                })?,
            ),
            Err(_) => None,
        };
        if let Some(End::FutureVersion { offset, version }) = report.as_ref().map(|r| &r.end) {
            return Err(RecoverError::Refused(format!(
                "{}: chunk at offset {offset} has format version {version}, newer than this snbuf ({}); nothing was changed",
                path.display(),
                crate::chunk::FORMAT_VERSION
            )));
        }
        scans.push((link, name, path, report));
    }

    let mut links = Vec::new();
    let mut dropped = Vec::new();
    let mut records = Vec::new();
    let mut changed = false;
    let link_count = scans.len();
    for (link, name, path, report) in scans {
        let old_record = old
            .as_ref()
            .and_then(|m| m.links.iter().find(|l| l.link == link))
            .cloned();
        let Some(report) = report else {
            dropped.push(DroppedRegion {
                file: name.clone(),
                offset: 0,
                bytes: 0,
                why: "the file is missing".into(),
            });
            records.push(LinkRecord {
                state: LinkState::Failed,
                error: Some(format!("{}: missing at recovery", path.display())),
                data: LinkData::default(),
                ..old_record.unwrap_or_else(|| empty_record(dir, link, &name))
            });
            continue;
        };
        let mut trimmed_zero_bytes = 0;
        // Recovery keeps a prefix of whole chunks: it cuts only where one ends.
        assert!(
            report.valid_bytes <= report.file_bytes
                && report.valid_bytes
                    == report
                        .chunks
                        .last()
                        .map_or(0, |c| c.offset + c.stride_bytes as u64),
            "{}: the kept prefix ends at a chunk boundary inside the file",
            path.display()
        );
        if report.file_bytes > report.valid_bytes {
            // Then what is cut off, zeros or a dropped region, is all of the file past the prefix.
            debug_assert!(
                match &report.end {
                    End::Clean { zero_tail_bytes } => {
                        report.valid_bytes + zero_tail_bytes == report.file_bytes
                    }
                    End::TornTail { offset, .. }
                    | End::BadChunk { offset, .. }
                    | End::FutureVersion { offset, .. } => *offset == report.valid_bytes,
                },
                "what is cut off starts where the kept prefix ends"
            );
            match &report.end {
                End::Clean { zero_tail_bytes } => trimmed_zero_bytes = *zero_tail_bytes,
                End::TornTail { offset, why, .. } | End::BadChunk { offset, why, .. } => dropped.push(DroppedRegion {
                    file: name.clone(),
                    offset: *offset,
                    bytes: report.file_bytes - offset,
                    why: if report.chunks_after_end > 0 {
                        format!("{why}; {} valid chunk(s) after it are not contiguous with the prefix", report.chunks_after_end)
                    } else {
                        why.clone()
                    },
                }),
                End::FutureVersion { .. } => unreachable!("refused above"),
            }
            if !dry_run {
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|cause| BurstDirError::Io {
                        path: path.clone(),
                        cause,
                    })?;
                f.set_len(report.valid_bytes)
                    .and_then(|_| f.sync_all())
                    .map_err(|cause| BurstDirError::Io {
                        path: path.clone(),
                        cause,
                    })?;
            }
            changed = true;
        }
        let base = old_record.unwrap_or_else(|| empty_record(dir, link, &name));
        // Window frames the kept data does not hold were lost (in the crash, or with a dropped
        // region): counted, so that the burst states its loss rather than hiding it.
        let missing = old
            .as_ref()
            .and_then(|m| missing_window_frames(m, &report))
            .unwrap_or(0);
        let lost_frames = base.lost_frames.max(missing);
        if lost_frames != base.lost_frames {
            changed = true;
        }
        records.push(LinkRecord {
            lost_frames,
            data: report.data(),
            ..base
        });
        links.push(LinkRecovery {
            link,
            file: name,
            kept_chunks: report.chunks.len() as u64,
            kept_frames: report.frames(),
            kept_bytes: report.payload_bytes(),
            trimmed_zero_bytes,
        });
    }

    assert_eq!(
        records.len(),
        link_count,
        "a manifest record for every link file"
    );
    debug_assert!(
        records.windows(2).all(|w| w[0].link < w[1].link),
        "one record per link, in link order"
    );
    let state_ok = old
        .as_ref()
        .is_some_and(|m| matches!(m.state, BurstState::Sealed | BurstState::Recovered));
    let counts_agree = old.as_ref().is_some_and(|m| m.links == records);
    let manifest_rebuilt = !(state_ok && counts_agree && !changed);
    if manifest_rebuilt {
        let continued_in = old.as_ref().and_then(|m| continuation_made(dir, m));
        let unmade = old
            .as_ref()
            .and_then(|m| m.continued_in.as_ref())
            .filter(|next| continued_in.as_ref() != Some(*next));
        let summary = format!(
            "recovered at {} ns: {} link(s), {} region(s) dropped{}{}",
            snbuf_quantity::now_unix_ns(),
            records.len(),
            dropped.len(),
            if old.is_none() {
                ", manifest rebuilt from the data"
            } else {
                ""
            },
            match unmade {
                Some(next) => format!("; its continuation {next} was never made (not beside it)"),
                None => String::new(),
            }
        );
        let m = match old {
            Some(m) => Manifest {
                state: BurstState::Recovered,
                links: records,
                recovery: Some(summary),
                // Whatever was checked before, the data is what recovery kept now.
                verified: None,
                continued_in,
                ..m
            },
            None => Manifest {
                format: MANIFEST_FORMAT.into(),
                format_version: MANIFEST_VERSION,
                burst_id: dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                state: BurstState::Recovered,
                created_unix_ns: snbuf_quantity::now_unix_ns(),
                sealed_unix_ns: None,
                trigger: None,
                triggers: Vec::new(),
                frame: None,
                method: "unknown".into(),
                durability: "unknown".into(),
                links: records,
                verified: None,
                recovery: Some(summary),
                run_number: None,
                unit: None,
                continues: None,
                continued_in: None,
                coded: None,
                injected_faults: Vec::new(),
            },
        };
        assert!(
            m.state == BurstState::Recovered && m.links.len() == link_count,
            "a rebuilt manifest says it was recovered and lists every link file"
        );
        if !dry_run {
            m.write_atomic(dir)?;
        }
        changed = true;
    }
    Ok(RecoverReport {
        dir: dir.display().to_string(),
        dry_run,
        links,
        dropped,
        manifest_rebuilt,
        manifest_problem: manifest_problems.pop(),
        changed,
    })
}

/// The burst that continues this one (--max-burst), as its manifest names it, unless it was
/// never made: a unit stopped before it opened the next burst of the chain leaves the name
/// pointing at nothing, and the rest of the windows that joined was recorded nowhere (its
/// triggers' covered ends say how far this burst went). That is what a unit stopped mid-chain
/// leaves: a burst still recording (the next one is started as its writers finish, before it
/// seals). Only such a burst's name with no directory beside it is dropped: a sealed or
/// recovered burst whose next one is not beside it (exported and deleted, or this burst copied
/// elsewhere) keeps the name, as does, wrongly but rarely, one sealed while its next burst
/// failed to open.
fn continuation_made(dir: &Path, m: &Manifest) -> Option<String> {
    let next = m.continued_in.clone()?;
    if m.state != BurstState::Recording {
        return Some(next);
    }
    // The burst's own directory, wherever it was named from (`.`, a link to it): its parent
    // is the output. When that cannot be told, or the look fails, the name is kept.
    let Ok(dir) = dir.canonicalize() else {
        return Some(next);
    };
    let beside = dir.parent().map(|output| output.join(&next));
    let gone = beside.is_some_and(|d| matches!(d.try_exists(), Ok(false)));
    (!gone).then_some(next)
}

/// Frames of the trigger window of `m` that the data of `report` lacks (the whole window when
/// the link has no data); None without a window.
fn missing_window_frames(m: &Manifest, report: &ScanReport) -> Option<u64> {
    if let Some(c) = window_coverage(m, report) {
        return Some(c.frames_in_window.saturating_sub(c.frames_present));
    }
    let (t, f) = (m.trigger.as_ref()?, m.frame.as_ref()?);
    (f.step_ticks() > 0 && report.chunks.is_empty()).then(|| {
        t.window_end_timestamp
            .saturating_sub(t.window_start_timestamp)
            .div_ceil(f.step_ticks())
    })
}

/// A record rebuilt from the file alone; a file on another output (a symbolic link in the
/// burst directory) keeps saying where it lives.
fn empty_record(dir: &Path, link: u32, name: &str) -> LinkRecord {
    debug_assert!(
        !name.contains('/') && !name.contains(".."),
        "a record names a file inside the burst"
    );
    LinkRecord {
        file: name.to_string(),
        path: std::fs::read_link(dir.join(name))
            .ok()
            .filter(|p| p.is_absolute())
            .map(|p| p.display().to_string()),
        ..LinkRecord::empty(link)
    }
}
