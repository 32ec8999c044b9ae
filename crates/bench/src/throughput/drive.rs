//! One benchmark thread with its sink: set up its source (writes) or prefill (reads), wait at
//! the start barrier, then write or read blocks until told to stop, timing each operation while
//! the point is measured. Writes are checked by reading the last block back, reads by the stamp
//! the prefill put in every word: a figure whose data did not arrive is refused.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use snbuf_persist::{PersistError, Sink, SinkReport, WithSink};
use snbuf_platform::cpu::thread_cpu_seconds;
use snbuf_platform::memory::{AlignedBuf, PageSize};
use snbuf_platform::rng::Rng;

use crate::clock::OpClock;
use crate::throughput::config::REGION_ALIGN_BYTES;
use crate::throughput::config::{Direction, Pattern, PersistEvery, Point, ThroughputConfig};

/// DRAM the write source buffer takes per thread, at most: a detector's ring is recently written,
/// so a cache-sized source is realistic; the same size is used for the peers (bench/peers.sh).
pub const SOURCE_BYTES: usize = 64 << 20;
/// Reads are prefilled with writes of this size, whatever the block size under test.
pub(crate) const PREFILL_CHUNK_BYTES: usize = 1 << 20;
/// The prefill puts `offset ^ FILL_SEED` in every 8-byte word, so any read can be checked.
const FILL_SEED: u64 = 0x5EB0_F000_D00D_CAFE;

pub(crate) const PHASE_WARMUP: u8 = 0;
pub(crate) const PHASE_MEASURE: u8 = 1;
pub(crate) const PHASE_STOP: u8 = 2;

/// Why a thread's point failed.
#[derive(Debug)]
pub(crate) enum DriveError {
    Persist(PersistError),
    /// Data did not read back as written: the figure would not be real.
    Integrity(String),
}

impl From<PersistError> for DriveError {
    fn from(e: PersistError) -> Self {
        DriveError::Persist(e)
    }
}

/// What one thread measured.
pub(crate) struct ThreadOutcome {
    pub bytes: u64,
    pub ops: u64,
    pub elapsed: Duration,
    /// This thread's CPU seconds over `elapsed`.
    pub cpu_s: f64,
    pub latency_ticks: Histogram<u64>,
    pub completion_ns: Option<Histogram<u64>>,
    pub verified_ops: u64,
    pub report: SinkReport,
    pub source_page_bytes: Option<u64>,
    pub slot_bytes: u64,
}

/// Everything one benchmark thread needs besides its sink.
pub(crate) struct ThreadCtx<'a> {
    pub config: &'a ThroughputConfig,
    pub point: Point,
    pub path: &'a Path,
    pub region_offset: u64,
    pub region: u64,
    pub cpu_id: usize,
    pub clock: &'a OpClock,
    pub phase: &'a AtomicU8,
    pub ready: &'a Barrier,
    /// Set once the thread has reached the start barrier.
    pub arrived: &'a Cell<bool>,
    /// Threads that have completed at least one measured operation: the coordinator holds the
    /// timed window open until every thread has.
    pub measured_threads: &'a AtomicUsize,
}

/// Runs the thread's loop with the sink's concrete type (see `snbuf_persist::WithSink`).
pub(crate) struct Drive<'a>(pub &'a ThreadCtx<'a>);

impl WithSink for Drive<'_> {
    type Output = Result<ThreadOutcome, DriveError>;
    fn run<S: Sink + 'static>(self, mut sink: S) -> Self::Output {
        drive(&mut sink, self.0)
    }
}

/// Where the next block goes: slot indices, sequential with wrap-around or uniformly random.
struct SlotWalk {
    pattern: Pattern,
    slots: u64,
    next: u64,
    rng: Rng,
}

impl SlotWalk {
    fn new(pattern: Pattern, slots: u64, seed: u64) -> Self {
        SlotWalk {
            pattern,
            slots,
            next: 0,
            rng: Rng::new(seed),
        }
    }

    #[inline(always)]
    fn next_slot(&mut self) -> u64 {
        match self.pattern {
            Pattern::Seq => {
                let s = self.next;
                self.next += 1;
                if self.next == self.slots {
                    self.next = 0;
                }
                s
            }
            Pattern::Rand => self.rng.below(self.slots),
        }
    }
}

