//! Trigger-window arithmetic as pure functions of timestamps, so that it is tested without
//! threads, buffers or files.
//!
//! A window is [start, end) in detector ticks. Frames lie on a grid: a link's frames are
//! `ticks_per_frame` apart, from wherever its first frame lies. Loss is counted on that grid, so
//! "frames recorded + frames lost = frames in the window" holds exactly for every link whose
//! data stays on its grid (the writers assert it).

use std::time::Duration;

use snbuf_burst::Window;
use snbuf_frames::DetectorClock;

/// When a trigger's window is centred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerAt {
    /// The newest frame buffered when the trigger arrives.
    Now,
    /// A detector timestamp (ticks). One older than the buffer records what is still there and
    /// counts the rest as lost.
    Timestamp(u64),
}

/// Why a trigger's window cannot be recorded.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum WindowError {
    #[error("no frame buffered yet to trigger on")]
    NothingBuffered,
    #[error("trigger at {at} is {ahead_s:.1} s ahead of the newest frame ({newest}); at most the buffer's {buffer_s:.1} s ahead is accepted")]
    TooFarAhead {
        at: u64,
        newest: u64,
        ahead_s: f64,
        buffer_s: f64,
    },
    #[error("pre {pre_s:.1}s is longer than the {buffer_s:.1}s buffer")]
    PreLongerThanBuffer { pre_s: f64, buffer_s: f64 },
    #[error("the window [{start}, {end}) is gone: it ended {gone_s:.1} s before the oldest frame any buffer holds ({oldest}); nothing of it can be recorded")]
    Gone {
        start: u64,
        end: u64,
        oldest: u64,
        gone_s: f64,
    },
}

/// The detector clock a unit's windows are cut in.
#[derive(Clone, Copy, Debug)]
pub struct WindowClock {
    /// Ticks between a link's frames (the frame type's own, or a sub-sampled link's step).
    pub frame_step_ticks: u64,
    /// The detector's clock: a second of `pre` or `post` is a second of it.
    pub clock: DetectorClock,
    /// How much of each link the latency buffer holds.
    pub buffer: Duration,
}

/// What the latency buffers hold when a trigger arrives: the newest frame over the links, and
/// the oldest frame every link still holds (the latest of the links' oldest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub newest: Option<u64>,
    pub oldest: Option<u64>,
    /// The oldest frame any link holds (the earliest of the links' oldest): a window that ends
    /// before it has left every buffer.
    pub oldest_anywhere: Option<u64>,
}

impl WindowClock {
    /// The window a trigger at `at` records: whole frames from `pre` before to `post` after,
    /// with how much of its start the buffers no longer hold (`not_buffered_s`).
    /// Refused when nothing is buffered yet, when `pre` reaches further back than the buffer,
    /// when `at` lies further ahead of the newest frame than the buffer is long (a clock
    /// mix-up, not a trigger: the burst would wait for data that is far away), or when the
    /// whole window has left every buffer (a burst of no frame would look like an answer).
    pub fn window(
        &self,
        held: Held,
        at: TriggerAt,
        pre: Duration,
        post: Duration,
    ) -> Result<Window, WindowError> {
        if pre > self.buffer {
            return Err(WindowError::PreLongerThanBuffer {
                pre_s: pre.as_secs_f64(),
                buffer_s: self.buffer.as_secs_f64(),
            });
        }
        let newest = held.newest.ok_or(WindowError::NothingBuffered)?;
        let t = match at {
            TriggerAt::Now => newest,
            TriggerAt::Timestamp(t) => t,
        };
        let ahead_limit_ticks = self.ticks(self.buffer);
        if t > newest.saturating_add(ahead_limit_ticks) {
            return Err(WindowError::TooFarAhead {
                at: t,
                newest,
                ahead_s: self.clock.seconds(t - newest),
                buffer_s: self.buffer.as_secs_f64(),
            });
        }
        let step = self.frame_step_ticks;
        assert!(step > 0, "a link's frames are some ticks apart");
        // Whole frames each side, so the window's length is a whole number of frames.
        let pre_ticks = self.ticks(pre) / step * step;
        let post_ticks = self.ticks(post).div_ceil(step) * step;
        assert!(
            pre_ticks.is_multiple_of(step) && post_ticks.is_multiple_of(step),
            "whole frames each side"
        );
        assert!(
            pre_ticks <= self.ticks(pre) && post_ticks >= self.ticks(post),
            "pre rounded down to whole frames, post up"
        );
        let (start, end) = (t.saturating_sub(pre_ticks), t.saturating_add(post_ticks));
        if let Some(oldest) = held.oldest_anywhere.filter(|&o| end <= o) {
            return Err(WindowError::Gone {
                start,
                end,
                oldest,
                gone_s: self.clock.seconds(oldest - end),
            });
        }
        assert!(
            held.oldest_anywhere.is_none_or(|o| end > o),
            "some of the window is still in a buffer"
        );
        let mut w = Window::new(t, start, end, self.clock.hz());
        let oldest = held.oldest.unwrap_or(newest);
        if oldest > start {
            w.not_buffered_s = Some(self.clock.seconds(oldest.min(end) - start));
        }
        // Around its trigger, whatever the timestamps (a window clipped at tick 0 or at the end
        // of the clock's range, from a stream that says it is there, is not whole frames long).
        assert!(w.window_start_timestamp <= t && t <= w.window_end_timestamp);
        Ok(w)
    }

