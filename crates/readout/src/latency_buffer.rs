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
//! Each slot has its frame's CRC-32C beside it, computed by the producer while the frame is in
//! its cache (a frame it just made, or a datagram the kernel just copied in) and covered by the
//! same seqlock: a writer that sends frames to a device straight from the ring (O_DIRECT) gets
//! its chunk's checksum by combining theirs, and never reads the payload from DRAM itself.
//!
//! Memory is allocated and prefaulted once (optionally on 2 MiB pages), so the producer takes no
//! page fault and memory use is fixed: `memory_bytes()`.

use std::cell::UnsafeCell;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use snbuf_platform::memory::{AlignedBuf, PageSize, PagesObtained};

use snbuf_frames::FrameLayout;

pub use crate::frame_run::FrameRun;

struct Ring {
    slots: UnsafeCell<AlignedBuf>,
    /// How the frames are laid out: their size, and where their timestamps are.
    layout: FrameLayout,
    frame_bytes: usize,
    capacity: u64,
    /// The CRC-32C of each slot's frame, written with the slot (before `written` publishes it).
    crcs: Box<[AtomicU32]>,
    /// Whether the producer keeps `crcs` (on unless the readers have no use for them: a writer
    /// to mapped memory checksums what its copy just brought into its cache).
    checksums: AtomicBool,
    /// Frames whose write has begun: frame n's slot is being written once `claimed > n`.
    claimed: AtomicU64,
    /// Frames completely written and readable: sequence numbers `< written`.
    written: AtomicU64,
}

// SAFETY: the slots are written only by the single `Producer` and read by readers that validate
// every copy against `claimed` afterwards (see the module comment); the counters are atomics.
unsafe impl Sync for Ring {}
// SAFETY: the ring owns its memory (an AlignedBuf, itself Send) and its atomics.
unsafe impl Send for Ring {}

/// A sink writing from the ring's slots after a read returned holds the ring, so its memory
/// stays allocated until the device is done with it.
impl snbuf_platform::HeldMemory for Ring {
    fn address_range(&self) -> std::ops::Range<usize> {
        // SAFETY: reading the allocation's address and length only.
        let slots = unsafe { &*self.slots.get() };
        let start = slots.as_ptr() as usize;
        start..start + slots.len()
    }
}

/// The writing end; there is exactly one per buffer (it is not `Clone`).
pub struct Producer {
    ring: Arc<Ring>,
    /// Frames written into their slots, published or not (`stage`, `publish`).
    staged: u64,
    /// What `claimed` was last set to: it only grows.
    claimed: u64,
}

/// The reading end; clone it freely.
#[derive(Clone)]
pub struct LatencyBuffer {
    ring: Arc<Ring>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingReadError {
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

/// A latency buffer of `capacity_frames` frames laid out as `layout`.
pub fn latency_buffer(
    layout: FrameLayout,
    capacity_frames: u64,
    page_size: PageSize,
) -> std::io::Result<(Producer, LatencyBuffer)> {
    latency_buffer_on_node(layout, capacity_frames, page_size, None)
}

/// `latency_buffer` with its memory on NUMA node `node` (the node of the device the link is
/// written to, so the device's DMA and the writer read it locally); None: the kernel's default.
pub fn latency_buffer_on_node(
    layout: FrameLayout,
    capacity_frames: u64,
    page_size: PageSize,
    node: Option<u32>,
) -> std::io::Result<(Producer, LatencyBuffer)> {
    let frame_bytes = layout.frame_bytes as usize;
    if frame_bytes < snbuf_frames::MIN_FRAME_BYTES as usize || capacity_frames < 2 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "a latency buffer needs frames of >= 8 B and >= 2 slots",
        ));
    }
    let bytes = (frame_bytes as u64)
        .checked_mul(capacity_frames)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "latency buffer too large")
        })?;
    let slots = AlignedBuf::new_on_node(bytes, page_size, node)?;
    assert!(slots.len() >= bytes, "the ring's memory holds every slot");
    let ring = Arc::new(Ring {
        slots: UnsafeCell::new(slots),
        layout,
        frame_bytes,
        capacity: capacity_frames,
        crcs: (0..capacity_frames).map(|_| AtomicU32::new(0)).collect(),
        checksums: AtomicBool::new(true),
        claimed: AtomicU64::new(0),
        written: AtomicU64::new(0),
    });
    Ok((
        Producer {
            ring: ring.clone(),
            staged: 0,
            claimed: 0,
        },
        LatencyBuffer { ring },
    ))
}