/// The per-operation timing of a measured point: every operation back to back, or a random
/// sample averaging one in `every`.
struct OpTimer<'a> {
    clock: &'a OpClock,
    every: u32,
    until_sample: u32,
    rng: u64,
    sampled_start: u64,
    prev: u64,
    ticks: Histogram<u64>,
}

impl<'a> OpTimer<'a> {
    fn new(clock: &'a OpClock, every: u32, seed: u64) -> Self {
        OpTimer {
            clock,
            every,
            until_sample: 1,
            rng: 0x2545_F491_4F6C_DD1Du64 ^ seed,
            sampled_start: 0,
            prev: clock.now(),
            ticks: new_histogram(),
        }
    }

    /// Measurement starts now.
    fn restart(&mut self) {
        self.prev = self.clock.now();
    }

    /// Before an operation: whether this one is sampled (and if so its start is taken).
    #[inline(always)]
    fn before(&mut self) -> bool {
        let sampled = self.every > 1 && {
            self.until_sample -= 1;
            self.until_sample == 0
        };
        if sampled {
            self.sampled_start = self.clock.now();
        }
        sampled
    }

    /// After an operation.
    #[inline(always)]
    fn after(&mut self, sampled: bool) {
        if self.every == 1 {
            // Back to back: one clock read per operation.
            let now = self.clock.now();
            self.ticks
                .saturating_record(now.wrapping_sub(self.prev).max(1));
            self.prev = now;
        } else if sampled {
            self.ticks
                .saturating_record(self.clock.now().wrapping_sub(self.sampled_start).max(1));
            // Next sample after a random gap in [1, 2N-1]: mean N, no aliasing with any
            // periodic behaviour of the target.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.until_sample = 1 + (self.rng % (2 * self.every as u64 - 1)) as u32;
        }
    }
}

/// The thread's data: what writes copy from, or the buffer reads land in.
struct Buffers {
    data: AlignedBuf,
    source_page_bytes: Option<u64>,
}

fn buffers<S: Sink>(sink: &mut S, ctx: &ThreadCtx) -> Result<Buffers, PersistError> {
    let block = ctx.point.block_size_bytes as usize;
    let config = ctx.config;
    Ok(match config.direction {
        Direction::Write => {
            let mut src = AlignedBuf::new(
                SOURCE_BYTES.min(ctx.region as usize).max(block),
                config.page_size,
            )
            .map_err(|e| PersistError::io("allocate source buffer for", ctx.path, e))?;
            fill_random(src.as_mut_slice(), ctx.cpu_id as u64 + 1);
            let pages = src.pages_obtained().ok().map(|p| p.effective_page_bytes());
            Buffers {
                data: src,
                source_page_bytes: pages,
            }
        }
        Direction::Read => {
            prefill(sink, ctx.region, ctx.path)?;
            Buffers {
                data: AlignedBuf::new(block, config.page_size)
                    .map_err(|e| PersistError::io("allocate read buffer for", ctx.path, e))?,
                source_page_bytes: None,
            }
        }
    })
}

