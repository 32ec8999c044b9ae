//! The per-link latency buffer: the last N seconds of a link, in DRAM, in fixed frame slots.
//!
//! One producer (the link) appends frames and never waits: a detector cannot be paused, so when
//! the ring is full the oldest frame is overwritten. Readers (the link's writer) copy frames out
//! by sequence number and learn afterwards whether the producer overwrote the slot while they
//! were copying. That is the seqlock idea: the producer announces "frame n is being written"
//! (`claimed`) before it touches slot n mod capacity, and publishes it (`written`) after. A copy
//! of frame r is valid only if, after the copy, no frame r + capacity or later was claimed. An
//! overwritten frame is never returned: the reader gets `Overwritten` and counts the loss.
//!
//! Memory is allocated and prefaulted once (optionally on 2 MiB pages), so the producer takes no
//! page fault and memory use is fixed: `memory_bytes()`.

use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

use snbuf_persist::memory::{AlignedBuf, PageSize, PagesObtained};

use crate::frame::timestamp_of;

struct Ring {
    slots: UnsafeCell<AlignedBuf>,
    frame_bytes: usize,
    capacity: u64,
    /// Frames whose write has begun: frame n's slot is being written once `claimed > n`.
    claimed: AtomicU64,
    /// Frames completely written and readable: sequence numbers `< written`.
    written: AtomicU64,
}

// SAFETY: the slots are written only by the single `Producer` and read by readers that validate
// every copy against `claimed` afterwards (see the module comment); the counters are atomics.
unsafe impl Sync for Ring {}
unsafe impl Send for Ring {}

/// The writing end; there is exactly one per buffer (it is not `Clone`).
pub struct Producer {
    ring: Arc<Ring>,
    /// Frames written into their slots, published or not (`stage`, `publish`).
    staged: u64,
}

/// The reading end; clone it freely.
#[derive(Clone)]
pub struct LatencyBuffer {
    ring: Arc<Ring>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The producer has not written this frame yet.
    NotYet,
    /// The frame was overwritten before (or while) it was read: it is lost from the buffer.
    /// `oldest` is the oldest sequence number still readable.
    Overwritten { oldest: u64 },
}

/// Where a timestamp falls in the buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// The first frame with a timestamp >= the one asked for.
    At(u64),
    /// Every frame still buffered is newer: the window starts before the buffer does. `oldest` is
    /// where reading can start; the frames before it are the shortfall.
    BeforeOldest { oldest: u64 },
    /// No frame has that timestamp yet: it is in the future; start at `next`, the next frame.
    After { next: u64 },
}

/// Consecutive frames lent in place by `LatencyBuffer::read_with`: the ring's memory from the
/// first frame to the end of the ring (`head`) and, if the run wraps, from its start (`tail`).
pub struct FrameRun<'a> {
    head: &'a [u8],
    tail: &'a [u8],
    frame_bytes: usize,
}

impl<'a> FrameRun<'a> {
    fn empty(frame_bytes: usize) -> Self {
        FrameRun {
            head: &[],
            tail: &[],
            frame_bytes,
        }
    }

    pub fn frames(&self) -> usize {
        (self.head.len() + self.tail.len()) / self.frame_bytes
    }

    /// Frame `i` of the run.
    pub fn frame(&self, i: usize) -> &'a [u8] {
        let in_head = self.head.len() / self.frame_bytes;
        let (part, j) = if i < in_head {
            (self.head, i)
        } else {
            (self.tail, i - in_head)
        };
        &part[j * self.frame_bytes..(j + 1) * self.frame_bytes]
    }

    /// Frames `range` as at most two contiguous byte slices (empty ones left out).
    pub fn parts(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = &'a [u8]> {
        let in_head = self.head.len() / self.frame_bytes;
        let fb = self.frame_bytes;
        let h = range.start.min(in_head)..range.end.min(in_head);
        let t = range.start.max(in_head) - in_head..range.end.max(in_head) - in_head;
        [
            &self.head[h.start * fb..h.end * fb],
            &self.tail[t.start * fb..t.end * fb],
        ]
        .into_iter()
        .filter(|p| !p.is_empty())
    }
}