/// The CRC-32C (Castagnoli) of one frame, as the ring keeps it beside the slot.
pub fn frame_crc32c(frame: &[u8]) -> u32 {
    snbuf_platform::crc::crc32c_in_cache(&[frame])
}

impl Ring {
    fn index(&self, seq: u64) -> usize {
        debug_assert!(self.capacity >= 2, "a ring of two slots or more");
        (seq % self.capacity) as usize
    }

    fn slot_ptr(&self, seq: u64) -> *mut u8 {
        let index = self.index(seq);
        // SAFETY: reading the allocation's length only.
        let len = unsafe { (*self.slots.get()).len() };
        debug_assert!(
            (index + 1) * self.frame_bytes <= len,
            "slot {index} is in the ring"
        );
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
    ///
    /// The frame's checksum is taken from the slot after `fill`: a read of the slot, from DRAM if
    /// `fill` streamed it there. A producer that made the frame in its cache gives the checksum
    /// itself (`stage_with_crc`).
    #[inline]
    pub fn stage(&mut self, fill: impl FnOnce(u64, &mut [u8])) -> u64 {
        let seq = self.stage_with_crc(None, fill);
        if !self.frame_checksums() {
            return seq;
        }
        let r = &*self.ring;
        // SAFETY: as in `stage_with_crc`: the slot is this producer's, inside the ring.
        let slot = unsafe { std::slice::from_raw_parts(r.slot_ptr(seq), r.frame_bytes) };
        r.crcs[r.index(seq)].store(frame_crc32c(slot), Ordering::Relaxed);
        seq
    }

    /// `stage` for a frame whose CRC-32C the caller computed (`frame_crc32c` of exactly the
    /// bytes `fill` writes), so the slot is never read back; `None` leaves the slot's checksum to
    /// the caller (`stage`).
    #[inline]
    pub fn stage_with_crc(&mut self, crc: Option<u32>, fill: impl FnOnce(u64, &mut [u8])) -> u64 {
        let seq = self.staged;
        // Announce the overwrite before touching the slot, so a reader copying the old frame
        // learns of it. The fence keeps the slot's stores after the announcement.
        self.announce(seq + 1);
        debug_assert!(
            self.claimed > seq,
            "a slot is announced before it is written"
        );
        let r = &*self.ring;
        // SAFETY: only this (unique) producer writes slots; the slot is inside the ring; readers
        // that overlap validate their copy against `claimed`.
        let slot = unsafe { std::slice::from_raw_parts_mut(r.slot_ptr(seq), r.frame_bytes) };
        fill(seq, slot);
        if let Some(crc) = crc {
            r.crcs[r.index(seq)].store(crc, Ordering::Relaxed);
        }
        self.staged = seq + 1;
        seq
    }

    /// Announces that slots up to frame `upto` (exclusive) are being overwritten: `claimed`
    /// only grows, whatever was claimed and then not kept.
    #[inline]
    fn announce(&mut self, upto: u64) {
        if upto > self.claimed {
            self.claimed = upto;
            self.ring.claimed.store(upto, Ordering::Relaxed);
        }
        debug_assert!(self.claimed >= upto && self.claimed >= self.staged);
        fence(Ordering::Release);
    }

    /// Claims the next `n` slots to be filled in place from outside (a receiver writing
    /// datagrams straight into them), announcing the overwrite of the frames they held, and
    /// returns their addresses in order: each slot is whole (`frame_bytes`), and a claim may wrap
    /// the ring's end. The addresses stay valid while this producer lives; what is written
    /// there becomes frames only through `keep` and `publish`. At most half the ring at once.
    pub fn claim(&mut self, n: usize) -> Vec<*mut u8> {
        assert!(
            (n as u64) * 2 <= self.ring.capacity,
            "a claim of {n} slots in a ring of {}",
            self.ring.capacity
        );
        self.announce(self.staged + n as u64);
        debug_assert!(
            self.claimed >= self.staged + n as u64,
            "every slot lent is claimed"
        );
        (0..n as u64)
            .map(|i| self.ring.slot_ptr(self.staged + i))
            .collect()
    }

    /// Claimed slot `i` of the last claim, as it is now.
    pub fn claimed_slot(&self, i: usize) -> &[u8] {
        assert!(
            self.staged + (i as u64) < self.claimed,
            "slot {i} was not claimed"
        );
        // SAFETY: the slot lies inside the ring, was claimed (no reader trusts it), and only this
        // producer writes it; the shared borrow of self keeps `keep`/`claim` from running.
        unsafe {
            std::slice::from_raw_parts(
                self.ring.slot_ptr(self.staged + i as u64),
                self.ring.frame_bytes,
            )
        }
    }

    /// Copies claimed slot `from` over claimed slot `to`, to close up after a dropped frame.
    pub fn move_claimed(&mut self, from: usize, to: usize) {
        assert!(to < from && self.staged + (from as u64) < self.claimed);
        let (src, dst) = (
            self.ring.slot_ptr(self.staged + from as u64),
            self.ring.slot_ptr(self.staged + to as u64),
        );
        // SAFETY: both slots are claimed (no reader trusts them), distinct, inside the ring and
        // whole frames; only this producer writes them.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, self.ring.frame_bytes) };
    }

    /// Writes `frame` into claimed slot `to` (a frame that arrived some other way than into
    /// its slot).
    pub fn fill_claimed(&mut self, to: usize, frame: &[u8]) {
        assert!(self.staged + (to as u64) < self.claimed && frame.len() == self.ring.frame_bytes);
        // SAFETY: the slot is claimed (no reader trusts it), inside the ring and a whole frame;
        // only this producer writes it, and `frame` is not in the ring (a borrow of self's
        // slots cannot be held across this &mut call).
        unsafe {
            std::ptr::copy_nonoverlapping(
                frame.as_ptr(),
                self.ring.slot_ptr(self.staged + to as u64),
                frame.len(),
            )
        };
    }

    /// Keeps the first `k` frames of the last claim as staged (`publish` makes them readable),
    /// checksumming each: they were just written into the slots (by the kernel's copy of a
    /// datagram, or `fill_claimed`), so they are read from the cache.
    pub fn keep(&mut self, k: usize) {
        assert!(
            self.staged + k as u64 <= self.claimed,
            "kept more than was claimed"
        );
        for i in (0..k).filter(|_| self.frame_checksums()) {
            let crc = frame_crc32c(self.claimed_slot(i));
            let r = &*self.ring;
            r.crcs[r.index(self.staged + i as u64)].store(crc, Ordering::Relaxed);
        }
        self.staged += k as u64;
    }

    /// Makes every staged frame readable.
    #[inline]
    pub fn publish(&mut self) {
        debug_assert!(
            self.staged <= self.claimed,
            "a frame published had its slot claimed"
        );
        debug_assert!(
            self.ring.written.load(Ordering::Relaxed) <= self.staged,
            "what is readable only grows"
        );
        // Non-temporal stores are not ordered by a release store: drain them first.
        #[cfg(target_arch = "x86_64")]
        snbuf_platform::instructions::sfence();
        self.ring.written.store(self.staged, Ordering::Release);
    }

    pub fn buffer(&self) -> LatencyBuffer {
        LatencyBuffer {
            ring: self.ring.clone(),
        }
    }

    /// Whether frames are checksummed as they come in (`set_frame_checksums`).
    pub fn frame_checksums(&self) -> bool {
        self.ring.checksums.load(Ordering::Relaxed)
    }

    /// Turns the frames' checksums on (the default) or off, before the first frame: off when
    /// no reader uses them, which saves the producer their CPU.
    pub fn set_frame_checksums(&mut self, on: bool) {
        assert_eq!(self.staged, 0, "set before the first frame");
        self.ring.checksums.store(on, Ordering::Relaxed);
    }
}

impl LatencyBuffer {
    /// Whether each frame's CRC-32C is kept beside it (`FrameRun::frame_crc`).
    pub fn frame_checksums(&self) -> bool {
        self.ring.checksums.load(Ordering::Relaxed)
    }

