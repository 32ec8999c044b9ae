//! The detector's clock: what a second is. DUNE's timing system counts 62.5 MHz ticks (50 MHz
//! for ProtoDUNE's WIB), and every timestamp a frame carries counts them. One second of a
//! trigger window, of a buffer, of a slice is `hz` ticks of that clock, whatever rate a link is
//! configured or emulated at: every conversion between seconds and ticks in snbuf goes through
//! this type.
//!
//! A link's frames lie `frame_step_ticks` apart. A real detector link sends every frame of its
//! type (`ticks_per_frame` apart); an emulated or sent link below its type's own rate is a
//! sub-sampled detector, keeping the real clock and sending one frame every `frame_step_ticks`
//! ticks (`frame_step_ticks`), so that a second of its data is still `hz` ticks.

use std::time::Duration;

use crate::FrameType;

/// Ticks per second of a detector's timing clock, and the conversions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorClock {
    hz: u64,
}

impl DetectorClock {
    /// A clock of `hz` ticks per second (at least 1).
    pub fn new(hz: u64) -> DetectorClock {
        assert!(hz > 0, "a clock ticks");
        DetectorClock { hz }
    }

    /// The clock a frame type's timestamps count.
    pub fn of(frame_type: FrameType) -> DetectorClock {
        DetectorClock::new(frame_type.clock_hz())
    }

    pub fn hz(self) -> u64 {
        self.hz
    }

    /// Ticks in a duration, rounded to the nearest.
    pub fn ticks(self, d: Duration) -> u64 {
        // Whole seconds exactly, then the fraction: a day at 62.5 MHz stays exact in u64.
        let whole = d.as_secs().saturating_mul(self.hz);
        let frac = (d.subsec_nanos() as u128 * self.hz as u128 + 500_000_000) / 1_000_000_000;
        whole.saturating_add(frac as u64)
    }

    /// Seconds in `ticks`.
    pub fn seconds(self, ticks: u64) -> f64 {
        ticks as f64 / self.hz as f64
    }

    /// Seconds from `from` to `to` (negative when `to` is earlier).
    pub fn seconds_between(self, from: u64, to: u64) -> f64 {
        if to >= from {
            self.seconds(to - from)
        } else {
            -self.seconds(from - to)
        }
    }

    /// The tick `offset_s` seconds after (or, negative, before) `ticks`, clamped to 0..=MAX.
    pub fn offset(self, ticks: u64, offset_s: f64) -> u64 {
        let delta = (offset_s.abs() * self.hz as f64).round() as u64;
        if offset_s >= 0.0 {
            ticks.saturating_add(delta)
        } else {
            ticks.saturating_sub(delta)
        }
    }

    /// The clock's reading at `unix_ns` for a clock that counts from the Unix epoch (the
    /// emulator's; a real timing system is set to it too, give or take its own offset).
    pub fn ticks_at_unix_ns(self, unix_ns: u64) -> u64 {
        let (s, ns) = (unix_ns / 1_000_000_000, unix_ns % 1_000_000_000);
        s.saturating_mul(self.hz)
            .saturating_add((ns as u128 * self.hz as u128 / 1_000_000_000) as u64)
    }

    /// The step between a link's frames that makes `frames_per_s` frames a second on this clock:
    /// the nearest whole tick, at least 1. At a frame type's own rate this is its
    /// `ticks_per_frame`; below it the link is a sub-sampled detector.
    pub fn frame_step_ticks(self, frames_per_s: f64) -> u64 {
        if !(frames_per_s.is_finite() && frames_per_s > 0.0) {
            return u64::MAX;
        }
        ((self.hz as f64 / frames_per_s).round() as u64).max(1)
    }

    /// Frames a second of a link whose frames are `step_ticks` apart.
    pub fn frames_per_s(self, step_ticks: u64) -> f64 {
        self.hz as f64 / step_ticks.max(1) as f64
    }
}

/// What a link whose frames are `step` ticks apart is, for a frame type whose own frames are
/// `tpf` apart: the type's own rate, a sub-sampled detector, or a storage test faster than one.
pub fn step_words(step: u64, tpf: u64) -> String {
    assert!(step > 0 && tpf > 0, "frames are some ticks apart");
    if step == tpf {
        "the frame type's own rate".to_string()
    } else if step > tpf {
        format!(
            "a sub-sampled detector, 1 frame in {:.1}",
            step as f64 / tpf as f64
        )
    } else {
        format!(
            "{:.2}x the frame type's own rate (frames overlap in time: a storage test, not a detector)",
            tpf as f64 / step as f64
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_is_the_clock_of_the_frame_type() {
        let c = DetectorClock::of(FrameType::WibEth);
        assert_eq!(c.hz(), 62_500_000);
        assert_eq!(c.ticks(Duration::from_secs(1)), 62_500_000);
        assert_eq!(c.ticks(Duration::from_millis(1500)), 93_750_000);
        assert_eq!(c.ticks(Duration::from_secs(86_400)), 86_400 * 62_500_000);
        assert_eq!(DetectorClock::of(FrameType::ProtoDuneWib).hz(), 50_000_000);
        assert_eq!(c.seconds(125_000_000), 2.0);
        assert_eq!(c.seconds_between(10, 10 + 62_500_000), 1.0);
        assert_eq!(c.seconds_between(10 + 62_500_000, 10), -1.0);
        assert_eq!(c.offset(100, -1.0), 0);
        assert_eq!(c.offset(62_500_000, -1.0), 0);
        assert_eq!(c.offset(0, 2.0), 125_000_000);
        assert_eq!(c.ticks_at_unix_ns(2_000_000_001), 125_000_000);
    }

    #[test]
    fn the_frame_step_is_the_types_own_at_its_own_rate() {
        for t in [
            FrameType::WibEth,
            FrameType::ProtoDuneWib,
            FrameType::Wib2,
            FrameType::TdeEth,
            FrameType::DaphneEthStream,
        ] {
            let c = DetectorClock::of(t);
            assert_eq!(
                c.frame_step_ticks(t.native_frames_per_s()),
                t.ticks_per_frame()
            );
        }
        // A WIB link at 20 MB/s instead of 0.928 GB/s: one superchunk every 13 920 ticks
        // (1 in 46.4), and the rate it comes to is within 0.1% of the one asked.
        let t = FrameType::ProtoDuneWib;
        let c = DetectorClock::of(t);
        let step = c.frame_step_ticks(20e6 / t.frame_bytes() as f64);
        assert_eq!(step, 13_920);
        let rate = c.frames_per_s(step) * t.frame_bytes() as f64;
        assert!((rate / 20e6 - 1.0).abs() < 1e-3, "{rate}");
        assert_eq!(c.frame_step_ticks(0.0), u64::MAX);
        assert_eq!(c.frame_step_ticks(1e12), 1);
    }
}
