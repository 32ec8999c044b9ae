//! `verify`: checks a burst without changing anything.
//!
//! Every chunk of every link file is read (magic, header checksum, payload checksum, sequence,
//! link, timestamps against the frame type's step), the result is compared with the manifest,
//! and the trigger window's coverage is computed. A burst is valid when the manifest is sealed
//! (or recovered), every file ends cleanly, the counts agree, and every frame of the window the
//! data lacks is accounted for as lost.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::manifest::{link_file_name, link_of_file_name, BurstState, Manifest, ManifestError};
use crate::scan::{scan, End, Expect, ScanReport, TimestampGap};
use crate::trigger_coverage::{trigger_coverage, TriggerCoverage};

#[derive(Debug, thiserror::Error)]
pub enum BurstDirError {
    #[error("{0}: no such directory")]
    NotFound(PathBuf),
    #[error("{0}: not a directory")]
    NotADirectory(PathBuf),
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
}

#[derive(Clone, Debug, Serialize)]
pub struct Coverage {
    pub window_start_timestamp: u64,
    pub window_end_timestamp: u64,
    /// Frames of the window that are in the data.
    pub frames_present: u64,
    /// Frames the window spans at the frame type's step.
    pub frames_in_window: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct LinkVerify {
    pub link: u32,
    pub file: String,
    pub chunks: u64,
    pub frames: u64,
    pub payload_bytes: u64,
    pub first_timestamp: Option<u64>,
    pub last_timestamp: Option<u64>,
    pub coverage: Option<Coverage>,
    pub gaps: Vec<TimestampGap>,
    pub end: Option<End>,
    pub chunks_after_end: u64,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct VerifyReport {
    pub dir: String,
    pub burst_id: Option<String>,
    pub state: Option<BurstState>,
    pub links: Vec<LinkVerify>,
    /// Problems of the burst as a whole (manifest).
    pub problems: Vec<String>,
    pub valid: bool,
    /// Each trigger the burst answers, and whether its own window is whole in it.
    pub triggers: Vec<TriggerCoverage>,
    /// Faults injected while it was recorded, as its manifest says (for tests only): its data
    /// checks out or not as any burst's, but it is no evidence of snbuf's durability.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected_faults: Vec<String>,
}

impl VerifyReport {
    /// Every problem found, of the burst and of its links.
    pub fn problem_count(&self) -> u64 {
        self.problems.len() as u64
            + self
                .links
                .iter()
                .map(|l| l.problems.len() as u64)
                .sum::<u64>()
    }
}

/// The manifest's second write: `report`'s verdict noted in the sealed burst at `dir` (what
/// `snbuf ls` shows), atomically. The data it checked is sealed and durable whether or not this
/// note reaches the medium, so a failure here is the caller's to say, not a failed burst.
pub fn note_verified(
    dir: &Path,
    manifest: &mut Manifest,
    report: &VerifyReport,
) -> Result<(), ManifestError> {
    assert!(
        matches!(manifest.state, BurstState::Sealed | BurstState::Failed),
        "a verdict is noted in a sealed burst"
    );
    assert_eq!(
        report.valid,
        report.problem_count() == 0,
        "the verdict agrees with the problems found"
    );
    manifest.verified = Some(crate::manifest::Verified {
        valid: report.valid,
        problems: report.problem_count(),
        at_unix_ns: snbuf_quantity::now_unix_ns(),
    });
    manifest.write_atomic(dir)
}

/// The link files of a burst: those the manifest lists and any `link-NNNN.dat` present.
pub(crate) fn link_files(
    dir: &Path,
    manifest: Option<&Manifest>,
) -> Result<BTreeMap<u32, String>, BurstDirError> {
    let mut files = BTreeMap::new();
    if let Some(m) = manifest {
        for l in &m.links {
            files.insert(l.link, l.file.clone());
        }
    }
    let entries = std::fs::read_dir(dir).map_err(|cause| BurstDirError::Io {
        path: dir.to_path_buf(),
        cause,
    })?;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(link) = link_of_file_name(&name) {
            files.entry(link).or_insert(name);
        }
    }
    Ok(files)
}

pub(crate) fn check_dir(dir: &Path) -> Result<(), BurstDirError> {
    if !dir.exists() {
        return Err(BurstDirError::NotFound(dir.to_path_buf()));
    }
    if !dir.is_dir() {
        return Err(BurstDirError::NotADirectory(dir.to_path_buf()));
    }
    Ok(())
}

/// Reads the manifest, turning its absence or damage into a problem line.
pub(crate) fn read_manifest(dir: &Path, problems: &mut Vec<String>) -> Option<Manifest> {
    let problems_before = problems.len();
    let manifest = match Manifest::read(dir) {
        Ok(m) => Some(m),
        Err(ManifestError::Missing { .. }) => {
            problems.push("no manifest.json (recording interrupted before it was written? `snbuf recover` rebuilds it)".into());
            None
        }
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    debug_assert!(
        manifest.is_some() || problems.len() > problems_before,
        "a manifest that cannot be read is a problem"
    );
    manifest
}

pub fn verify_burst(dir: &Path) -> Result<VerifyReport, BurstDirError> {
    check_dir(dir)?;
    let mut problems = Vec::new();
    let manifest = read_manifest(dir, &mut problems);
    if let Some(m) = &manifest {
        match m.state {
            BurstState::Sealed | BurstState::Recovered => {}
            BurstState::Recording => {
                problems.push("burst was never sealed (state: recording)".into())
            }
            BurstState::Failed => problems.push("burst is marked failed".into()),
        }
    }
    let files = link_files(dir, manifest.as_ref())?;
    if files.is_empty() {
        problems.push("no link data files in the burst".into());
    }
    let mut links = Vec::new();
    let mut scans: Vec<(u32, Option<ScanReport>)> = Vec::new();
    let link_count = files.len();
    for (link, name) in files {
        let (lv, report) = verify_link(dir, link, name, manifest.as_ref())?;
        links.push(lv);
        scans.push((link, report));
    }
    assert_eq!(links.len(), link_count, "a verdict for every link file");
    let valid = problems.is_empty() && links.iter().all(|l| l.problems.is_empty());
    debug_assert!(
        !valid || (manifest.is_some() && !links.is_empty()),
        "a burst without a manifest or without data is never valid"
    );
    debug_assert!(
        !valid
            || links
                .iter()
                .all(|l| matches!(l.end, Some(End::Clean { .. }))),
        "in a valid burst every link file was read to a clean end"
    );
    let scans: Vec<(u32, Option<&ScanReport>)> =
        scans.iter().map(|(l, r)| (*l, r.as_ref())).collect();
    let triggers = manifest
        .as_ref()
        .map(|m| trigger_coverage(m, &scans, valid))
        .unwrap_or_default();
    debug_assert!(
        valid || triggers.iter().all(|t| !t.whole),
        "no window is whole in a burst that is not valid"
    );
    Ok(VerifyReport {
        dir: dir.display().to_string(),
        burst_id: manifest.as_ref().map(|m| m.burst_id.clone()),
        state: manifest.as_ref().map(|m| m.state),
        links,
        problems,
        valid,
        triggers,
        injected_faults: manifest
            .as_ref()
            .map(|m| m.injected_faults.clone())
            .unwrap_or_default(),
    })
}

/// One link file of the burst in `dir`, read whole: its verdict, and its scan when it could be
/// read (None: the manifest names a file that is not the link's, or it cannot be opened).
fn verify_link(
    dir: &Path,
    link: u32,
    name: String,
    manifest: Option<&Manifest>,
) -> Result<(LinkVerify, Option<ScanReport>), BurstDirError> {
    let record = manifest.and_then(|m| m.links.iter().find(|l| l.link == link));
    let mut lv = LinkVerify {
        link,
        file: name.clone(),
        chunks: 0,
        frames: 0,
        payload_bytes: 0,
        first_timestamp: None,
        last_timestamp: None,
        coverage: None,
        gaps: vec![],
        end: None,
        chunks_after_end: 0,
        problems: vec![],
    };
    if name != link_file_name(link) || name.contains('/') {
        lv.problems.push(format!(
            "manifest names file '{name}' for link {link}; expected {}",
            link_file_name(link)
        ));
        return Ok((lv, None));
    }
    let path = dir.join(&name);
    // The link file, or its coded form as an export wrote it, decoded (and so checked whole).
    let codec = manifest.and_then(|m| m.coded.as_deref());
    let file = match crate::coded_link::open_link_file(dir, &name, codec) {
        Ok(f) => f,
        Err(e) => {
            lv.problems.push(e.to_string());
            return Ok((lv, None));
        }
    };
    let report = scan(
        &file,
        Expect {
            link: Some(link),
            frame_step_ticks: manifest
                .and_then(|m| m.frame.as_ref())
                .map(|f| f.step_ticks()),
            frame: manifest.and_then(Manifest::frame_layout),
        },
    )
    .map_err(|cause| BurstDirError::Io {
        path: path.clone(),
        cause,
    })?;
    fill_link(&mut lv, &report, manifest, record);
    Ok((lv, Some(report)))
}

fn fill_link(
    lv: &mut LinkVerify,
    report: &ScanReport,
    manifest: Option<&Manifest>,
    record: Option<&crate::manifest::LinkRecord>,
) {
    lv.chunks = report.chunks.len() as u64;
    lv.frames = report.frames();
    lv.payload_bytes = report.payload_bytes();
    lv.first_timestamp = report.first_timestamp();
    lv.last_timestamp = report.last_timestamp();
    lv.gaps = report.gaps.clone();
    lv.end = Some(report.end.clone());
    lv.chunks_after_end = report.chunks_after_end;
    match &report.end {
        End::Clean { .. } => {}
        End::TornTail { offset, bytes, why } => lv
            .problems
            .push(format!("torn tail at offset {offset} ({bytes} B): {why}")),
        End::BadChunk { offset, bytes, why } => lv
            .problems
            .push(format!("bad chunk at offset {offset} ({bytes} B): {why}")),
        End::FutureVersion { offset, version } => lv.problems.push(format!(
            "chunk at offset {offset} has format version {version}, newer than this snbuf ({})",
            crate::chunk::FORMAT_VERSION
        )),
    }
    debug_assert!(
        report.is_clean() || !lv.problems.is_empty(),
        "a file that does not end cleanly is a problem"
    );
    if report.chunks_after_end > 0 {
        lv.problems.push(format!(
            "{} valid chunk(s) after the bad one are cut off from the data",
            report.chunks_after_end
        ));
    }
    let Some(record) = record else {
        if manifest.is_some() {
            lv.problems
                .push("link file not listed in the manifest".into());
        }
        return;
    };
    if record.data.chunks != lv.chunks || record.data.frames != lv.frames {
        lv.problems.push(format!(
            "manifest says {} chunks / {} frames, the file holds {} / {}",
            record.data.chunks, record.data.frames, lv.chunks, lv.frames
        ));
    }
    if let Some(err) = &record.error {
        lv.problems
            .push(format!("link failed while recording: {err}"));
    }
    let Some(cov) = manifest.and_then(|m| window_coverage(m, report)) else {
        return;
    };
    let missing = cov.frames_in_window.saturating_sub(cov.frames_present);
    lv.coverage = Some(cov);
    if missing > record.lost_frames {
        lv.problems.push(format!(
            "{missing} frame(s) of the window are not in the data and the manifest accounts for {} lost",
            record.lost_frames
        ));
    }
}

/// How much of the burst's trigger window one link's data covers (None without a trigger window
/// or frame information in the manifest, or without data).
pub(crate) fn window_coverage(m: &Manifest, report: &ScanReport) -> Option<Coverage> {
    let (first, last) = (report.first_timestamp()?, report.last_timestamp()?);
    let (trigger, frame) = (m.trigger.as_ref()?, m.frame.as_ref()?);
    if frame.step_ticks() == 0 {
        return None;
    }
    let (ws, we) = (trigger.window_start_timestamp, trigger.window_end_timestamp);
    let gap_frames: u64 = report.gaps.iter().map(|g| g.missing_frames).sum();
    let (present, in_window) =
        frames_in_window(first, last, gap_frames, ws, we, frame.step_ticks());
    Some(Coverage {
        window_start_timestamp: ws,
        window_end_timestamp: we,
        frames_present: present,
        frames_in_window: in_window,
    })
}

/// Of a link whose frames lie on the grid `first + k * step` up to `last`, with `gap_frames`
/// missing between them: the frames it holds inside the window `[ws, we)`, and the grid points
/// the window holds. The window need not start on a frame, and the data may begin before it:
/// both counts start at the first grid point at or after `ws`.
fn frames_in_window(
    first: u64,
    last: u64,
    gap_frames: u64,
    ws: u64,
    we: u64,
    step: u64,
) -> (u64, u64) {
    assert!(step > 0, "frames on a grid of some ticks");
    let grid_start = if first >= ws {
        first - (first - ws) / step * step
    } else {
        first + (ws - first).div_ceil(step) * step
    };
    debug_assert!(
        grid_start >= ws && grid_start - ws < step,
        "the first frame of the grid at or after the window's start"
    );
    let in_window = if grid_start < we {
        (we - 1 - grid_start) / step + 1
    } else {
        0
    };
    // From the first frame inside the window: frames before it are not the window's.
    let present_span_start = first.max(grid_start);
    let present_span_end = last.saturating_add(step).min(we);
    let present = present_span_end
        .saturating_sub(present_span_start)
        .div_ceil(step)
        .saturating_sub(gap_frames);
    (present, in_window)
}

#[cfg(test)]
mod tests {
    use super::frames_in_window;

    #[test]
    fn a_window_counts_its_own_frames_only() {
        // Frames every 10 ticks from 0 to 100, none missing; windows on and off the grid.
        assert_eq!(frames_in_window(0, 100, 0, 0, 110, 10), (11, 11));
        assert_eq!(frames_in_window(0, 100, 0, 5, 26, 10), (2, 2));
        // Data from before the window: frame 0 is not the window's. Frames at 0 and 10 only,
        // the window [5, 26) holds 10 and 20, and 20 is missing.
        assert_eq!(frames_in_window(0, 10, 0, 5, 26, 10), (1, 2));
        // A gap inside counts as missing; a window past the data holds none of it.
        assert_eq!(frames_in_window(0, 100, 3, 0, 110, 10), (8, 11));
        assert_eq!(frames_in_window(0, 100, 0, 200, 300, 10), (0, 10));
    }
}
