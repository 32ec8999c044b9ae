//! Whether each trigger a burst answers has its own window whole in it: every frame of the
//! window on every link, none cut, none lost. This is what "recorded" means to a physicist. A
//! burst can be valid (every chunk checks out, every missing frame counted as lost) and still
//! hold only part of a trigger's window; `verify` says both.
//!
//! The burst-wide `window_coverage` counts every gap of a link against the burst's whole span;
//! here each trigger's window counts only the gaps inside it, so a loss in the first alert's
//! window does not make a later joined alert's window look cut, and the reverse.

use serde::Serialize;

use crate::manifest::{AnsweredTrigger, Manifest};
use crate::scan::{ScanReport, TimestampGap};

/// One trigger's window in this burst.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TriggerCoverage {
    pub trigger_id: String,
    /// The window the trigger asked for, [start, end) in ticks.
    pub window_start_timestamp: u64,
    pub window_end_timestamp: u64,
    /// What of it the burst says it records (less than the window when an extension was cut, or
    /// when the rest went on in the next burst).
    pub covered_start_timestamp: u64,
    pub covered_end_timestamp: u64,
    /// Over every link: the frames the asked window spans at the frame type's step, and those of
    /// them in the data.
    pub frames_in_window: u64,
    pub frames_present: u64,
    /// The links that hold fewer than every frame of the window.
    pub links_short: Vec<u32>,
    /// The whole window is in this burst: covered as asked, every link holds every frame of it,
    /// and the burst is valid.
    pub whole: bool,
}

impl TriggerCoverage {
    pub fn frames_missing(&self) -> u64 {
        self.frames_in_window - self.frames_present
    }

    /// One line for a person: whole, or what of the window is missing and why.
    pub fn describe(&self) -> String {
        if self.whole {
            return format!(
                "trigger {}: its whole window is here ({} frames)",
                self.trigger_id, self.frames_in_window
            );
        }
        let mut why = Vec::new();
        if self.frames_present < self.frames_in_window {
            why.push(format!(
                "{} of its {} frames missing (links {:?})",
                self.frames_missing(),
                self.frames_in_window,
                self.links_short
            ));
        }
        if self.covered_start_timestamp > self.window_start_timestamp
            || self.covered_end_timestamp < self.window_end_timestamp
        {
            why.push(format!(
                "the burst records [{}, {}) of its window [{}, {})",
                self.covered_start_timestamp,
                self.covered_end_timestamp,
                self.window_start_timestamp,
                self.window_end_timestamp
            ));
        }
        if why.is_empty() {
            why.push("the burst is not valid".into());
        }
        format!("trigger {}: NOT WHOLE: {}", self.trigger_id, why.join("; "))
    }
}

/// The triggers `m` answers: its `triggers` list, or for a burst recorded before triggers could
/// join, its own window under its burst id.
fn answered(m: &Manifest) -> Vec<AnsweredTrigger> {
    if !m.triggers.is_empty() {
        return m.triggers.clone();
    }
    m.trigger
        .as_ref()
        .map(|t| AnsweredTrigger {
            taken_unix_ns: m.created_unix_ns,
            ..AnsweredTrigger::whole(&m.burst_id, t)
        })
        .into_iter()
        .collect()
}

/// Each trigger of `m` against the links' data: `links` has every link file of the burst, with
/// its scan (None when it could not be read: none of the window is in it); `valid` is the
/// burst's verdict. Empty without frame information (no grid to count on).
pub fn trigger_coverage(
    m: &Manifest,
    links: &[(u32, Option<&ScanReport>)],
    valid: bool,
) -> Vec<TriggerCoverage> {
    let Some(step) = m.frame.as_ref().map(|f| f.step_ticks()).filter(|&s| s > 0) else {
        return vec![];
    };
    answered(m)
        .into_iter()
        .map(|t| {
            let (ws, we) = (t.window_start_timestamp, t.window_end_timestamp);
            let mut frames_in_window = 0;
            let mut frames_present = 0;
            let mut links_short = Vec::new();
            for (link, report) in links {
                let (present, in_window) = report.map_or((0, grid_points(ws, we, ws, step)), |r| {
                    link_frames_in(r, ws, we, step)
                });
                debug_assert!(present <= in_window, "present frames are the window's");
                frames_in_window += in_window;
                frames_present += present;
                if present < in_window {
                    links_short.push(*link);
                }
            }
            let covered_as_asked = t.covered_start_timestamp <= ws && t.covered_end_timestamp >= we;
            TriggerCoverage {
                whole: valid
                    && covered_as_asked
                    && !links.is_empty()
                    && links_short.is_empty()
                    && frames_present == frames_in_window,
                trigger_id: t.trigger_id,
                window_start_timestamp: ws,
                window_end_timestamp: we,
                covered_start_timestamp: t.covered_start_timestamp,
                covered_end_timestamp: t.covered_end_timestamp,
                frames_in_window,
                frames_present,
                links_short,
            }
        })
        .collect()
}

/// Grid points `origin + k * step` inside [ws, we) (`origin` any point of the grid).
fn grid_points(ws: u64, we: u64, origin: u64, step: u64) -> u64 {
    let first = first_grid_at_or_after(ws, origin, step);
    if first < we {
        (we - 1 - first) / step + 1
    } else {
        0
    }
}