/// The measured loop of one thread. What each operation does is in `write_block` and
/// `read_block`, inlined: the timed path has no more calls than before.
fn drive<S: Sink>(sink: &mut S, ctx: &ThreadCtx) -> Result<ThreadOutcome, DriveError> {
    let (config, point) = (ctx.config, ctx.point);
    let block = point.block_size_bytes as usize;
    let (mut walk, slot_bytes) = slot_walk(sink, ctx);
    let Buffers {
        data: mut buf,
        source_page_bytes,
    } = buffers(sink, ctx)?;
    let source_span = buf.len() - block;
    let mut source_offset = 0usize;
    let mut since_persist = 0u64;
    let mut completion_ns = new_histogram();
    let mut has_completions = false;
    let (mut bytes, mut ops, mut verified_ops) = (0u64, 0u64, 0u64);
    let mut last_write: Option<(u64, usize)> = None;
    // Only queued methods have completion latencies; asking the others costs a virtual call per
    // operation for nothing.
    let queued = point.method.capabilities().async_queue;

    ctx.arrived.set(true);
    ctx.ready.wait();

    let mut timer = OpTimer::new(ctx.clock, config.latency_every, ctx.region_offset);
    let mut measuring = false;
    let mut t0 = Instant::now();
    let mut cpu0 = 0.0;
    loop {
        let p = ctx.phase.load(Ordering::Relaxed);
        if p == PHASE_STOP {
            break;
        }
        if p == PHASE_MEASURE && !measuring {
            leave_warm_up(sink, config.direction, &mut since_persist)?;
            measuring = true;
            t0 = Instant::now();
            cpu0 = thread_cpu_seconds();
            timer.restart();
        }
        let offset = walk.next_slot() * slot_bytes;
        let sampled = measuring && timer.before();
        match config.direction {
            Direction::Write => {
                let data = &buf.as_slice()[source_offset..source_offset + block];
                last_write = Some((offset, source_offset));
                source_offset += block;
                if source_offset > source_span {
                    source_offset = 0;
                }
                since_persist += point.block_size_bytes;
                write_block(sink, config.persist_every, offset, data, &mut since_persist)?;
            }
            Direction::Read => {
                read_block(sink, offset, &mut buf.as_mut_slice()[..block])?;
                verified_ops += measuring as u64;
            }
        }
        if measuring {
            timer.after(sampled);
            bytes += point.block_size_bytes;
            ops += 1;
            if ops == 1 {
                ctx.measured_threads.fetch_add(1, Ordering::AcqRel);
            }
            if queued {
                has_completions |= sink.drain_completion_latencies_ns(&mut |ns| {
                    completion_ns.saturating_record(ns.max(1))
                });
            }
        } else if queued {
            let _ = sink.drain_completion_latencies_ns(&mut |_| {});
        }
    }
    // Whatever is still pending is persisted inside the timed region: a write figure is a
    // durable-write figure.
    if config.direction == Direction::Write && since_persist > 0 {
        sink.persist()?;
    }
    let elapsed = t0.elapsed();
    let cpu_s = thread_cpu_seconds() - cpu0;
    if measuring {
        has_completions |= sink
            .drain_completion_latencies_ns(&mut |ns| completion_ns.saturating_record(ns.max(1)));
    }
    if let Some((offset, src_off)) = last_write {
        check_read_back(sink, offset, &buf.as_slice()[src_off..src_off + block])?;
    }
    Ok(ThreadOutcome {
        bytes,
        ops,
        elapsed: if measuring { elapsed } else { Duration::ZERO },
        cpu_s: if measuring { cpu_s } else { 0.0 },
        latency_ticks: timer.ticks,
        completion_ns: has_completions.then_some(completion_ns),
        verified_ops,
        report: sink.report().clone(),
        source_page_bytes,
        slot_bytes,
    })
}

/// The walk over the thread's region and the slot size: one block rounded up to the sink's
/// alignment, so every operation starts on an aligned offset.
fn slot_walk<S: Sink>(sink: &S, ctx: &ThreadCtx) -> (SlotWalk, u64) {
    let align = sink.report().alignment_bytes;
    let slot_bytes = (ctx.point.block_size_bytes.div_ceil(align) * align).max(1);
    assert!(
        slot_bytes <= ctx.region,
        "a slot ({slot_bytes} B) must fit the thread's region ({} B)",
        ctx.region
    );
    let walk = SlotWalk::new(
        ctx.config.pattern,
        ctx.region / slot_bytes,
        ctx.region_offset / REGION_ALIGN_BYTES + 1,
    );
    (walk, slot_bytes)
}

/// Leaves the warm-up with nothing pending, so the timed region owes nothing to it.
fn leave_warm_up<S: Sink>(
    sink: &mut S,
    direction: Direction,
    since_persist: &mut u64,
) -> Result<(), DriveError> {
    if direction == Direction::Write && *since_persist > 0 {
        sink.persist()?;
        *since_persist = 0;
    }
    let _ = sink.drain_completion_latencies_ns(&mut |_| {});
    Ok(())
}

/// One block written at `offset`, persisted as `persist_every` asks (`since_persist`: bytes
/// written since the last persist, this block's included; zeroed by a persist).
#[inline(always)]
fn write_block<S: Sink>(
    sink: &mut S,
    persist_every: PersistEvery,
    offset: u64,
    data: &[u8],
    since_persist: &mut u64,
) -> Result<(), DriveError> {
    match persist_every {
        PersistEvery::Op => {
            sink.write_persist_at(offset, data)?;
            *since_persist = 0;
        }
        PersistEvery::Bytes(n) => {
            sink.write_at(offset, data)?;
            if *since_persist >= n {
                sink.persist()?;
                *since_persist = 0;
            }
        }
        PersistEvery::End => sink.write_at(offset, data)?,
    }
    Ok(())
}

