//! `bench write` and `bench read`: throughput, request rate and per-operation latency of a
//! persistence method against block size and thread count (DUNE paper Figs 2, 3 and 5, Table II).
//!
//! Each point: every thread opens its own sink (through `snbuf_persist::open`, the recorder's
//! code) on its own region of a target — one shared target is the paper's interleaved case, one
//! target per thread the non-interleaved one — prefaults it, is pinned to a CPU, warms up, then
//! runs for the set duration. A write copies a block from a DRAM source buffer and, at each
//! persist point, makes it durable; a read walks the region (sequentially or at random, never one
//! cached line) and checks the content against what the prefill wrote, so a read that returned
//! nothing real fails the point.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use snbuf_persist::memory::{AlignedBuf, PageSize};
use snbuf_persist::{
    cpu, open_with, Method, PersistError, Sink, SinkConfig, SinkReport, SyncMode, WithSink,
};

use crate::clock::OpClock;
use crate::results::{LatencyNs, ThroughputResult};

/// Regions are multiples of this so every thread's region starts on a 2 MiB page and on any
/// direct-I/O alignment.
pub const REGION_ALIGN_BYTES: u64 = 2 << 20;
/// DRAM the write source buffer takes per thread, at most: a detector's ring is recently written,
/// so a cache-sized source is realistic; the same size is used for the peers (bench/peers.sh).
pub const SOURCE_BYTES: usize = 64 << 20;
/// Reads are prefilled with writes of this size, whatever the block size under test.
const PREFILL_CHUNK_BYTES: usize = 1 << 20;
/// The prefill puts `offset ^ FILL_SEED` in every 8-byte word, so any read can be checked.
const FILL_SEED: u64 = 0x5EB0_F000_D00D_CAFE;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Write,
    Read,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Write => "write",
            Direction::Read => "read",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Seq,
    Rand,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Rand => "rand",
        }
    }
}

/// When a writer makes its data durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistEvery {
    /// After every block: each operation is "write this block durably" (the papers' request).
    Op,
    /// After at least this many bytes.
    Bytes(u64),
    /// Once, at the end of the point (inside the timed region): raw device speed, like fio's
    /// end_fsync=1.
    End,
}

