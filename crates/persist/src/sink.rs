//! The one interface every persistence method implements.
//!
//! A `Sink` owns a region of one target file. `write_at` places bytes; they count for nothing
//! until `persist` returns `Ok`, which is the single point where the method's durability step
//! runs (SFENCE, CLFLUSH, msync, fdatasync, an ordered io_uring fsync). Callers acknowledge data
//! only after `persist`. After an I/O error the sink is latched failed (see `latch`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::medium::Medium;
use crate::Method;
use snbuf_platform::memory::{PageSize, PagesObtained};

/// How a block-device method makes completed writes durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncMode {
    /// fdatasync at each persist point (default: one flush covers many writes).
    Fdatasync,
    /// Open with O_DSYNC: every write is durable when it completes; persist waits for completions.
    Dsync,
}

/// What opening a sink needs.
#[derive(Clone, Debug)]
pub struct SinkConfig {
    pub method: Method,
    pub path: PathBuf,
    /// Start of this sink's region in the file; a multiple of the page size asked for.
    pub region_offset_bytes: u64,
    pub region_bytes: u64,
    /// The largest single write or read (sizes staging and registered buffers).
    pub max_io_bytes: usize,
    /// Page size of the mapping and of the staging buffers.
    pub page_size: PageSize,
    /// io_uring submission queue depth (writes in flight).
    pub queue_depth: u32,
    pub sync_mode: SyncMode,
    /// Allocate the file range at open (posix_fallocate): no write later waits for the
    /// allocator, and a target too small fails here with ENOSPC instead of mid-write (on a
    /// mapping, a write into a hole of a full file system would be a SIGBUS).
    pub prefault: bool,
    /// Also populate the mapping's page tables at open (mapped methods), so no timed store takes a
    /// page fault. Costs time in proportion to the region: the benchmark wants it, a recorder
    /// opening a burst at trigger time may not.
    pub populate: bool,
    /// The memory in-place writes will come from (a latency buffer's ring), where the method
    /// can register it with the kernel ahead of the writes (io_uring fixed buffers: its pages
    /// are pinned once, not per request). None: no such memory, or not worth registering.
    pub source: Option<SourceMemory>,
    /// How long a wait for a write or flush the method has in flight (io_uring) may last before
    /// the sink gives up and fails with `PersistError::Stalled`: a device that stops completing
    /// fails its link instead of hanging the writer. Methods whose calls block in the kernel
    /// (pwrite, fdatasync, msync) cannot be bounded this way.
    pub completion_deadline: Duration,
}

/// The default `SinkConfig::completion_deadline`: the block layer's own default request
/// timeout (30 s, /sys/block/*/queue/io_timeout), after which the kernel itself aborts or
/// retries a request, with as much again for its retry.
pub const DEFAULT_COMPLETION_DEADLINE: Duration = Duration::from_secs(60);

/// The completion deadline of a recorder whose latency buffer holds `buffer` of data: half of
/// it, between 1 s and `DEFAULT_COMPLETION_DEADLINE`. Why half: a link whose device has not
/// answered for that long has already lost what the buffer could not hold; failing it then
/// leaves the other half of the buffer to the unit's other outputs and links, and the burst is
/// sealed with its loss counted instead of waiting on a device that stopped.
pub fn completion_deadline_for_buffer(buffer: Duration) -> Duration {
    (buffer / 2).clamp(Duration::from_secs(1), DEFAULT_COMPLETION_DEADLINE)
}

/// The memory `SinkConfig::source` names, kept allocated by the sink that registered it.
#[derive(Clone)]
pub struct SourceMemory(pub Arc<dyn HeldMemory>);

impl std::fmt::Debug for SourceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = self.0.address_range();
        write!(f, "SourceMemory({:#x}..{:#x})", r.start, r.end)
    }
}

impl SinkConfig {
    pub fn new(method: Method, path: impl Into<PathBuf>, region_bytes: u64) -> Self {
        SinkConfig {
            method,
            path: path.into(),
            region_offset_bytes: 0,
            region_bytes,
            max_io_bytes: 1 << 20,
            page_size: PageSize::Small4K,
            queue_depth: 32,
            sync_mode: SyncMode::Fdatasync,
            prefault: true,
            populate: true,
            source: None,
            completion_deadline: DEFAULT_COMPLETION_DEADLINE,
        }
    }
}