/// A latency buffer of `capacity_frames` frames of `frame_bytes`.
pub fn latency_buffer(
    frame_bytes: usize,
    capacity_frames: u64,
    page_size: PageSize,
) -> std::io::Result<(Producer, LatencyBuffer)> {
    if frame_bytes < crate::frame::MIN_FRAME_BYTES as usize || capacity_frames < 2 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a latency buffer needs frames of >= 16 B and >= 2 slots",
        ));
    }
    let bytes = (frame_bytes as u64)
        .checked_mul(capacity_frames)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "latency buffer too large")
        })?;
    let slots = AlignedBuf::new(bytes, page_size)?;
    let ring = Arc::new(Ring {
        slots: UnsafeCell::new(slots),
        frame_bytes,
        capacity: capacity_frames,
        claimed: AtomicU64::new(0),
        written: AtomicU64::new(0),
    });
    Ok((
        Producer {
            ring: ring.clone(),
            staged: 0,
        },
        LatencyBuffer { ring },
    ))
}

impl Ring {
    fn slot_ptr(&self, seq: u64) -> *mut u8 {
        let index = (seq % self.capacity) as usize;
        // SAFETY: index < capacity, so the slot lies inside the allocation; taking a raw pointer
        // does not create a reference to the contents.
        unsafe {
            (*self.slots.get())
                .as_mut_ptr()
                .add(index * self.frame_bytes)
        }
    }
}

impl Producer {
    /// Appends the next frame, written in place by `fill`, and returns its sequence number. Never
    /// waits; overwrites the oldest frame when the ring is full.
    #[inline]
    pub fn push(&mut self, fill: impl FnOnce(u64, &mut [u8])) -> u64 {
        let seq = self.stage(fill);
        self.publish();
        seq
    }

    /// Writes the next frame into its slot with `fill` (which may use non-temporal stores) but
    /// does not make it readable yet: `publish` does, for every frame staged so far. Producing a
    /// batch of frames and publishing once lets one store fence serve the whole batch.
    #[inline]
    pub fn stage(&mut self, fill: impl FnOnce(u64, &mut [u8])) -> u64 {
        let r = &*self.ring;
        let seq = self.staged;
        // Announce the overwrite before touching the slot, so a reader copying the old frame
        // learns of it. The fence keeps the slot's stores after the announcement.
        r.claimed.store(seq + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: only this (unique) producer writes slots; the slot is inside the ring; readers
        // that overlap validate their copy against `claimed`.
        let slot = unsafe { std::slice::from_raw_parts_mut(r.slot_ptr(seq), r.frame_bytes) };
        fill(seq, slot);
        self.staged = seq + 1;
        seq
    }

    /// Makes every staged frame readable.
    #[inline]
    pub fn publish(&mut self) {
        // Non-temporal stores are not ordered by a release store: drain them first.
        #[cfg(target_arch = "x86_64")]
        snbuf_persist::instructions::sfence();
        self.ring.written.store(self.staged, Ordering::Release);
    }

    pub fn buffer(&self) -> LatencyBuffer {
        LatencyBuffer {
            ring: self.ring.clone(),
        }
    }
}

impl LatencyBuffer {
    pub fn frame_bytes(&self) -> usize {
        self.ring.frame_bytes
    }

    pub fn capacity_frames(&self) -> u64 {
        self.ring.capacity
    }

    pub fn memory_bytes(&self) -> u64 {
        self.ring.capacity * self.ring.frame_bytes as u64
    }

    /// The page size the kernel granted for the ring.
    pub fn pages_obtained(&self) -> Option<PagesObtained> {
        // SAFETY: reading the buffer's address and length only.
        unsafe { (*self.ring.slots.get()).pages_obtained().ok() }
    }

    /// Sequence number of the next frame to be written (= frames written so far).
    pub fn written(&self) -> u64 {
        self.ring.written.load(Ordering::Acquire)
    }

    /// The oldest sequence number that can still be read.
    pub fn oldest(&self) -> u64 {
        // A frame is gone as soon as its slot is claimed for a newer one.
        self.ring
            .claimed
            .load(Ordering::Acquire)
            .saturating_sub(self.ring.capacity)
    }

    /// Frames in the buffer now.
    pub fn fill_frames(&self) -> u64 {
        self.written() - self.oldest().min(self.written())
    }

    /// Copies frames `first, first + 1, …` into `out` (a whole number of frames, at most the
    /// capacity) and returns how many were copied: fewer than asked if not all are written yet.
    pub fn read(&self, first: u64, out: &mut [u8]) -> Result<usize, ReadError> {
        let want = (out.len() / self.ring.frame_bytes) as u64;
        let (n, ()) = self.read_with(first, want, |run| {
            let mut pos = 0;
            for part in run.parts(0..run.frames()) {
                out[pos..pos + part.len()].copy_from_slice(part);
                pos += part.len();
            }
        })?;
        Ok(n)
    }