fn first_grid_at_or_after(ts: u64, origin: u64, step: u64) -> u64 {
    if origin >= ts {
        origin - (origin - ts) / step * step
    } else {
        origin + (ts - origin).div_ceil(step) * step
    }
}

/// Of one link's data: the frames it holds inside [ws, we) and the grid points the window spans
/// (on the link's own grid, which starts at its first frame).
fn link_frames_in(r: &ScanReport, ws: u64, we: u64, step: u64) -> (u64, u64) {
    let (Some(first), Some(last)) = (r.first_timestamp(), r.last_timestamp()) else {
        return (0, grid_points(ws, we, ws, step));
    };
    let in_window = grid_points(ws, we, first, step);
    // The span of the data inside the window, then the gaps inside that span taken out.
    let lo = first.max(ws);
    let hi = last.saturating_add(step).min(we);
    let spanned = if hi > lo {
        grid_points(lo, hi, first, step)
    } else {
        0
    };
    let missing: u64 = r.gaps.iter().map(|g| gap_frames_in(g, lo, hi, step)).sum();
    let present = spanned.saturating_sub(missing);
    (present.min(in_window), in_window)
}

/// The frames gap `g` lacks inside [lo, hi). Between chunks the missing frames are the grid
/// points strictly between the two timestamps; inside a chunk their place is unknown, so all of
/// them count when the chunk reaches into the range (a chunk straddles a window's edge only at
/// the window's two ends: an overcount there says "not whole" of a window that might be).
fn gap_frames_in(g: &TimestampGap, lo: u64, hi: u64, step: u64) -> u64 {
    if g.missing_frames == 0 || hi <= lo {
        return 0;
    }
    if g.inside_chunk {
        // The missing frames lie strictly between the two timestamps.
        let overlaps = g.after_timestamp.saturating_add(step) < hi
            && g.resume_timestamp >= lo.saturating_add(step);
        return if overlaps { g.missing_frames } else { 0 };
    }
    let gap_lo = g.after_timestamp.saturating_add(step).max(lo);
    let gap_hi = g.resume_timestamp.min(hi);
    if gap_hi <= gap_lo {
        return 0;
    }
    grid_points(gap_lo, gap_hi, g.after_timestamp, step).min(g.missing_frames)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::End;

    /// A link's scan: frames every 10 ticks from `first` to `last`, with `gaps`.
    fn report(first: u64, last: u64, gaps: Vec<TimestampGap>) -> ScanReport {
        let mut r = ScanReport {
            file_bytes: 0,
            chunks: vec![],
            valid_bytes: 0,
            end: End::Clean { zero_tail_bytes: 0 },
            gaps,
            chunks_after_end: 0,
        };
        r.chunks.push(crate::scan::ChunkSeen {
            offset: 0,
            payload_offset: 0,
            stride_bytes: 0,
            sequence: 0,
            frame_count: ((last - first) / 10 + 1) as u32,
            first_timestamp: first,
            last_timestamp: last,
            payload_bytes: 0,
        });
        r
    }

    fn gap(after: u64, resume: u64, inside: bool) -> TimestampGap {
        TimestampGap {
            after_timestamp: after,
            resume_timestamp: resume,
            missing_frames: (resume - after) / 10 - 1,
            sequence: 0,
            inside_chunk: inside,
        }
    }

    #[test]
    fn a_gap_counts_against_the_windows_it_falls_in_only() {
        // Frames 0..=1000, 100 and 110 missing (between chunks).
        let r = report(0, 1000, vec![gap(90, 120, false)]);
        assert_eq!(
            link_frames_in(&r, 0, 200, 10),
            (18, 20),
            "the gap is inside"
        );
        assert_eq!(
            link_frames_in(&r, 500, 700, 10),
            (20, 20),
            "the gap is before"
        );
        assert_eq!(link_frames_in(&r, 105, 300, 10), (18, 19), "half the gap");
        // A window on no frame of the grid: [95, 125) holds 100, 110, 120; 120 is there.
        assert_eq!(link_frames_in(&r, 95, 125, 10), (1, 3));
    }

    #[test]
    fn data_that_ends_or_begins_inside_the_window_is_short() {
        let r = report(100, 500, vec![]);
        assert_eq!(link_frames_in(&r, 0, 600, 10), (41, 60));
        assert_eq!(link_frames_in(&r, 200, 300, 10), (10, 10));
        assert_eq!(link_frames_in(&r, 600, 700, 10), (0, 10));
    }

    #[test]
    fn a_gap_inside_a_chunk_counts_wherever_the_chunk_reaches_the_window() {
        let r = report(0, 1000, vec![gap(300, 400, true)]);
        assert_eq!(link_frames_in(&r, 350, 360, 10), (0, 1), "place unknown");
        assert_eq!(link_frames_in(&r, 500, 600, 10), (10, 10));
        // The frames at 300 and 400 are there: windows that end or begin on them hold no gap.
        assert_eq!(link_frames_in(&r, 280, 310, 10), (3, 3));
        assert_eq!(link_frames_in(&r, 400, 420, 10), (2, 2));
    }
}