/// What `persist` guarantees on the medium this sink was opened on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// DAX with MAP_SYNC: the fence (or CLFLUSH) makes the stores durable. Persistent memory.
    MapSync,
    /// A mapping that is not persistent memory: msync of the written range makes it durable.
    Msync,
    /// O_DIRECT or buffered write, then fdatasync.
    Fdatasync,
    /// O_DSYNC: each completed write is durable.
    Dsync,
    /// The medium keeps data in RAM only (tmpfs): the instructions run, but nothing can survive a
    /// power cut. The stand-in for pmem on machines without it.
    Volatile,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::MapSync => "map_sync",
            Durability::Msync => "msync",
            Durability::Fdatasync => "fdatasync",
            Durability::Dsync => "o_dsync",
            Durability::Volatile => "volatile",
        }
    }

    /// Whether an acknowledged write survives power loss on this medium.
    pub fn survives_power_loss(self) -> bool {
        !matches!(self, Durability::Volatile)
    }
}

/// What a sink obtained when it was opened, for results and for the terminal.
#[derive(Clone, Debug)]
pub struct SinkReport {
    pub method: Method,
    /// The target file.
    pub path: PathBuf,
    /// Bytes of the region this sink may write (offsets are relative to its start).
    pub region_bytes: u64,
    pub medium: Medium,
    pub durability: Durability,
    /// Offsets must be multiples of this and lengths are padded to it (1 for byte-addressable).
    pub alignment_bytes: u64,
    /// The instruction path used: `avx512`, `avx2`, `sse2`, `clwb`, `pwrite`, `io_uring`, ….
    pub instruction_path: String,
    /// Page-size facts of the mapping or staging buffer, if there is one.
    pub pages: Option<PagesObtained>,
    /// Human notes: what was chosen and why, what was not available.
    pub notes: Vec<String>,
}

impl SinkReport {
    /// The report of a sink opened with `config`: no page facts and no notes yet.
    pub(crate) fn of(
        config: &SinkConfig,
        medium: Medium,
        durability: Durability,
        alignment_bytes: u64,
        instruction_path: impl Into<String>,
    ) -> SinkReport {
        assert!(
            alignment_bytes.is_power_of_two(),
            "alignment {alignment_bytes} B: offsets and lengths are padded to a power of two"
        );
        assert_eq!(
            alignment_bytes > 1,
            config.method.capabilities().needs_io_alignment,
            "only the methods that need I/O alignment pad to more than a byte"
        );
        assert!(
            !medium.volatile || durability == Durability::Volatile,
            "what a RAM-only medium holds is never said durable ({durability:?} on {})",
            medium.fs_type
        );
        SinkReport {
            method: config.method,
            path: config.path.clone(),
            region_bytes: config.region_bytes,
            medium,
            durability,
            alignment_bytes,
            instruction_path: instruction_path.into(),
            pages: None,
            notes: Vec::new(),
        }
    }

    /// One line for people, e.g. `nt via avx512 on tmpfs: volatile (RAM only), 4 KiB pages`.
    pub fn summary(&self) -> String {
        let durability = match self.durability {
            Durability::MapSync => {
                "persistent memory (DAX + MAP_SYNC), durable after the fence".to_string()
            }
            Durability::Msync => "not persistent memory, durable after msync".to_string(),
            Durability::Fdatasync => "durable after fdatasync".to_string(),
            Durability::Dsync => "durable on completion (O_DSYNC)".to_string(),
            Durability::Volatile => format!(
                "{} is RAM only: not durable (stands in for pmem)",
                self.medium.fs_type
            ),
        };
        format!(
            "{} via {}: {}",
            self.method, self.instruction_path, durability
        )
    }
}

/// A persistence method bound to a region of one file.
pub trait Sink: Send {
    /// Places `data` at `offset` (relative to the region). Not durable until `persist`.
    /// `offset` must be a multiple of `report().alignment_bytes`; the length is padded to it.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()>;

