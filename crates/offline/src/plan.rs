//! How a burst's window becomes DUNE records: cut into time slices of a set length (so that no
//! fragment is tens of GB), each slice one record with one fragment per link. A fragment holds
//! the link's frames whose timestamps fall in the slice, unchanged; where frames of the slice
//! are missing (lost when recorded, or cut off by recovery) its header says so.

use snbuf_burst::LinkReader;

use crate::dune::{EMPTY, INCOMPLETE};

/// One time slice of the window: [begin, end) in ticks, numbered from 1 as DUNE's are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slice {
    pub number: u64,
    pub begin: u64,
    pub end: u64,
}

/// The window [start, end) cut into slices of `slice_ticks` (the last one shorter).
pub fn slices(start: u64, end: u64, slice_ticks: u64) -> Vec<Slice> {
    assert!(slice_ticks > 0, "a slice lasts at least a tick");
    let mut v = Vec::new();
    let mut begin = start;
    while begin < end {
        let stop = begin.saturating_add(slice_ticks).min(end);
        v.push(Slice {
            number: v.len() as u64 + 1,
            begin,
            end: stop,
        });
        begin = stop;
    }
    v
}

/// How many timestamps `phase + k * step` lie in [begin, end).
pub fn grid_points(begin: u64, end: u64, phase: u64, step: u64) -> u64 {
    if end <= begin || step == 0 {
        return 0;
    }
    // The first grid point at or after `t`.
    let first_at = |t: u64| {
        let r = t % step;
        let p = phase % step;
        if r <= p {
            t - r + p
        } else {
            t - r + step + p
        }
    };
    let (a, b) = (first_at(begin), first_at(end));
    b.saturating_sub(a) / step
}

/// One link's fragment of one slice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentPlan {
    pub link: u32,
    pub frames: u64,
    /// Frames the slice should hold, by the link's timestamp grid.
    pub expected: u64,
}

impl FragmentPlan {
    /// The FragmentHeader's status bits: empty and incomplete (none of its frames), incomplete
    /// (some missing).
    pub fn status_bits(&self) -> u32 {
        if self.frames == 0 && self.expected > 0 {
            EMPTY
        } else if self.frames < self.expected {
            INCOMPLETE
        } else {
            0
        }
    }
}

/// Plans `link`'s fragment of `slice`: its frames counted from the chunk headers (reading only
/// chunks across the slice's edges), the expected count from the link's grid.
pub fn plan_fragment(
    reader: &LinkReader,
    link: u32,
    slice: &Slice,
) -> Result<FragmentPlan, snbuf_burst::ReadError> {
    let step = reader.frame_step_ticks.max(1);
    let phase = reader
        .chunks()
        .first()
        .map(|c| c.first_timestamp % step)
        .unwrap_or(slice.begin % step);
    Ok(FragmentPlan {
        link,
        frames: reader.count_between(slice.begin, slice.end)?,
        expected: grid_points(slice.begin, slice.end, phase, step),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_cut_into_numbered_slices() {
        let s = slices(100, 350, 100);
        assert_eq!(
            s,
            vec![
                Slice {
                    number: 1,
                    begin: 100,
                    end: 200
                },
                Slice {
                    number: 2,
                    begin: 200,
                    end: 300
                },
                Slice {
                    number: 3,
                    begin: 300,
                    end: 350
                },
            ]
        );
        assert!(slices(5, 5, 10).is_empty());
    }

    #[test]
    fn grid_points_count_the_frames_a_slice_should_hold() {
        // Frames at 3, 13, 23, ...: [0, 30) holds 3, 13, 23; [13, 23) holds 13; [14, 23) none.
        assert_eq!(grid_points(0, 30, 3, 10), 3);
        assert_eq!(grid_points(13, 23, 3, 10), 1);
        assert_eq!(grid_points(14, 23, 3, 10), 0);
        assert_eq!(grid_points(0, 0, 3, 10), 0);
        for (b, e) in [(0u64, 97u64), (5, 200), (99, 100), (100, 1000)] {
            let brute = (b..e).filter(|t| t % 7 == 4).count() as u64;
            assert_eq!(grid_points(b, e, 4, 7), brute, "[{b}, {e})");
        }
    }

    #[test]
    fn missing_frames_are_marked_in_the_status_bits() {
        let f = |frames, expected| {
            FragmentPlan {
                link: 0,
                frames,
                expected,
            }
            .status_bits()
        };
        assert_eq!(f(10, 10), 0);
        assert_eq!(f(9, 10), INCOMPLETE);
        assert_eq!(f(0, 10), (1 << 6) | (1 << 1));
    }
}