    fn ticks(&self, d: Duration) -> u64 {
        self.clock.ticks(d)
    }
}

/// Frames on the grid through `from` that lie in [from, to): the frames a link owes from an
/// expected timestamp `from` up to `to`.
pub fn frames_between(from: u64, to: u64, ticks_per_frame: u64) -> u64 {
    debug_assert!(ticks_per_frame > 0);
    if to > from {
        (to - from).div_ceil(ticks_per_frame)
    } else {
        0
    }
}

/// Frames of the window before `first`, on the grid through `first`: what a link lacks at the
/// window's start when the first frame it has is `first`.
pub fn frames_before(window_start: u64, first: u64, ticks_per_frame: u64) -> u64 {
    assert!(ticks_per_frame > 0, "frames are some ticks apart");
    first.saturating_sub(window_start) / ticks_per_frame
}

/// Frames of [start, end) on the grid through `anchor`.
pub fn frames_in_window(start: u64, end: u64, anchor: u64, ticks_per_frame: u64) -> u64 {
    if end <= start {
        return 0;
    }
    let tpf = ticks_per_frame;
    assert!(tpf > 0, "frames are some ticks apart");
    // The first grid point at or after `start`.
    let first = if anchor >= start {
        anchor - (anchor - start) / tpf * tpf
    } else {
        anchor + (start - anchor).div_ceil(tpf) * tpf
    };
    debug_assert!(first >= start && first - start < tpf && on_grid(first, anchor, tpf));
    let n = frames_between(first, end, tpf);
    debug_assert!(
        n <= frames_between(start, end, tpf),
        "no more frames than the window has room for"
    );
    n
}

/// Frames missing inside a run of `frames` frames from `first` to `last`.
pub fn frames_missing_inside(first: u64, last: u64, frames: u64, ticks_per_frame: u64) -> u64 {
    assert!(
        first <= last && ticks_per_frame > 0,
        "a run from {first} to {last}"
    );
    debug_assert!(frames >= 1, "a run holds at least its first frame");
    ((last - first) / ticks_per_frame + 1).saturating_sub(frames)
}

/// Whether `ts` lies on the grid through `anchor`.
pub fn on_grid(ts: u64, anchor: u64, ticks_per_frame: u64) -> bool {
    debug_assert!(ticks_per_frame > 0);
    ts.abs_diff(anchor).is_multiple_of(ticks_per_frame)
}