    /// Makes every earlier write durable, as far as the medium allows (`report().durability`).
    fn persist(&mut self) -> Result<()>;

    /// `write_at` then `persist`: one block made durable, the recorder's "acknowledge this chunk"
    /// and the papers' request. One dynamic call instead of two matters when a whole operation
    /// takes 200 ns, as a 256 B persist to memory does.
    #[inline]
    fn write_persist_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        self.write_at(offset, data)?;
        self.persist()
    }

    /// Writes `parts` back to back from `offset`, each from where it lies in memory when the
    /// method can (O_DIRECT and io_uring: parts aligned in address and length go to the device
    /// by DMA, with no copy by the CPU), and returns only once nothing reads `parts` any more: a
    /// caller may check afterwards whether its memory changed during the write (a latency
    /// buffer's seqlock) and know that what it checks is what was written. Not durable until
    /// `persist`. Offsets and lengths as for `write_at`.
    fn write_in_place(&mut self, offset: u64, parts: &[&[u8]]) -> Result<()> {
        write_each(self, offset, parts)
    }

    /// `write_in_place`, returning the CRC-32C of the bytes written (of `parts`, back to back).
    /// A method that copies with the CPU may take it from the registers its copy loads (nt: the
    /// source is read from memory once, not once for the copy and again for the checksum); the
    /// others write, then checksum `parts` as the CPU just left them in its cache.
    fn write_in_place_checksummed(&mut self, offset: u64, parts: &[&[u8]]) -> Result<u32> {
        self.write_in_place(offset, parts)?;
        Ok(snbuf_platform::crc::crc32c_in_cache(parts))
    }

    /// `write_in_place` without its wait: a method with a queue (io_uring) returns once the
    /// writes are submitted, so one thread can keep several files' writes in flight; the others
    /// write before returning. `wait_in_place` then waits for them.
    ///
    /// The device may read `parts` after this returns, so they must lie inside `held`, which
    /// the sink keeps (and so keeps allocated) until the writes are over; parts elsewhere are
    /// written before this returns. The memory is only read, never written: a caller whose
    /// memory may change meanwhile validates it after `wait_in_place`.
    fn start_in_place(&mut self, offset: u64, parts: &[&[u8]], _held: &Hold) -> Result<()> {
        self.write_in_place(offset, parts)
    }

    /// Returns once nothing reads the memory given to `start_in_place` any more, with the first
    /// error of those writes. Every write is waited for even after an error.
    fn wait_in_place(&mut self) -> Result<()> {
        Ok(())
    }

    /// `wait_in_place`, giving up at `limit` (when given) with `Ok(false)` if writes are still
    /// in flight: one thread waits on several files in turn, and a device that stopped
    /// answering holds none of the others. `Ok(true)` and `Err` are `wait_in_place`'s answers.
    /// A request's own completion deadline counts from its submission, however many waits it
    /// spans. Methods that write before `start_in_place` returns answer at once.
    fn wait_in_place_within(&mut self, limit: Option<Instant>) -> Result<bool> {
        let _ = limit;
        self.wait_in_place().map(|()| true)
    }

    /// `persist` in two halves, so that one thread can have several files' flushes in flight:
    /// `start_persist` covers every earlier write, `finish_persist` returns when they are durable
    /// (nothing counts as durable before it returns `Ok`). Methods without a queue do the whole
    /// persist in the first half. No write may come between the two.
    fn start_persist(&mut self) -> Result<()> {
        self.persist()
    }

    fn finish_persist(&mut self) -> Result<()> {
        Ok(())
    }

    /// `finish_persist`, giving up at `limit` (when given) with `Ok(false)` while the persist
    /// is still in flight (see `wait_in_place_within`).
    fn finish_persist_within(&mut self, limit: Option<Instant>) -> Result<bool> {
        let _ = limit;
        self.finish_persist().map(|()| true)
    }

    /// Reads `buf.len()` bytes at `offset` (relative to the region), bypassing the page cache
    /// where the method does (O_DIRECT). `offset` must be aligned as for `write_at`.
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()>;

    fn report(&self) -> &SinkReport;

    /// Grows the region to `region_bytes` (never shrinks it), its new space allocated now: a
    /// write into it cannot then fail for want of space, and a file system without that space
    /// says so here (`NoSpace`), before anything is written. A burst whose window moved out (a
    /// trigger joined it) needs more file than was reserved at its trigger. A method that cannot
    /// grow an open file says so (`Unsupported`), and its region stays as it was.
    fn grow(&mut self, region_bytes: u64) -> Result<()> {
        if region_bytes <= self.report().region_bytes {
            return Ok(());
        }
        Err(crate::error::PersistError::Unsupported {
            method: self.report().method,
            why: "this method cannot grow a file it has opened".into(),
        })
    }

    /// Completion latencies (ns, submission to completion) of asynchronous writes finished since
    /// the last call, for methods with a queue. Synchronous methods return false and record
    /// nothing: for them the caller's own timing of `write_at` is the latency.
    fn drain_completion_latencies_ns(&mut self, _record: &mut dyn FnMut(u64)) -> bool {
        false
    }
}