    pub fn frame_bytes(&self) -> usize {
        self.ring.frame_bytes
    }

    /// How the buffered frames are laid out.
    pub fn layout(&self) -> &FrameLayout {
        &self.ring.layout
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
        let written = self.written();
        let fill = written - self.oldest().min(written);
        debug_assert!(
            fill <= self.ring.capacity,
            "the ring holds at most its slots"
        );
        fill
    }

    /// Copies frames `first, first + 1, …` into `out` (a whole number of frames, at most the
    /// capacity) and returns how many were copied: fewer than asked if not all are written yet.
    pub fn read(&self, first: u64, out: &mut [u8]) -> Result<usize, RingReadError> {
        assert!(
            out.len().is_multiple_of(self.ring.frame_bytes),
            "frames are read whole"
        );
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
    ) -> Result<(usize, R), RingReadError> {
        let r = &*self.ring;
        let written = r.written.load(Ordering::Acquire);
        if first >= written {
            return Err(RingReadError::NotYet);
        }
        let n = max_frames.min(written - first).min(r.capacity);
        assert!(first + n <= written, "only written frames are lent");
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
        assert!(a + b == n as usize && start + a <= r.capacity as usize && b <= start);
        // SAFETY: both ranges lie inside the ring's allocation. The producer may be writing them
        // right now: the slices are only trusted after the check below (seqlock validation), and
        // `read_with`'s contract makes `f` treat them as provisional.
        let run = unsafe {
            FrameRun {
                head: std::slice::from_raw_parts(r.slot_ptr(first), a * r.frame_bytes),
                tail: std::slice::from_raw_parts(r.slot_ptr(0), b * r.frame_bytes),
                frame_bytes: r.frame_bytes,
                crc_head: &r.crcs[start..start + a],
                crc_tail: &r.crcs[..b],
            }
        };
        debug_assert_eq!(run.frames(), n as usize, "the run is the frames lent");
        let out = f(&run);
        self.still_holds(first)?;
        Ok((n as usize, out))
    }

