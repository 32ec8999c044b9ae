//! Emulated readout links: frames on the detector's own clock, into latency buffers.
//!
//! Frame i of a link is due at `start + i x step / clock_hz` — an absolute schedule, so the rate
//! has no drift however late a wake-up is: a late producer catches up with a burst (bounded by one
//! second of frames, beyond which the frames are counted as never produced). One producer drives
//! several links (2 cores must be able to emulate 10), each frame made by the link's `FrameGen` in
//! its frame type's own layout (emulated content, or a replayed recording with its timestamps
//! and sequence numbers rewritten) and streamed into the ring. Gaps can be injected:
//! every `every` frames, the timestamps jump by `skip` frames, as when a link drops data.
//!
//! Time is the detector's: timestamps count the frame type's clock (62.5 MHz for DUNE's timing
//! system) in step with the wall clock, whatever the rate. Below the frame type's own rate the
//! link is a sub-sampled detector: one frame every `step` ticks (`snbuf_frames::clock`), so one
//! second of its data still spans `clock_hz` ticks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::framegen::{FrameGen, Payload, SourceError};
use crate::latency_buffer::Producer;
use snbuf_frames::{DetectorClock, FrameType};
use snbuf_platform::instructions::StreamingCopy;

/// The detector clock from the Unix epoch, as the emulator and `snbuf emit` keep it: frame k of a
/// link whose frames are `step_ticks` apart has timestamp k x `step_ticks` and is due when the
/// clock reads it, at k x step_ticks / clock_hz seconds after the epoch, plus `offset_s` (a
/// detector whose clock is not the wall clock: negative, behind it). Returns when an emulator
/// starts (it makes frame k when k + 1 periods have passed since) and the first frame's
/// timestamp.
pub fn clock_from_epoch(clock: DetectorClock, step_ticks: u64, offset_s: f64) -> (Instant, u64) {
    let (anchor_ns, anchor) = (snbuf_quantity::now_unix_ns(), Instant::now());
    let frames_per_s = clock.frames_per_s(step_ticks);
    assert!(
        frames_per_s.is_finite() && frames_per_s > 0.0,
        "frames {step_ticks} ticks apart come at a rate"
    );
    let detector_s = (anchor_ns as f64 / 1e9 + offset_s).max(0.0);
    let frame0 = (detector_s * frames_per_s).ceil();
    let until_frame0 = Duration::from_secs_f64((frame0 / frames_per_s - detector_s).max(0.0));
    let start = (anchor + until_frame0)
        .checked_sub(Duration::from_secs_f64(1.0 / frames_per_s))
        .unwrap_or(anchor);
    (start, frame0 as u64 * step_ticks)
}

/// Staged frames are published (made readable, one store fence) at least this often per link.
const PUBLISH_EVERY_FRAMES: u64 = 32;

pub struct EmulatedLink {
    pub link: u32,
    producer: Producer,
    next_timestamp: u64,
    /// The link's frames, made in cache (payload, then timestamp) and streamed into the ring
    /// whole.
    frames: FrameGen,
}

pub struct Emulator {
    /// Ticks between a link's frames, and the frames a second that makes.
    step_ticks: u64,
    frames_per_s: f64,
    links: Vec<EmulatedLink>,
    copy: StreamingCopy,
    start: Instant,
    /// Frames produced per link so far (the same for every link).
    produced: u64,
    /// Frames a late producer could not make up (more than a second behind).
    skipped: u64,
}

impl Emulator {
    /// Frames `step_ticks` apart on `frame_type`'s clock; `first_timestamp` is the detector time
    /// of the first frame.
    pub fn new(
        frame_type: FrameType,
        step_ticks: u64,
        payload: Payload,
        producers: Vec<(u32, Producer)>,
        first_timestamp: u64,
    ) -> Result<Self, SourceError> {
        if step_ticks == 0 || step_ticks == u64::MAX {
            return Err(SourceError::BadStep(step_ticks));
        }
        let frames_per_s = DetectorClock::of(frame_type).frames_per_s(step_ticks);
        debug_assert!(frames_per_s.is_finite() && frames_per_s > 0.0);
        let links = producers
            .into_iter()
            .map(|(link, producer)| {
                Ok(EmulatedLink {
                    link,
                    producer,
                    next_timestamp: first_timestamp,
                    frames: FrameGen::new(frame_type, link, &payload)?.with_frame_step(step_ticks),
                })
            })
            .collect::<Result<Vec<_>, SourceError>>()?;
        Ok(Emulator {
            step_ticks,
            frames_per_s,
            links,
            copy: StreamingCopy::detect(),
            start: Instant::now(),
            produced: 0,
            skipped: 0,
        })
    }

    /// Restarts the schedule at `start` (call before the first `produce_due`).
    pub fn start_at(&mut self, start: Instant) {
        self.start = start;
    }

    pub fn produced_per_link(&self) -> u64 {
        self.produced
    }

    pub fn skipped_per_link(&self) -> u64 {
        self.skipped
    }

    /// Frames a second per link (the detector's clock over the frame step).
    pub fn frames_per_s(&self) -> f64 {
        self.frames_per_s
    }