impl PersistEvery {
    pub fn describe(self) -> String {
        match self {
            PersistEvery::Op => "op".into(),
            PersistEvery::Bytes(b) => b.to_string(),
            PersistEvery::End => "end".into(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ThroughputConfig {
    pub direction: Direction,
    pub methods: Vec<Method>,
    /// Directories (a temporary file is made in each) or files (used as they are).
    pub targets: Vec<PathBuf>,
    pub block_sizes_bytes: Vec<u64>,
    pub threads: Vec<usize>,
    pub pattern: Pattern,
    pub duration: Duration,
    pub warmup: Duration,
    pub page_size: PageSize,
    /// CPUs to pin thread i to (`cpus[i % len]`).
    pub cpus: Vec<usize>,
    pub region_bytes_per_thread: u64,
    pub queue_depth: u32,
    pub sync_mode: SyncMode,
    pub persist_every: PersistEvery,
    /// Time one operation in this many: 1 times every operation (default), N > 1 a random sample
    /// averaging one in N, 0 none (throughput only, like fio's gtod_reduce). Reading the clock
    /// costs ~10 ns, a few percent of a 256 B persist.
    pub latency_every: u32,
    /// Allow a target that is an existing, non-empty file: the benchmark overwrites it.
    pub overwrite: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Config(String),
    #[error("target {path}: {why}")]
    Target { path: PathBuf, why: String },
    #[error("{method}, {block} B, {threads} thread(s): {cause}")]
    Persist {
        method: Method,
        block: u64,
        threads: usize,
        cause: PersistError,
    },
    #[error("{0}")]
    Implausible(String),
}

/// One (method, block size, threads) point of a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub method: Method,
    pub block_size_bytes: u64,
    pub threads: usize,
}

impl ThroughputConfig {
    /// Checks everything that can be checked before any file is touched.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |s: String| Err(BenchError::Config(s));
        if self.methods.is_empty() {
            return bad("no method given".into());
        }
        if self.targets.is_empty() {
            return bad("no target given".into());
        }
        if self.threads.is_empty() || self.threads.contains(&0) {
            return bad("thread counts must be at least 1".into());
        }
        if self.block_sizes_bytes.is_empty() || self.block_sizes_bytes.contains(&0) {
            return bad("block sizes must be at least 1 byte".into());
        }
        if self.duration.is_zero() {
            return bad("duration must be more than 0".into());
        }
        if self.queue_depth == 0 {
            return bad("queue depth must be at least 1".into());
        }
        if self.cpus.is_empty() {
            return bad("no CPU to run on".into());
        }
        if let PersistEvery::Bytes(0) = self.persist_every {
            return bad("--persist-every must be more than 0 bytes".into());
        }
        let region = self.region_bytes();
        for &b in &self.block_sizes_bytes {
            // Room for the largest padding (4 KiB alignment) and at least two blocks.
            if b.div_ceil(4096) * 4096 * 2 > region {
                return bad(format!(
                    "block size {b} B needs a region of at least {} B per thread (have {region} B)",
                    b.div_ceil(4096) * 4096 * 2
                ));
            }
            if b > u32::MAX as u64 {
                return bad(format!("block size {b} B is larger than one I/O can be"));
            }
        }
        for m in &self.methods {
            if !m.compiled_in() {
                return bad(format!(
                    "method {m} is not in this build of snbuf; rebuild with `--features {}` (needs libpmem-dev)",
                    m.capabilities().cargo_feature.unwrap_or("?")
                ));
            }
        }
        for t in &self.targets {
            check_target(t)?;
            // A benchmark overwrites its target: never a file that holds data, unless asked
            // (pointing it at a burst's link file by mistake would destroy a recording).
            if !self.overwrite && t.is_file() && t.metadata().map(|m| m.len() > 0).unwrap_or(false)
            {
                return Err(BenchError::Target {
                    path: t.clone(),
                    why: "exists and holds data, which the benchmark would overwrite; pass a directory, a new file, or --overwrite".into(),
                });
            }
        }
        self.check_free_space()
    }

    /// Refuses a sweep whose regions cannot fit in a target directory's free space, so a small
    /// file system gets advice instead of a failure in the middle of a sweep. (A full file system
    /// met later anyway is still reported as ENOSPC by the sink.)
    fn check_free_space(&self) -> Result<(), BenchError> {
        let max_threads = *self.threads.iter().max().unwrap_or(&1) as u64;
        let sharers = max_threads.div_ceil(self.targets.len() as u64);
        let needed = self.region_bytes() * sharers;
        for t in self.targets.iter().filter(|t| t.is_dir()) {
            if let Some(free) = snbuf_persist::medium::free_bytes(t) {
                if free < needed {
                    return Err(BenchError::Target {
                        path: t.clone(),
                        why: format!(
                            "has {} free, the sweep needs {} ({} per thread x {sharers}); lower --region",
                            snbuf_units::Bytes(free),
                            snbuf_units::Bytes(needed),
                            snbuf_units::Bytes(self.region_bytes())
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    pub fn region_bytes(&self) -> u64 {
        self.region_bytes_per_thread
            .max(1)
            .div_ceil(REGION_ALIGN_BYTES)
            * REGION_ALIGN_BYTES
    }

    /// The sweep in the order it runs: method, then block size, then threads.
    pub fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        for &method in &self.methods {
            for &block_size_bytes in &self.block_sizes_bytes {
                for &threads in &self.threads {
                    v.push(Point {
                        method,
                        block_size_bytes,
                        threads,
                    });
                }
            }
        }
        v
    }
}

/// A target must be an existing directory, or a file (existing or not) in an existing directory.
fn check_target(t: &Path) -> Result<(), BenchError> {
    let err = |why: &str| BenchError::Target {
        path: t.to_path_buf(),
        why: why.to_string(),
    };
    if t.is_dir() {
        return Ok(());
    }
    if t.exists() && !t.is_file() {
        return Err(err("is neither a directory nor a regular file"));
    }
    let parent = match t.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(err("its directory does not exist"));
    }
    Ok(())
}

/// The files a sweep writes: a temporary file per directory target (removed on drop), or the
/// user's file as given (kept).
pub struct TargetFiles {
    files: Vec<(PathBuf, bool)>,
}

impl TargetFiles {
    pub fn prepare(config: &ThroughputConfig) -> Result<Self, BenchError> {
        let mut files = Vec::new();
        for (i, t) in config.targets.iter().enumerate() {
            if t.is_dir() {
                let path = t.join(format!("snbuf-bench-{}-{i}.dat", std::process::id()));
                // Creating it now turns an unwritable directory into an error before the sweep.
                std::fs::File::create(&path).map_err(|e| BenchError::Target {
                    path: t.clone(),
                    why: format!("cannot create a file there: {e}"),
                })?;
                files.push((path, true));
            } else {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(t)
                    .map_err(|e| BenchError::Target {
                        path: t.clone(),
                        why: format!("cannot open for writing: {e}"),
                    })?;
                files.push((t.clone(), false));
            }
        }
        Ok(TargetFiles { files })
    }

    pub fn paths(&self) -> Vec<&Path> {
        self.files.iter().map(|(p, _)| p.as_path()).collect()
    }
}

impl Drop for TargetFiles {
    fn drop(&mut self) {
        for (p, owned) in &self.files {
            if *owned {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// What one thread measured.
struct ThreadOutcome {
    bytes: u64,
    ops: u64,
    elapsed: Duration,
    latency_ticks: Histogram<u64>,
    completion_ns: Option<Histogram<u64>>,
    verified_ops: u64,
    report: SinkReport,
    source_page_bytes: Option<u64>,
    slot_bytes: u64,
}

const PHASE_WARMUP: u8 = 0;
const PHASE_MEASURE: u8 = 1;
const PHASE_STOP: u8 = 2;

/// Runs one point.
pub fn run_point(
    config: &ThroughputConfig,
    files: &TargetFiles,
    point: Point,
    clock: &OpClock,
) -> Result<ThroughputResult, BenchError> {
    let paths = files.paths();
    let region = config.region_bytes();
    let phase = AtomicU8::new(PHASE_WARMUP);
    let ready = Barrier::new(point.threads + 1);
    let first_error: Mutex<Option<BenchError>> = Mutex::new(None);
    let wrap = |cause: PersistError| BenchError::Persist {
        method: point.method,
        block: point.block_size_bytes,
        threads: point.threads,
        cause,
    };

    let outcomes: Vec<Option<ThreadOutcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..point.threads)
            .map(|t| {
                let path = paths[t % paths.len()];
                let slice = (t / paths.len()) as u64;
                let cpu = config.cpus[t % config.cpus.len()];
                let (phase, ready, first_error) = (&phase, &ready, &first_error);
                s.spawn(move || {
                    let r = run_thread(
                        config,
                        point,
                        path,
                        slice * region,
                        region,
                        cpu,
                        clock,
                        phase,
                        ready,
                    );
                    match r {
                        Ok(o) => Some(o),
                        Err(e) => {
                            // Stop the others; keep the first error for the caller.
                            phase.store(PHASE_STOP, Ordering::Release);
                            first_error.lock().unwrap().get_or_insert(wrap(e));
                            None
                        }
                    }
                })
            })
            .collect();
        ready.wait();
        if phase.load(Ordering::Acquire) != PHASE_STOP {
            sleep_unless_stopped(&phase, config.warmup);
            let _ = phase.compare_exchange(
                PHASE_WARMUP,
                PHASE_MEASURE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            sleep_unless_stopped(&phase, config.duration);
            phase.store(PHASE_STOP, Ordering::Release);
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect()
    });
    if let Some(e) = first_error.into_inner().unwrap() {
        return Err(e);
    }
    let outcomes: Vec<ThreadOutcome> = outcomes
        .into_iter()
        .map(|o| o.expect("no error, so every thread finished"))
        .collect();
    summarise(config, point, &paths, region, clock, outcomes)
}

fn sleep_unless_stopped(phase: &AtomicU8, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && phase.load(Ordering::Acquire) != PHASE_STOP {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
}

/// Where the next block goes: slot indices, sequential with wrap-around or uniformly random.
struct SlotWalk {
    pattern: Pattern,
    slots: u64,
    next: u64,
    rng: u64,
}

impl SlotWalk {
    fn new(pattern: Pattern, slots: u64, seed: u64) -> Self {
        SlotWalk {
            pattern,
            slots,
            next: 0,
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
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
            Pattern::Rand => {
                // xorshift64* then Lemire's multiply-shift range reduction (no division).
                self.rng ^= self.rng >> 12;
                self.rng ^= self.rng << 25;
                self.rng ^= self.rng >> 27;
                let x = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D);
                ((x as u128 * self.slots as u128) >> 64) as u64
            }
        }
    }
}

/// Everything one benchmark thread needs besides its sink.
struct ThreadCtx<'a> {
    config: &'a ThroughputConfig,
    point: Point,
    path: &'a Path,
    region_offset: u64,
    region: u64,
    cpu_id: usize,
    clock: &'a OpClock,
    phase: &'a AtomicU8,
    ready: &'a Barrier,
    /// Set once the thread has reached the start barrier.
    arrived: &'a Cell<bool>,
}

/// Runs the thread's loop with the sink's concrete type (see `snbuf_persist::WithSink`).
struct Drive<'a>(&'a ThreadCtx<'a>);

impl WithSink for Drive<'_> {
    type Output = Result<ThreadOutcome, PersistError>;
    fn run<S: Sink + 'static>(self, mut sink: S) -> Self::Output {
        drive(&mut sink, self.0)
    }
}

#[allow(clippy::too_many_arguments)]
fn run_thread(
    config: &ThroughputConfig,
    point: Point,
    path: &Path,
    region_offset: u64,
    region: u64,
    cpu_id: usize,
    clock: &OpClock,
    phase: &AtomicU8,
    ready: &Barrier,
) -> Result<ThreadOutcome, PersistError> {
    // Whatever happens, reach the barrier exactly once so the coordinator is never left waiting.
    let arrived = Cell::new(false);
    let ctx = ThreadCtx {
        config,
        point,
        path,
        region_offset,
        region,
        cpu_id,
        clock,
        phase,
        ready,
        arrived: &arrived,
    };
    let r = (|| {
        let _ = cpu::pin_current_thread(cpu_id);
        let block = point.block_size_bytes as usize;
        let mut sink_config = SinkConfig::new(point.method, path, region);
        sink_config.region_offset_bytes = region_offset;
        sink_config.max_io_bytes = match config.direction {
            Direction::Write => block,
            Direction::Read => block.max(PREFILL_CHUNK_BYTES),
        };
        sink_config.page_size = config.page_size;
        sink_config.queue_depth = config.queue_depth;
        sink_config.sync_mode = config.sync_mode;
        open_with(&sink_config, Drive(&ctx))?
    })();
    if !arrived.get() {
        ready.wait();
    }
    r
}

/// The measured loop of one thread.
fn drive<S: Sink>(sink: &mut S, ctx: &ThreadCtx) -> Result<ThreadOutcome, PersistError> {
    let ThreadCtx {
        config,
        point,
        path,
        region_offset,
        region,
        cpu_id,
        clock,
        phase,
        ready,
        arrived,
    } = *ctx;
    let block = point.block_size_bytes as usize;
    {
        let align = sink.report().alignment_bytes;
        let slot_bytes = (point.block_size_bytes.div_ceil(align) * align).max(1);
        let slots = region / slot_bytes;

        let (mut source, source_page_bytes) = match config.direction {
            Direction::Write => {
                let mut src = AlignedBuf::new(
                    SOURCE_BYTES.min(region as usize).max(block),
                    config.page_size,
                )
                .map_err(|e| PersistError::io("allocate source buffer for", path, e))?;
                fill_random(src.as_mut_slice(), cpu_id as u64 + 1);
                let pages = src.pages_obtained().ok().map(|p| p.effective_page_bytes());
                (src, pages)
            }
            Direction::Read => {
                prefill(sink, region, path)?;
                (
                    AlignedBuf::new(block, config.page_size)
                        .map_err(|e| PersistError::io("allocate read buffer for", path, e))?,
                    None,
                )
            }
        };
        let mut walk = SlotWalk::new(
            config.pattern,
            slots,
            region_offset / REGION_ALIGN_BYTES + 1,
        );
        let source_span = source.len() - block;
        let mut source_offset = 0usize;
        let mut since_persist = 0u64;
        let mut latency_ticks = new_histogram();
        let mut completion_ns = new_histogram();
        let mut has_completions = false;
        let (mut bytes, mut ops, mut verified_ops) = (0u64, 0u64, 0u64);
        let mut last_write: Option<(u64, usize)> = None;
        let persist_every = config.persist_every;
        // Only queued methods have completion latencies; asking the others costs a virtual call
        // per operation for nothing.
        let queued = point.method.capabilities().async_queue;

        arrived.set(true);
        ready.wait();

        let latency_every = config.latency_every;
        let mut until_sample = 1u32;
        let mut sample_rng = 0x2545_F491_4F6C_DD1Du64 ^ region_offset;
        let mut sampled_start = 0u64;

        let mut measuring = false;
        let mut t0 = Instant::now();
        let mut prev = clock.now();
        loop {
            let p = phase.load(Ordering::Relaxed);
            if p == PHASE_STOP {
                break;
            }
            if p == PHASE_MEASURE && !measuring {
                // Leave the warm-up with nothing pending, so the timed region owes nothing to it.
                if config.direction == Direction::Write && since_persist > 0 {
                    sink.persist()?;
                    since_persist = 0;
                }
                let _ = sink.drain_completion_latencies_ns(&mut |_| {});
                measuring = true;
                t0 = Instant::now();
                prev = clock.now();
            }
            let offset = walk.next_slot() * slot_bytes;
            let sampled = latency_every > 1 && measuring && {
                until_sample -= 1;
                until_sample == 0
            };
            if sampled {
                sampled_start = clock.now();
            }
            match config.direction {
                Direction::Write => {
                    let data = &source.as_slice()[source_offset..source_offset + block];
                    last_write = Some((offset, source_offset));
                    source_offset += block;
                    if source_offset > source_span {
                        source_offset = 0;
                    }
                    match persist_every {
                        PersistEvery::Op => sink.write_persist_at(offset, data)?,
                        PersistEvery::Bytes(n) => {
                            sink.write_at(offset, data)?;
                            since_persist += point.block_size_bytes;
                            if since_persist >= n {
                                sink.persist()?;
                                since_persist = 0;
                            }
                        }
                        PersistEvery::End => {
                            sink.write_at(offset, data)?;
                            since_persist += point.block_size_bytes;
                        }
                    }
                }
                Direction::Read => {
                    let buf = &mut source.as_mut_slice()[..block];
                    sink.read_at(offset, buf)?;
                    if check_fill(buf, offset) {
                        verified_ops += measuring as u64;
                    } else {
                        return Err(PersistError::Config(format!(
                            "read at offset {offset} returned data the prefill did not write: the figure would not be real"
                        )));
                    }
                }
            }
            if measuring {
                if latency_every == 1 {
                    // Back to back: one clock read per operation.
                    let now = clock.now();
                    latency_ticks.saturating_record(now.wrapping_sub(prev).max(1));
                    prev = now;
                } else if sampled {
                    latency_ticks.saturating_record(clock.now().wrapping_sub(sampled_start).max(1));
                    // Next sample after a random gap in [1, 2N-1]: mean N, no aliasing with any
                    // periodic behaviour of the target.
                    sample_rng ^= sample_rng << 13;
                    sample_rng ^= sample_rng >> 7;
                    sample_rng ^= sample_rng << 17;
                    until_sample = 1 + (sample_rng % (2 * latency_every as u64 - 1)) as u32;
                }
                bytes += point.block_size_bytes;
                ops += 1;
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
        if measuring {
            has_completions |= sink.drain_completion_latencies_ns(&mut |ns| {
                completion_ns.saturating_record(ns.max(1))
            });
        }
        // Guard against a sink that accepted data and dropped it: read back the last block.
        if let Some((offset, src_off)) = last_write {
            let mut back = vec![0u8; block];
            sink.read_at(offset, &mut back)?;
            if back != source.as_slice()[src_off..src_off + block] {
                return Err(PersistError::Config(format!(
                    "the last block written at offset {offset} did not read back: the figure would not be real"
                )));
            }
        }
        Ok(ThreadOutcome {
            bytes,
            ops,
            elapsed: if measuring { elapsed } else { Duration::ZERO },
            latency_ticks,
            completion_ns: has_completions.then_some(completion_ns),
            verified_ops,
            report: sink.report().clone(),
            source_page_bytes,
            slot_bytes,
        })
    }
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
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for word in buf.chunks_exact_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        word.copy_from_slice(&x.to_le_bytes());
    }
}

/// Up to an hour in TSC ticks or ns at 3 significant digits; longer values saturate (and an op
/// that takes an hour is reported as one).
fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3600 * 10_000_000_000, 3).expect("bounds and precision are valid")
}

fn latency_ns(h: &Histogram<u64>, to_ns: impl Fn(u64) -> u64) -> LatencyNs {
    LatencyNs {
        p50: to_ns(h.value_at_quantile(0.50)),
        p99: to_ns(h.value_at_quantile(0.99)),
        p999: to_ns(h.value_at_quantile(0.999)),
        max: to_ns(h.max()),
        mean: to_ns(h.mean() as u64) as f64,
        samples: h.len(),
    }
}

fn summarise(
    config: &ThroughputConfig,
    point: Point,
    paths: &[&Path],
    region: u64,
    clock: &OpClock,
    outcomes: Vec<ThreadOutcome>,
) -> Result<ThroughputResult, BenchError> {
    let bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
    let ops: u64 = outcomes.iter().map(|o| o.ops).sum();
    // The slowest thread's window: a conservative aggregate over threads.
    let seconds = outcomes
        .iter()
        .map(|o| o.elapsed.as_secs_f64())
        .fold(0.0, f64::max);
    if ops == 0 || seconds == 0.0 {
        return Err(BenchError::Implausible(format!(
            "{}, {} B, {} thread(s): no operation completed in the timed window",
            point.method, point.block_size_bytes, point.threads
        )));
    }
    let mut latency = new_histogram();
    let mut completion: Option<Histogram<u64>> = None;
    for o in &outcomes {
        latency.add(&o.latency_ticks).expect("same configuration");
        if let Some(c) = &o.completion_ns {
            completion
                .get_or_insert_with(new_histogram)
                .add(c)
                .expect("same configuration");
        }
    }
    let first = &outcomes[0];
    let report = &first.report;
    let obtained = report.pages.map(|p| p.effective_page_bytes());
    let mut notes = report.notes.clone();
    let requested = config.page_size.bytes() as u64;
    if requested > 4096 && obtained.is_some_and(|o| o < requested) {
        notes.push(format!(
            "suspect: asked for {} pages for the target, got {} (tmpfs needs huge=always or shmem_enabled; see docs/RESULTS.md)",
            snbuf_units::Bytes(requested),
            snbuf_units::Bytes(obtained.unwrap_or(0))
        ));
    }
    if requested > 4096 && first.source_page_bytes.is_some_and(|o| o < requested) {
        notes.push("suspect: asked for 2 MiB pages for the DRAM source, got 4 KiB".to_string());
    }
    let gib = (1u64 << 30) as f64;
    Ok(ThroughputResult {
        suite: config.direction.name().to_string(),
        method: point.method.to_string(),
        target: paths
            .iter()
            .take(point.threads)
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(","),
        targets: paths.len().min(point.threads),
        block_size_bytes: point.block_size_bytes,
        slot_bytes: first.slot_bytes,
        threads: point.threads,
        cpus: (0..point.threads)
            .map(|t| config.cpus[t % config.cpus.len()])
            .collect(),
        pattern: config.pattern.name().to_string(),
        page_size_bytes: requested,
        page_size_obtained_bytes: obtained,
        source_page_size_obtained_bytes: first.source_page_bytes,
        persist_every: match config.direction {
            Direction::Write => config.persist_every.describe(),
            Direction::Read => "n/a".into(),
        },
        durability: report.durability.name().to_string(),
        instruction_path: report.instruction_path.clone(),
        queue_depth: point
            .method
            .capabilities()
            .async_queue
            .then_some(config.queue_depth),
        region_bytes_per_thread: region,
        bytes,
        ops,
        seconds,
        gib_per_s: bytes as f64 / gib / seconds,
        mops_per_s: ops as f64 / 1e6 / seconds,
        per_thread_gib_per_s: outcomes
            .iter()
            .map(|o| o.bytes as f64 / gib / o.elapsed.as_secs_f64().max(1e-9))
            .collect(),
        latency_ns: latency_ns(&latency, |t| clock.ticks_to_ns(t)),
        completion_latency_ns: completion.as_ref().map(|c| latency_ns(c, |ns| ns)),
        verified_ops: outcomes.iter().map(|o| o.verified_ops).sum(),
        latency_every: config.latency_every,
        notes,
    })
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