/// The first of frames `from..n` whose timestamp is at or after `ts` (`n` if none), for
/// timestamps in non-decreasing order. The edges are tried first: a chunk is usually all inside
/// the window, and then two frames are read.
pub(crate) fn first_at_or_after(
    n: usize,
    from: usize,
    timestamp: impl Fn(usize) -> u64,
    ts: u64,
) -> usize {
    debug_assert!(from <= n, "a search from inside the frames");
    if from >= n || timestamp(from) >= ts {
        return from;
    }
    if timestamp(n - 1) < ts {
        return n;
    }
    // timestamp(lo) < ts <= timestamp(hi)
    let (mut lo, mut hi) = (from, n - 1);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if timestamp(mid) < ts {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    // No assertion on the timestamps here: read from a ring the producer may be overwriting,
    // they may be torn, and then the caller throws the answer away (`read_with`). On the
    // positions there is one: the answer lies among the frames searched.
    debug_assert!(
        from <= hi && hi < n,
        "the answer is one of the frames searched"
    );
    hi
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bisection_finds_what_a_linear_scan_finds() {
        // Timestamps with repeats and gaps, every start and every target around them.
        let ts: Vec<u64> = vec![10, 10, 12, 13, 13, 13, 20, 25, 25, 40];
        for from in 0..=ts.len() {
            for target in 0..45 {
                let linear = from + ts[from..].iter().take_while(|&&t| t < target).count();
                assert_eq!(
                    first_at_or_after(ts.len(), from, |i| ts[i], target),
                    linear,
                    "from {from}, target {target}"
                );
            }
        }
        assert_eq!(first_at_or_after(0, 0, |_| unreachable!(), 5), 0);
    }

    use super::*;

    fn clock() -> WindowClock {
        // A 300 000 Hz clock, frames 300 ticks apart (1000 a second), 2 s of buffer.
        WindowClock {
            frame_step_ticks: 300,
            clock: DetectorClock::new(300_000),
            buffer: Duration::from_secs(2),
        }
    }

    fn newest(t: u64) -> Held {
        Held {
            newest: Some(t),
            oldest: Some(0),
            oldest_anywhere: Some(0),
        }
    }

    #[test]
    fn a_window_is_whole_frames_around_the_trigger() {
        let w = clock()
            .window(
                newest(3_000_000),
                TriggerAt::Now,
                Duration::from_millis(500),
                Duration::from_millis(1001),
            )
            .unwrap();
        assert_eq!(w.trigger_timestamp, 3_000_000);
        assert_eq!(w.window_start_timestamp, 3_000_000 - 150_000);
        // 1001 ms = 300 300 ticks, rounded up to whole frames.
        assert_eq!(w.window_end_timestamp, 3_000_000 + 300_300);
        let len = w.window_end_timestamp - w.window_start_timestamp;
        assert_eq!(len % 300, 0);
        // The window in the clock's seconds too, and nothing before the buffer.
        assert_eq!(w.clock_hz, Some(300_000));
        assert_eq!((w.pre_s, w.post_s), (Some(0.5), Some(1.001)));
        assert_eq!(w.not_buffered_s, None);
        // A window reaching before tick 0 starts at 0.
        let w = clock()
            .window(
                newest(100),
                TriggerAt::Now,
                Duration::from_secs(1),
                Duration::ZERO,
            )
            .unwrap();
        assert_eq!(w.window_start_timestamp, 0);
    }

    #[test]
    fn triggers_that_cannot_be_recorded_are_refused() {
        let c = clock();
        let (pre, post) = (Duration::from_millis(100), Duration::from_millis(100));
        assert_eq!(
            c.window(Held::default(), TriggerAt::Now, pre, post),
            Err(WindowError::NothingBuffered)
        );
        assert!(matches!(
            c.window(newest(0), TriggerAt::Now, Duration::from_secs(3), post),
            Err(WindowError::PreLongerThanBuffer { .. })
        ));
        // Up to the buffer's length ahead is accepted, more is a clock mix-up.
        assert!(c
            .window(
                newest(1000),
                TriggerAt::Timestamp(1000 + 600_000),
                pre,
                post
            )
            .is_ok());
        assert!(matches!(
            c.window(
                newest(1000),
                TriggerAt::Timestamp(1001 + 600_000),
                pre,
                post
            ),
            Err(WindowError::TooFarAhead { .. })
        ));
        // Behind the buffer is a trigger: what is left is recorded, the rest counted lost.
        assert!(c
            .window(newest(10_000_000), TriggerAt::Timestamp(5), pre, post)
            .is_ok());
        // A window that ends where the oldest frame of any buffer is has nothing left: gone,
        // not a burst of no frame. One link still holding its end is enough to record it.
        let held = |oldest_anywhere| Held {
            newest: Some(10_000_000),
            oldest: Some(9_000_000),
            oldest_anywhere: Some(oldest_anywhere),
        };
        let at = TriggerAt::Timestamp(1_000_000);
        assert!(matches!(
            c.window(held(1_000_000 + 30_000), at, pre, post),
            Err(WindowError::Gone { gone_s, .. }) if gone_s == 0.0
        ));
        assert!(c.window(held(1_000_000 + 29_999), at, pre, post).is_ok());
    }

    #[test]
    fn a_window_reaching_before_the_buffer_says_by_how_much() {
        // The buffers hold from 3 s on; a window from 2.5 s to 4 s lacks its first 0.5 s.
        let held = Held {
            newest: Some(1_500_000),
            oldest: Some(900_000),
            oldest_anywhere: Some(900_000),
        };
        let w = clock()
            .window(
                held,
                TriggerAt::Timestamp(1_200_000),
                Duration::from_millis(1500),
                Duration::from_millis(100),
            )
            .unwrap();
        assert_eq!(w.window_start_timestamp, 750_000);
        assert_eq!(w.not_buffered_s, Some(0.5));
        // A window wholly before every link's buffer is gone; while one link still holds some
        // of it, it is recorded, and what the others lack is said.
        let (at, pre, post) = (
            TriggerAt::Timestamp(300_000),
            Duration::from_millis(500),
            Duration::from_millis(100),
        );
        assert!(matches!(
            clock().window(held, at, pre, post),
            Err(WindowError::Gone { .. })
        ));
        let one_link_holds_it = Held {
            oldest_anywhere: Some(200_000),
            ..held
        };
        let w = clock().window(one_link_holds_it, at, pre, post).unwrap();
        assert_eq!(w.not_buffered_s, Some(0.6));
    }

    #[test]
    fn frames_are_counted_on_the_grid_of_the_data() {
        assert_eq!(frames_between(0, 900, 300), 3);
        assert_eq!(frames_between(0, 901, 300), 4);
        assert_eq!(frames_between(900, 900, 300), 0);
        assert_eq!(frames_between(901, 900, 300), 0);
        // A window [100, 1000) on the grid 50 + 300k holds 350, 650, 950.
        assert_eq!(frames_in_window(100, 1000, 50, 300), 3);
        assert_eq!(frames_in_window(100, 1000, 3050, 300), 3);
        assert_eq!(frames_in_window(100, 1000, 100, 300), 3);
        assert_eq!(frames_in_window(1000, 100, 100, 300), 0);
        assert_eq!(frames_before(100, 950, 300), 2);
        assert_eq!(frames_before(100, 50, 300), 0);
        assert_eq!(frames_missing_inside(0, 900, 4, 300), 0);
        assert_eq!(frames_missing_inside(0, 1500, 4, 300), 2);
        assert!(on_grid(950, 50, 300) && !on_grid(951, 50, 300) && on_grid(50, 950, 300));
    }

    #[test]
    fn what_is_recorded_plus_what_is_lost_is_the_window() {
        // However the frames present split the window, before + inside + missing inside +
        // after adds up to the window on their grid.
        let tpf = 25;
        let (start, end) = (1_010, 9_990);
        for anchor in [0u64, 7, 24, 1_010, 5_000] {
            let grid = |k: u64| anchor % tpf + k * tpf;
            let all: Vec<u64> = (0..500)
                .map(grid)
                .filter(|&t| t >= start && t < end)
                .collect();
            let want = frames_in_window(start, end, anchor, tpf);
            assert_eq!(want, all.len() as u64);
            // Present: a run with a hole in it, then nothing after.
            let (first, last) = (all[10], all[200]);
            let present = 191 - 30;
            let counted = frames_before(start, first, tpf)
                + frames_missing_inside(first, last, present, tpf)
                + frames_between(last + tpf, end, tpf);
            assert_eq!(counted + present, want, "anchor {anchor}");
        }
    }

    /// A stream whose timestamps sit at the end of the clock's range (a wrong or hostile
    /// sender) gets a window clipped there, never a panic in the server.
    #[test]
    fn a_window_at_the_end_of_the_clock_is_clipped_not_a_panic() {
        let near_end = u64::MAX - 1000;
        let w = clock()
            .window(
                Held {
                    newest: Some(near_end),
                    oldest: Some(near_end - 300_000),
                    oldest_anywhere: Some(near_end - 300_000),
                },
                TriggerAt::Now,
                Duration::from_millis(100),
                Duration::from_millis(100),
            )
            .unwrap();
        assert_eq!(w.window_end_timestamp, u64::MAX);
        assert_eq!(w.trigger_timestamp, near_end);
    }
}