    /// Whether no frame from `first` on has been overwritten yet: `read_with`'s check, for a
    /// reader whose use of the frames ended after `read_with` returned (a device still reading
    /// them by DMA until a completion the caller waited for). `Ok` vouches for every read of
    /// those slots that finished before this call.
    pub fn still_holds(&self, first: u64) -> Result<(), RingReadError> {
        let written = self.ring.written.load(Ordering::Acquire);
        // Every read made before must happen before we look at `claimed`.
        fence(Ordering::Acquire);
        let claimed = self.ring.claimed.load(Ordering::Relaxed);
        let oldest = claimed.saturating_sub(self.ring.capacity);
        debug_assert!(
            claimed >= written,
            "a readable frame's slot was claimed before it was published"
        );
        if first < oldest {
            return Err(RingReadError::Overwritten { oldest });
        }
        Ok(())
    }

    /// The ring's memory, held: a sink may go on reading frames lent by `read_with` from it
    /// (`Sink::start_in_place`) until its write is over.
    pub fn held_memory(&self) -> Arc<dyn snbuf_platform::HeldMemory> {
        self.ring.clone()
    }

    /// The timestamp of frame `seq`, read in place.
    pub fn timestamp_at(&self, seq: u64) -> Result<u64, RingReadError> {
        let layout = self.ring.layout;
        self.read_with(seq, 1, |run| layout.timestamp(run.frame(0)))
            .and_then(|(n, ts)| {
                if n == 1 {
                    Ok(ts)
                } else {
                    Err(RingReadError::NotYet)
                }
            })
    }

    /// Finds the first buffered frame with a timestamp >= `ts`. For fixed-rate data (the frame
    /// type's ticks between frames) the position is computed from the newest frame and
    /// checked: O(1). When frames are missing the guess is wrong and a binary search over the
    /// buffer finds it.
    pub fn find_timestamp(&self, ts: u64) -> Lookup {
        let ticks_per_frame = self.ring.layout.ticks_per_frame;
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
            if ticks_per_frame > 0 {
                let back = (newest_ts - ts).div_ceil(ticks_per_frame);
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
                debug_assert!(
                    lo > oldest && lo <= newest,
                    "found among the frames searched"
                );
                return Lookup::At(lo);
            }
        }
    }
}