/// One block read at `offset` into `out`, and checked against what the prefill wrote there.
#[inline(always)]
fn read_block<S: Sink>(sink: &mut S, offset: u64, out: &mut [u8]) -> Result<(), DriveError> {
    sink.read_at(offset, out)?;
    if !check_fill(out, offset) {
        return Err(DriveError::Integrity(format!(
            "read at offset {offset} returned data the prefill did not write"
        )));
    }
    Ok(())
}

/// Guards against a sink that accepted data and dropped it: the last block written reads back.
fn check_read_back<S: Sink>(sink: &mut S, offset: u64, want: &[u8]) -> Result<(), DriveError> {
    let mut back = vec![0u8; want.len()];
    sink.read_at(offset, &mut back)?;
    if back != want {
        return Err(DriveError::Integrity(format!(
            "the last block written at offset {offset} did not read back"
        )));
    }
    Ok(())
}

/// Writes the whole region with position-stamped content, durably, in large writes.
fn prefill<S: Sink>(sink: &mut S, region: u64, path: &Path) -> Result<(), PersistError> {
    let mut chunk = AlignedBuf::new(PREFILL_CHUNK_BYTES, PageSize::Small4K)
        .map_err(|e| PersistError::io("allocate prefill buffer for", path, e))?;
    let mut offset = 0u64;
    while offset < region {
        let len = (region - offset).min(PREFILL_CHUNK_BYTES as u64) as usize;
        for (i, word) in chunk.as_mut_slice()[..len].chunks_exact_mut(8).enumerate() {
            word.copy_from_slice(&((offset + 8 * i as u64) ^ FILL_SEED).to_le_bytes());
        }
        sink.write_at(offset, &chunk.as_slice()[..len])?;
        offset += len as u64;
    }
    sink.persist()?;
    drop_page_cache(path);
    Ok(())
}

/// Asks the kernel to drop the file's cached pages, so buffered reads start from the medium.
fn drop_page_cache(path: &Path) {
    if let Ok(f) = std::fs::File::open(path) {
        use std::os::fd::AsRawFd;
        // SAFETY: advisory syscall on an fd we own.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    }
}

/// Checks the first whole 8-byte word of a block read at `offset` against the prefill stamp.
fn check_fill(buf: &[u8], offset: u64) -> bool {
    let skip = ((8 - offset % 8) % 8) as usize;
    match buf.get(skip..skip + 8) {
        Some(word) => {
            u64::from_le_bytes(word.try_into().unwrap()) == (offset + skip as u64) ^ FILL_SEED
        }
        None => true, // blocks shorter than a word cannot hold a stamp
    }
}

fn fill_random(buf: &mut [u8], seed: u64) {
    snbuf_platform::rng::Rng::new(seed).fill(buf);
}

/// Up to an hour in TSC ticks or ns at 3 significant digits; longer values saturate (and an op
/// that takes an hour is reported as one).
pub(crate) fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3600 * 10_000_000_000, 3).expect("bounds and precision are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_walk_stays_in_range_and_spreads() {
        let mut w = SlotWalk::new(Pattern::Rand, 1000, 7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let s = w.next_slot();
            assert!(s < 1000);
            seen.insert(s);
        }
        assert!(seen.len() > 900, "{}", seen.len());
        let mut w = SlotWalk::new(Pattern::Seq, 3, 7);
        let v: Vec<u64> = (0..7).map(|_| w.next_slot()).collect();
        assert_eq!(v, vec![0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn fill_stamps_check_at_any_offset() {
        let mut buf = vec![0u8; 64];
        let base = 1000u64;
        for (i, w) in buf.chunks_exact_mut(8).enumerate() {
            w.copy_from_slice(&((base + 8 * i as u64) ^ FILL_SEED).to_le_bytes());
        }
        assert!(check_fill(&buf, base));
        assert!(check_fill(&buf[3..], base + 3));
        assert!(!check_fill(&buf, base + 8));
    }
}