    /// Lends frames `first, first + 1, …` (at most `max_frames`, fewer if not all are written
    /// yet) to `f` in place, as the ring's own memory, and returns how many it lent with what
    /// `f` returned. No copy is made: `f` copies what it needs to where it is going.
    ///
    /// The producer may overwrite those slots while `f` runs, so what `f` reads may be torn.
    /// `Ok` means it was not (the seqlock check runs after `f`); on `Overwritten` everything
    /// `f` read must be thrown away. So `f` must only do what can be undone: stage, not commit.
    pub fn read_with<R>(
        &self,
        first: u64,
        max_frames: u64,
        f: impl FnOnce(&FrameRun<'_>) -> R,
    ) -> Result<(usize, R), ReadError> {
        let r = &*self.ring;
        let written = r.written.load(Ordering::Acquire);
        if first >= written {
            return Err(ReadError::NotYet);
        }
        let n = max_frames.min(written - first).min(r.capacity);
        if n == 0 {
            return Ok((0, f(&FrameRun::empty(r.frame_bytes))));
        }
        let start = (first % r.capacity) as usize;
        let until_end = r.capacity as usize - start;
        let (a, b) = if n as usize <= until_end {
            (n as usize, 0)
        } else {
            (until_end, n as usize - until_end)
        };
        // SAFETY: both ranges lie inside the ring's allocation. The producer may be writing them
        // right now: the slices are only trusted after the check below (seqlock validation), and
        // `read_with`'s contract makes `f` treat them as provisional.
        let run = unsafe {
            FrameRun {
                head: std::slice::from_raw_parts(r.slot_ptr(first), a * r.frame_bytes),
                tail: std::slice::from_raw_parts(r.slot_ptr(0), b * r.frame_bytes),
                frame_bytes: r.frame_bytes,
            }
        };
        let out = f(&run);
        // Every read `f` made must happen before we look at `claimed`.
        fence(Ordering::Acquire);
        let claimed = r.claimed.load(Ordering::Relaxed);
        let oldest = claimed.saturating_sub(r.capacity);
        if first < oldest {
            return Err(ReadError::Overwritten { oldest });
        }
        Ok((n as usize, out))
    }

    fn timestamp_at(&self, seq: u64) -> Result<u64, ReadError> {
        let mut frame = vec![0u8; self.ring.frame_bytes];
        self.read(seq, &mut frame)?;
        Ok(timestamp_of(&frame))
    }

    /// Finds the first buffered frame with a timestamp >= `ts`. For fixed-rate data (`step`
    /// ticks between frames) the position is computed from the newest frame and checked: O(1).
    /// When frames are missing the guess is wrong and a binary search over the buffer finds it.
    pub fn find_timestamp(&self, ts: u64, step: u64) -> Lookup {
        loop {
            let written = self.written();
            let oldest = self.oldest();
            if written == 0 || oldest >= written {
                return Lookup::After { next: written };
            }
            let newest = written - 1;
            let (Ok(newest_ts), Ok(oldest_ts)) =
                (self.timestamp_at(newest), self.timestamp_at(oldest))
            else {
                continue; // overwritten while we looked: look again at the new edges
            };
            if ts > newest_ts {
                return Lookup::After { next: written };
            }
            if ts <= oldest_ts {
                return if ts == oldest_ts {
                    Lookup::At(oldest)
                } else {
                    Lookup::BeforeOldest { oldest }
                };
            }
            // O(1) guess for fixed-rate data, confirmed by the frames either side.
            if step > 0 {
                let back = (newest_ts - ts).div_ceil(step);
                if let Some(guess) = newest.checked_sub(back).filter(|&g| g > oldest) {
                    if let (Ok(at), Ok(before)) =
                        (self.timestamp_at(guess), self.timestamp_at(guess - 1))
                    {
                        if at >= ts && before < ts {
                            return Lookup::At(guess);
                        }
                    }
                }
            }
            // Fallback: binary search for the first timestamp >= ts in (oldest, newest].
            let (mut lo, mut hi) = (oldest + 1, newest);
            let mut lost = false;
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                match self.timestamp_at(mid) {
                    Ok(t) if t >= ts => hi = mid,
                    Ok(_) => lo = mid + 1,
                    Err(_) => {
                        lost = true;
                        break;
                    }
                }
            }
            if !lost {
                return Lookup::At(lo);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{sequence_of, stamp};

    fn push_n(p: &mut Producer, n: u64, step: u64, skip_every: u64) {
        let mut ts = 1000 + p.buffer().written() * step;
        for _ in 0..n {
            if skip_every > 0 && p.buffer().written() % skip_every == skip_every - 1 {
                ts += 5 * step; // a gap in the data
            }
            p.push(|seq, f| stamp(f, ts, seq));
            ts += step;
        }
    }

    #[test]
    fn frames_read_back_until_overwritten() {
        let (mut p, b) = latency_buffer(64, 8, PageSize::Small4K).unwrap();
        let mut out = vec![0u8; 64 * 3];
        assert_eq!(b.read(0, &mut out), Err(ReadError::NotYet));
        push_n(&mut p, 5, 10, 0);
        assert_eq!(b.read(1, &mut out), Ok(3));
        assert_eq!(sequence_of(&out[64..]), 2);
        assert_eq!(b.read(4, &mut out), Ok(1), "only what is written");
        push_n(&mut p, 10, 10, 0);
        assert_eq!(b.oldest(), 15 - 8);
        assert_eq!(
            b.read(2, &mut out),
            Err(ReadError::Overwritten { oldest: 7 })
        );
        assert_eq!(b.read(7, &mut out), Ok(3));
        assert_eq!(b.memory_bytes(), 512);
    }

    #[test]
    fn frames_are_lent_in_place_across_the_wrap_and_staged_frames_stay_hidden() {
        let (mut p, b) = latency_buffer(32, 8, PageSize::Small4K).unwrap();
        push_n(&mut p, 11, 10, 0);
        // Frames 3..11 are buffered; 6..11 wrap: slots 6, 7 then 0, 1, 2.
        let (n, seqs) = b
            .read_with(6, 100, |run| {
                let parts: Vec<usize> = run.parts(0..run.frames()).map(|p| p.len()).collect();
                assert_eq!(parts, vec![64, 96], "two contiguous parts at the wrap");
                assert_eq!(
                    run.parts(2..4).map(|p| p.len()).collect::<Vec<_>>(),
                    vec![64]
                );
                (0..run.frames())
                    .map(|i| sequence_of(run.frame(i)))
                    .collect::<Vec<_>>()
            })
            .unwrap();
        assert_eq!(n, 5);
        assert_eq!(seqs, vec![6, 7, 8, 9, 10]);
        // Overwritten while lent: the result is refused after the fact.
        let r = b.read_with(3, 2, |_| push_n(&mut p, 4, 10, 0));
        assert_eq!(r.map(|(n, _)| n), Err(ReadError::Overwritten { oldest: 7 }));
        // Staged frames are not readable until published.
        p.stage(|seq, f| stamp(f, 0, seq));
        assert_eq!(b.written(), 15);
        assert_eq!(
            b.read_with(15, 1, |_| ()).map(|(n, _)| n),
            Err(ReadError::NotYet)
        );
        p.publish();
        assert_eq!(b.read_with(15, 1, |r| sequence_of(r.frame(0))), Ok((1, 15)));
    }

    #[test]
    fn timestamps_are_found_in_o1_and_with_gaps() {
        let (mut p, b) = latency_buffer(32, 100, PageSize::Small4K).unwrap();
        push_n(&mut p, 250, 300, 0);
        // Frames 150..250 are buffered, timestamps 1000 + seq*300.
        assert_eq!(b.find_timestamp(1000 + 200 * 300, 300), Lookup::At(200));
        assert_eq!(
            b.find_timestamp(1000 + 200 * 300 - 7, 300),
            Lookup::At(200),
            "rounds up to the next frame"
        );
        assert_eq!(
            b.find_timestamp(1000, 300),
            Lookup::BeforeOldest { oldest: 150 }
        );
        assert_eq!(
            b.find_timestamp(1000 + 400 * 300, 300),
            Lookup::After { next: 250 }
        );

        let (mut p, b) = latency_buffer(32, 100, PageSize::Small4K).unwrap();
        push_n(&mut p, 100, 300, 10); // a 5-frame gap every 10 frames defeats the O(1) guess
        for seq in 1..100u64 {
            let mut f = vec![0u8; 32];
            b.read(seq, &mut f).unwrap();
            let t = timestamp_of(&f);
            assert_eq!(b.find_timestamp(t, 300), Lookup::At(seq));
            assert_eq!(b.find_timestamp(t - 1, 300), Lookup::At(seq));
        }
    }
}
