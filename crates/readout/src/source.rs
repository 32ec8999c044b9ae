//! Emulated readout links: frames at a set rate with consecutive timestamps, into latency buffers.
//!
//! Frame i of a link is due at `start + i / rate` — an absolute schedule, so the rate has no
//! drift however late a wake-up is: a late producer catches up with a burst (bounded by one
//! second of frames, beyond which the frames are counted as never produced). One producer drives
//! several links (2 cores must be able to emulate 10), each frame made by the link's `FrameGen` in
//! its frame type's own layout (emulated content, or a replayed recording with its timestamps
//! and sequence numbers rewritten) and streamed into the ring. Gaps can be injected:
//! every `every` frames, the timestamps jump by `skip` frames, as when a link drops data.
//!
//! Timestamps advance by the frame type's tick step per frame. Emulating below the native rate
//! therefore slows the detector's clock relative to wall time, never its frame spacing:
//! `ticks_per_s()` says how fast emulated time runs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::framegen::{FrameGen, Payload, SourceError};
use crate::latency_buffer::Producer;
use snbuf_frames::FrameType;
use snbuf_persist::instructions::StreamingCopy;

/// The emulated detector clock (see `snbuf_unit::links::emulated_clock`): frame k of
/// `frames_per_s` frames per second is due k / frames_per_s seconds after the Unix epoch and has
/// timestamp k x `ticks_per_frame`. Returns when an emulator starts (it makes frame k when
/// k + 1 periods have passed since) and the first frame's timestamp.
pub fn clock_from_epoch(frames_per_s: f64, ticks_per_frame: u64) -> (Instant, u64) {
    let (anchor_ns, anchor) = (snbuf_units::now_unix_ns(), Instant::now());
    let frame0 = (anchor_ns as f64 / 1e9 * frames_per_s).ceil();
    let until_frame0 =
        Duration::from_nanos((frame0 / frames_per_s * 1e9 - anchor_ns as f64).max(0.0) as u64);
    let start = (anchor + until_frame0)
        .checked_sub(Duration::from_secs_f64(1.0 / frames_per_s))
        .unwrap_or(anchor);
    (start, frame0 as u64 * ticks_per_frame)
}

/// Injected data loss at the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapSpec {
    pub every_frames: u64,
    pub skip_frames: u64,
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
    frame_type: FrameType,
    frames_per_s: f64,
    gaps: Option<GapSpec>,
    links: Vec<EmulatedLink>,
    copy: StreamingCopy,
    start: Instant,
    /// Frames produced per link so far (the same for every link).
    produced: u64,
    /// Frames a late producer could not make up (more than a second behind).
    skipped: u64,
}