    /// Frames due per link by `now` on the absolute schedule.
    pub fn due_by(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.start).as_secs_f64() * self.frames_per_s) as u64
    }

    /// How long the next frame has been due at `now` (zero when the producer is on time).
    pub fn lag(&self, now: Instant) -> Duration {
        let next_due =
            self.start + Duration::from_secs_f64((self.produced + 1) as f64 / self.frames_per_s);
        now.saturating_duration_since(next_due)
    }

    /// Produces every frame due by `now` on every link; returns frames produced per link.
    pub fn produce_due(&mut self, now: Instant) -> u64 {
        let due = self.due_by(now);
        let behind = due.saturating_sub(self.produced);
        let max_burst = self.frames_per_s.ceil() as u64;
        if behind > max_burst {
            // More than a second late: those frames are gone, as on a real link whose
            // receiver stalled. Timestamps still advance over them.
            let skip = behind - max_burst;
            self.skipped += skip;
            self.produced += skip;
            for l in &mut self.links {
                l.next_timestamp += skip * self.step_ticks;
            }
        }
        let n = due.saturating_sub(self.produced);
        for i in 0..n {
            self.produce_one();
            if i % PUBLISH_EVERY_FRAMES == PUBLISH_EVERY_FRAMES - 1 || i + 1 == n {
                for l in &mut self.links {
                    l.producer.publish();
                }
            }
        }
        debug_assert!(self.produced >= due, "every frame due is made");
        debug_assert!(
            self.links
                .windows(2)
                .all(|w| w[0].next_timestamp == w[1].next_timestamp),
            "the links keep one clock"
        );
        n
    }

    fn produce_one(&mut self) {
        let step = self.step_ticks;
        for l in &mut self.links {
            let frame = l.frames.frame_at(l.next_timestamp);
            let copy = &self.copy;
            // Checksummed here, while the frame is in cache, for the writers (see
            // latency_buffer): reading it back from the ring would cost a DRAM pass.
            let crc = l
                .producer
                .frame_checksums()
                .then(|| crate::latency_buffer::frame_crc32c(frame));
            l.producer.stage_with_crc(crc, |_, slot| {
                assert_eq!(slot.len(), frame.len(), "the link's frames fill its slots");
                // Streamed: the ring is far larger than the cache, so a regular copy would read
                // every slot in before overwriting it.
                copy.copy(slot, frame);
            });
            l.next_timestamp += step;
        }
        self.produced += 1;
    }

    /// Produces on schedule until `stop` is set. It sleeps at least `MIN_SLEEP` between rounds
    /// and then produces everything that fell due: the schedule is absolute, so sleeping only
    /// makes the bursts larger (1 ms of frames, which the latency buffer absorbs), never the rate
    /// wrong, and the producer costs the CPU of its copies, not a spinning core.
    ///
    /// `max_lag_ns` is raised to the longest time a frame was overdue when its round began (a
    /// producer starved of CPU): the links ran at their set rate only while that stays small, so
    /// a keep-up measurement must check it. Whoever reads it may reset it to 0.
    pub fn run(&mut self, stop: &AtomicBool, max_lag_ns: &AtomicU64) {
        const MIN_SLEEP: Duration = Duration::from_millis(1);
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            max_lag_ns.fetch_max(self.lag(now).as_nanos() as u64, Ordering::Relaxed);
            self.produce_due(now);
            let next_due = self.start
                + Duration::from_secs_f64((self.produced + 1) as f64 / self.frames_per_s);
            std::thread::sleep(
                next_due
                    .saturating_duration_since(Instant::now())
                    .max(MIN_SLEEP),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency_buffer::latency_buffer;
    use snbuf_platform::PageSize;
    use std::sync::Arc;

    fn links(n: u32, t: FrameType, cap: u64) -> (Vec<(u32, Producer)>, Vec<crate::LatencyBuffer>) {
        let mut p = Vec::new();
        let mut b = Vec::new();
        for l in 0..n {
            let (prod, buf) = latency_buffer(t.layout(), cap, PageSize::Small4K).unwrap();
            p.push((l, prod));
            b.push(buf);
        }
        (p, b)
    }

    fn custom(frame_bytes: u32, ticks_per_frame: u64) -> FrameType {
        FrameType::Custom {
            frame_bytes,
            ticks_per_frame,
            timestamp_offset: 0,
        }
    }

    fn timestamp_of(f: &[u8]) -> u64 {
        u64::from_le_bytes(f[..8].try_into().unwrap())
    }

    /// One link of 16-byte frames, one tick each on the 50 MHz clock, sub-sampled to 1000
    /// frames/s (50 000 ticks apart), into a 10 s ring.
    fn one_link_at_1khz() -> Emulator {
        let t = custom(16, 1);
        let (p, _b) = links(1, t, 10_000);
        Emulator::new(t, 50_000, Payload::Emulated, p, 0).unwrap()
    }

    #[test]
    fn the_schedule_is_exact_and_does_not_drift() {
        let t = FrameType::WibEth;
        let (p, bufs) = links(3, t, 20_000);
        // 12 500 frames/s on the 62.5 MHz clock: a WIBEth link sub-sampled to one frame every
        // 5000 ticks (its own frames are 2048 apart).
        let mut e = Emulator::new(t, 5000, Payload::Emulated, p, 5000 * 1_000).unwrap();
        let start = Instant::now();
        e.start_at(start);
        // Uneven wake-ups add up to exactly the rate: no drift from rounding at each call.
        let mut total = 0;
        for ms in [1u64, 7, 13, 250, 251, 600, 999, 1000] {
            total += e.produce_due(start + Duration::from_millis(ms));
        }
        assert_eq!(total, 12_500);
        for b in &bufs {
            assert_eq!(b.written(), 12_500);
        }
        // Timestamps one step apart, a second of frames spanning a second of the detector's
        // clock, and consecutive sequence numbers on every link, in the frame's own header.
        let l = t.layout();
        let mut f = vec![0u8; 7200 * 2];
        bufs[2].read(100, &mut f).unwrap();
        assert_eq!(l.timestamp(&f[7200..]) - l.timestamp(&f), 5000);
        assert_eq!(l.sequence(&f[7200..]), Some(1101));
        assert_eq!(
            bufs[2].timestamp_at(12_499).unwrap() + 5000 - bufs[2].timestamp_at(0).unwrap(),
            62_500_000
        );
        assert_eq!(e.frames_per_s(), 12_500.0);
    }

    #[test]
    fn replayed_frames_come_in_turn_on_the_emulators_schedule() {
        let t = custom(32, 5);
        let (p, bufs) = links(1, t, 1000);
        let replay: Arc<Vec<u8>> = Arc::new((0..64u8).collect());
        let mut e = Emulator::new(t, 50_000, Payload::Replay(replay), p, 0).unwrap();
        let start = Instant::now();
        e.start_at(start);
        e.produce_due(start + Duration::from_millis(10));
        let mut f = vec![0u8; 32 * 10];
        assert_eq!(bufs[0].read(0, &mut f).unwrap(), 10);
        let ts: Vec<u64> = f.chunks(32).map(timestamp_of).collect();
        let k: Vec<u64> = ts.iter().map(|t| t / 50_000).collect();
        assert_eq!(k, (0..10).collect::<Vec<u64>>());
        // Replayed frames come from the file in turn, looping; only the timestamp is new.
        assert_eq!(&f[8..32], &(8..32u8).collect::<Vec<_>>()[..]);
        assert_eq!(&f[32 + 8..64], &(40..64u8).collect::<Vec<_>>()[..]);
        assert_eq!(&f[64 + 8..96], &(8..32u8).collect::<Vec<_>>()[..]);
    }

    #[test]
    fn a_producer_more_than_a_second_late_counts_what_it_skipped() {
        let mut e = one_link_at_1khz();
        let start = Instant::now();
        e.start_at(start);
        assert_eq!(e.produce_due(start + Duration::from_secs(5)), 1000);
        assert_eq!(e.skipped_per_link(), 4000);
        assert_eq!(e.produced_per_link(), 5000);
    }

    #[test]
    fn lag_is_how_long_the_next_frame_has_been_due() {
        let mut e = one_link_at_1khz();
        let start = Instant::now();
        e.start_at(start);
        // Frame k is due k + 1 periods after the start: at 100 ms, frame 0 is 99 ms late.
        assert_eq!(e.lag(start), Duration::ZERO);
        assert_eq!(
            e.lag(start + Duration::from_millis(100)),
            Duration::from_millis(99)
        );
        e.produce_due(start + Duration::from_millis(100));
        assert_eq!(e.lag(start + Duration::from_millis(100)), Duration::ZERO);
        assert_eq!(
            e.lag(start + Duration::from_millis(105)),
            Duration::from_millis(4)
        );

        // `run` raises the shared maximum to the lag it found, here at least the 50 ms it
        // started behind.
        let mut e = one_link_at_1khz();
        e.start_at(Instant::now() - Duration::from_millis(50));
        let stop = AtomicBool::new(true);
        let max_lag_ns = AtomicU64::new(0);
        // Stopped before the first round: nothing measured.
        e.run(&stop, &max_lag_ns);
        assert_eq!(max_lag_ns.load(Ordering::Relaxed), 0);
        let stop = Arc::new(AtomicBool::new(false));
        let max_lag_ns = Arc::new(AtomicU64::new(0));
        let (s2, l2) = (stop.clone(), max_lag_ns.clone());
        let h = std::thread::spawn(move || e.run(&s2, &l2));
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, Ordering::Relaxed);
        h.join().unwrap();
        assert!(max_lag_ns.load(Ordering::Relaxed) >= 49_000_000);
    }

    #[test]
    fn nonsense_is_refused() {
        let t = FrameType::ProtoDuneWib;
        assert!(Emulator::new(t, 0, Payload::Emulated, vec![], 0).is_err());
        assert!(Emulator::new(t, u64::MAX, Payload::Emulated, vec![], 0).is_err());
        let (p, _b) = links(1, t, 10);
        assert!(Emulator::new(t, 300, Payload::Replay(Arc::new(vec![])), p, 0).is_err());
    }
}