pub use snbuf_platform::{HeldMemory, Hold};

/// Whether every one of `parts` lies inside `held`'s memory.
pub fn held_in(held: &dyn HeldMemory, parts: &[&[u8]]) -> bool {
    let range = held.address_range();
    debug_assert!(
        range.start <= range.end,
        "held memory is a range of addresses"
    );
    parts.iter().all(|p| {
        let start = p.as_ptr() as usize;
        range.start <= start && start + p.len() <= range.end
    })
}

/// `parts` back to back from `offset`, one `write_at` each: `write_in_place` for sinks that copy
/// anyway, or for parts a sink cannot send from where they lie.
pub fn write_each<S: Sink + ?Sized>(sink: &mut S, offset: u64, parts: &[&[u8]]) -> Result<()> {
    let mut pos = offset;
    for part in parts {
        sink.write_at(pos, part)?;
        pos += part.len() as u64;
    }
    debug_assert_eq!(
        pos - offset,
        parts.iter().map(|p| p.len() as u64).sum::<u64>(),
        "the parts were written back to back"
    );
    Ok(())
}

/// A boxed sink is a sink, so code generic over `S: Sink` also takes what `open` returns.
impl<S: Sink + ?Sized> Sink for Box<S> {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        (**self).write_at(offset, data)
    }
    fn persist(&mut self) -> Result<()> {
        (**self).persist()
    }
    fn write_persist_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        (**self).write_persist_at(offset, data)
    }
    fn write_in_place(&mut self, offset: u64, parts: &[&[u8]]) -> Result<()> {
        (**self).write_in_place(offset, parts)
    }
    fn write_in_place_checksummed(&mut self, offset: u64, parts: &[&[u8]]) -> Result<u32> {
        (**self).write_in_place_checksummed(offset, parts)
    }
    fn start_in_place(&mut self, offset: u64, parts: &[&[u8]], held: &Hold) -> Result<()> {
        (**self).start_in_place(offset, parts, held)
    }
    fn wait_in_place(&mut self) -> Result<()> {
        (**self).wait_in_place()
    }
    fn start_persist(&mut self) -> Result<()> {
        (**self).start_persist()
    }
    fn finish_persist(&mut self) -> Result<()> {
        (**self).finish_persist()
    }
    fn wait_in_place_within(&mut self, limit: Option<Instant>) -> Result<bool> {
        (**self).wait_in_place_within(limit)
    }
    fn finish_persist_within(&mut self, limit: Option<Instant>) -> Result<bool> {
        (**self).finish_persist_within(limit)
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        (**self).read_at(offset, buf)
    }
    fn report(&self) -> &SinkReport {
        (**self).report()
    }
    fn grow(&mut self, region_bytes: u64) -> Result<()> {
        (**self).grow(region_bytes)
    }
    fn drain_completion_latencies_ns(&mut self, record: &mut dyn FnMut(u64)) -> bool {
        (**self).drain_completion_latencies_ns(record)
    }
}