impl Emulator {
    /// `frames_per_s` per link; `first_timestamp` is the detector time of the first frame.
    pub fn new(
        frame_type: FrameType,
        frames_per_s: f64,
        payload: Payload,
        gaps: Option<GapSpec>,
        producers: Vec<(u32, Producer)>,
        first_timestamp: u64,
    ) -> Result<Self, SourceError> {
        if !(frames_per_s.is_finite() && frames_per_s > 0.0) {
            return Err(SourceError::BadRate(frames_per_s));
        }
        if gaps.is_some_and(|g| g.every_frames == 0) {
            return Err(SourceError::GapsEveryZero);
        }
        let links = producers
            .into_iter()
            .map(|(link, producer)| {
                Ok(EmulatedLink {
                    link,
                    producer,
                    next_timestamp: first_timestamp,
                    frames: FrameGen::new(frame_type, link, &payload)?,
                })
            })
            .collect::<Result<Vec<_>, SourceError>>()?;
        Ok(Emulator {
            frame_type,
            frames_per_s,
            gaps,
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

    /// Emulated detector ticks per wall-clock second.
    pub fn ticks_per_s(&self) -> f64 {
        self.frames_per_s * self.frame_type.ticks_per_frame() as f64
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
            let ticks_per_frame = self.frame_type.ticks_per_frame();
            for l in &mut self.links {
                l.next_timestamp += skip * ticks_per_frame;
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
        n
    }

    fn produce_one(&mut self) {
        let ticks_per_frame = self.frame_type.ticks_per_frame();
        let gap_now = self
            .gaps
            .filter(|g| self.produced > 0 && self.produced.is_multiple_of(g.every_frames));
        for l in &mut self.links {
            if let Some(g) = gap_now {
                l.next_timestamp += g.skip_frames * ticks_per_frame;
            }
            let frame = l.frames.frame_at(l.next_timestamp);
            let copy = &self.copy;
            // Checksummed here, while the frame is in cache, for the writers (see
            // latency_buffer): reading it back from the ring would cost a DRAM pass.
            let crc = l
                .producer
                .frame_checksums()
                .then(|| crate::latency_buffer::frame_crc32c(frame));
            l.producer.stage_with_crc(crc, |_, slot| {
                // Streamed: the ring is far larger than the cache, so a regular copy would read
                // every slot in before overwriting it.
                copy.copy(slot, frame);
            });
            l.next_timestamp += ticks_per_frame;
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
    use snbuf_persist::PageSize;
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

    /// One link of 16-byte frames, one tick each, 1000 frames/s, into a 10 s ring.
    fn one_link_at_1khz() -> Emulator {
        let t = custom(16, 1);
        let (p, _b) = links(1, t, 10_000);
        Emulator::new(t, 1000.0, Payload::Emulated, None, p, 0).unwrap()
    }

    #[test]
    fn the_schedule_is_exact_and_does_not_drift() {
        let t = FrameType::WibEth;
        let (p, bufs) = links(3, t, 20_000);
        let mut e = Emulator::new(t, 12_345.0, Payload::Emulated, None, p, 2048 * 1_000).unwrap();
        let start = Instant::now();
        e.start_at(start);
        // Uneven wake-ups add up to exactly the rate: no drift from rounding at each call.
        let mut total = 0;
        for ms in [1u64, 7, 13, 250, 251, 600, 999, 1000] {
            total += e.produce_due(start + Duration::from_millis(ms));
        }
        assert_eq!(total, 12_345);
        for b in &bufs {
            assert_eq!(b.written(), 12_345);
        }
        // Consecutive timestamps and sequence numbers on every link, in the frame's own header.
        let l = t.layout();
        let mut f = vec![0u8; 7200 * 2];
        bufs[2].read(100, &mut f).unwrap();
        assert_eq!(l.timestamp(&f[7200..]) - l.timestamp(&f), 2048);
        assert_eq!(l.sequence(&f[7200..]), Some(1101));
        assert_eq!(e.ticks_per_s(), 12_345.0 * 2048.0);
    }

    #[test]
    fn gaps_and_replay() {
        let t = custom(32, 5);
        let (p, bufs) = links(1, t, 1000);
        let replay: Arc<Vec<u8>> = Arc::new((0..64u8).collect());
        let gaps = Some(GapSpec {
            every_frames: 4,
            skip_frames: 2,
        });
        let mut e = Emulator::new(t, 1000.0, Payload::Replay(replay), gaps, p, 0).unwrap();
        let start = Instant::now();
        e.start_at(start);
        e.produce_due(start + Duration::from_millis(10));
        let mut f = vec![0u8; 32 * 10];
        assert_eq!(bufs[0].read(0, &mut f).unwrap(), 10);
        let ts: Vec<u64> = f.chunks(32).map(timestamp_of).collect();
        assert_eq!(ts, vec![0, 5, 10, 15, 30, 35, 40, 45, 60, 65]);
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
        assert!(Emulator::new(t, 0.0, Payload::Emulated, None, vec![], 0).is_err());
        assert!(Emulator::new(t, f64::NAN, Payload::Emulated, None, vec![], 0).is_err());
        let (p, _b) = links(1, t, 10);
        assert!(Emulator::new(t, 1.0, Payload::Replay(Arc::new(vec![])), None, p, 0).is_err());
        let g = Some(GapSpec {
            every_frames: 0,
            skip_frames: 1,
        });
        assert!(Emulator::new(t, 1.0, Payload::Emulated, g, vec![], 0).is_err());
    }
}
