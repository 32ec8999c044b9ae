//! io_uring with O_DIRECT: several writes in flight from one thread.
//!
//! Each write is copied into one of `queue_depth` slots of an aligned buffer (registered with
//! the kernel when RLIMIT_MEMLOCK allows, so the pages are not pinned per request), and the file
//! is registered too. `start_in_place` instead submits aligned parts from the caller's memory (a
//! latency buffer's slots: no copy by the CPU), and `wait_in_place` waits for them, so one
//! thread can keep several links' files busy; `write_in_place` is both.
//!
//! The memory those writes come from (`SinkConfig::source`, the link's latency buffer) is
//! registered too, up to 1 GiB and as RLIMIT_MEMLOCK allows (a note says when not): its pages
//! are pinned once, when the sink opens ahead of a trigger, rather than per request.
//!
//! Completions arrive in any order, and an fsync submitted beside in-flight writes is not
//! ordered after them: so a persist point's fdatasync carries IO_DRAIN, which holds it in the
//! kernel until every write submitted before it is over (`start_persist` submits it without
//! waiting, `finish_persist` reaps it: several files' flushes in flight from one thread, none
//! waiting on another's device). Short completions are resubmitted for the rest; a rest
//! resubmitted behind the fdatasync is not covered by it, so the persist waits for that write
//! and syncs again. An error completion fails the sink (and the latch keeps it failed). Every
//! wait for a completion has a deadline (`SinkConfig::completion_deadline`, `uring_wait`),
//! counted from the request's submission: a device that stops completing fails the sink with
//! `PersistError::Stalled`. A caller may wait less (`wait_in_place_within`). A kernel without
//! bounded waits (before Linux 5.11) waits unbounded either way.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use io_uring::{opcode, squeue, types, IoUring};

mod reap;

pub use crate::backends::uring_buffers::SOURCE_NOT_REGISTERED;
use crate::backends::uring_buffers::{register_buffers, SOURCE_BUFFER_INDEX};
use crate::backends::uring_wait::{can_bound_waits, submit_and_wait_until};
use crate::backends::{align_up, check_aligned, check_range};
use crate::error::{PersistError, Result};
use crate::medium;
use crate::sink::{held_in, HeldMemory, Hold, Sink, SinkConfig, SinkReport, SyncMode};
use snbuf_platform::memory::AlignedBuf;

/// user_data of the fsync SQE and of a read's; writes use their slot's index.
const FSYNC_TAG: u64 = u64::MAX;
const READ_TAG: u64 = u64::MAX - 1;
/// Bound on completion latencies kept between drains (the caller drains after every write).
const MAX_PENDING_LATENCIES: usize = 1 << 16;
const MAX_QUEUE_DEPTH: u32 = 4096;

/// io_uring cannot be used by this process.
#[derive(Debug, thiserror::Error)]
#[error("io_uring is not available here ({0}); see kernel.io_uring_disabled")]
pub struct Unavailable(pub std::io::Error);

/// Whether this kernel lets the process use io_uring (it may be compiled out, or disabled by
/// kernel.io_uring_disabled or a seccomp policy). Err says why not.
pub fn available() -> std::result::Result<(), Unavailable> {
    IoUring::new(2).map(drop).map_err(Unavailable)
}

#[derive(Clone, Copy, Default)]
struct InFlight {
    /// File offset of the slot's first byte.
    file_offset: u64,
    len: usize,
    done: usize,
    submitted: Option<Instant>,
    /// Address of the caller's memory the write is sent from (`write_in_place`); 0: the slot.
    source_addr: usize,
}

pub struct UringSink {
    ring: IoUring,
    file: File,
    slots: AlignedBuf,
    slot_bytes: usize,
    free_slots: Vec<u16>,
    in_flight: Vec<InFlight>,
    in_flight_count: usize,
    registered_buffers: bool,
    registered_file: bool,
    alignment_bytes: u64,
    /// O_DIRECT buffer alignment (statx stx_dio_mem_align; the offset alignment when unknown).
    mem_alignment_bytes: u64,
    region_offset_bytes: u64,
    sync_mode: SyncMode,
    latencies_ns: Vec<u64>,
    /// SQEs pushed but not yet handed to the kernel (see `push`).
    unsubmitted: u32,
    queue_depth: u32,
    /// Reused completion buffer: reaping allocates nothing.
    completions: Vec<(u64, i32)>,
    /// The result of the fdatasync `start_persist` submitted, once it completed.
    fsync_result: Option<i32>,
    /// When the persist in flight was started (`SyncMode::Dsync`: its writes are the persist),
    /// for its completion deadline.
    persist_started: Option<Instant>,
    /// A write's rest was resubmitted after the persist's fdatasync: that one does not cover
    /// it, and another is owed once it is written.
    fsync_stale: bool,
    /// The owners of caller memory that requests in flight read (`start_in_place`).
    held: Vec<Arc<dyn HeldMemory>>,
    /// `SinkConfig::source` when registered as buffer `SOURCE_BUFFER_INDEX`: its addresses, and
    /// its owner, kept until the ring (declared first, so dropped first) no longer has it.
    source: Option<(std::ops::Range<usize>, Arc<dyn HeldMemory>)>,
    /// How long one wait for a completion may last (None where the kernel cannot bound it),
    /// and whether one already ran out: then dropping the sink does not wait a second time.
    completion_deadline: Option<Duration>,
    stalled: bool,
    report: SinkReport,
}

/// Registers `file` with the ring (fixed-file writes skip a lookup per request); where the
/// kernel will not, the plain descriptor is used, and the note says so.
fn register_file(ring: &IoUring, file: &File, notes: &mut Vec<String>) -> bool {
    match ring.submitter().register_files(&[file.as_raw_fd()]) {
        Ok(()) => true,
        Err(e) => {
            notes.push(format!(
                "registered file unavailable ({e}): using the plain fd"
            ));
            false
        }
    }
}

/// The sink's write buffers: a slot per write in flight (`qd`), each the largest write rounded
/// up to the device's O_DIRECT alignment (and a page): the slot size and the buffers.
fn allocate_slots(
    config: &SinkConfig,
    qd: u32,
    alignment_bytes: u64,
) -> Result<(usize, AlignedBuf)> {
    let slot_bytes = align_up(config.max_io_bytes as u64, alignment_bytes.max(4096)) as usize;
    let slots = AlignedBuf::new(slot_bytes * qd as usize, config.page_size)
        .map_err(|e| PersistError::io("allocate io_uring buffers for", &config.path, e))?;
    assert!(
        slots.len() >= slot_bytes * qd as usize && slot_bytes >= config.max_io_bytes,
        "a slot per write in flight, each holding the largest write"
    );
    Ok((slot_bytes, slots))
}

impl UringSink {
    pub fn open(config: &SinkConfig) -> Result<Self> {
        let qd = config.queue_depth.clamp(1, MAX_QUEUE_DEPTH);
        assert!(
            qd > 0 && u16::try_from(qd - 1).is_ok(),
            "a queue depth of at least 1, whose slot indexes fit a u16"
        );
        let ring = IoUring::new(qd).map_err(|e| PersistError::Unsupported {
            method: config.method,
            why: format!(
                "io_uring_setup failed ({e}); io_uring may be disabled (kernel.io_uring_disabled)"
            ),
        })?;
        let file = super::open_direct(config)?;
        let medium =
            medium::probe(&config.path).map_err(|e| PersistError::io("probe", &config.path, e))?;
        let alignment_bytes = medium.dio_align_bytes();
        check_aligned(config.region_offset_bytes, alignment_bytes)?;
        let (slot_bytes, slots) = allocate_slots(config, qd, alignment_bytes)?;
        let mut notes = vec![format!(
            "queue depth {qd}, O_DIRECT alignment {alignment_bytes} B"
        )];
        let (registered_buffers, source) =
            register_buffers(&ring, &slots, config.source.as_ref(), &mut notes);
        let registered_file = register_file(&ring, &file, &mut notes);
        let completion_deadline = can_bound_waits(&ring).then_some(config.completion_deadline);
        if completion_deadline.is_none() {
            notes.push("waits for completions are unbounded: this kernel has no io_uring EXT_ARG (Linux 5.11)".into());
        }
        let durability = super::file_durability(medium.volatile, config.sync_mode);
        let pages = slots.pages_obtained().ok();
        Ok(UringSink {
            ring,
            file,
            slot_bytes,
            free_slots: (0..qd as u16).rev().collect(),
            in_flight: vec![InFlight::default(); qd as usize],
            in_flight_count: 0,
            registered_buffers,
            registered_file,
            alignment_bytes,
            mem_alignment_bytes: medium.dio_mem_align_bytes.unwrap_or(alignment_bytes).max(1),
            region_offset_bytes: config.region_offset_bytes,
            sync_mode: config.sync_mode,
            latencies_ns: Vec::with_capacity(qd as usize),
            unsubmitted: 0,
            queue_depth: qd,
            completions: Vec::with_capacity(2 * qd as usize),
            fsync_result: None,
            persist_started: None,
            fsync_stale: false,
            held: Vec::new(),
            source,
            completion_deadline,
            stalled: false,
            report: SinkReport {
                pages,
                notes,
                ..SinkReport::of(
                    config,
                    medium,
                    durability,
                    alignment_bytes,
                    "io_uring O_DIRECT",
                )
            },
            slots,
        })
    }

    fn slot_ptr(&self, slot: u16) -> *mut u8 {
        debug_assert!(u32::from(slot) < self.queue_depth, "slot {slot} is a slot");
        // SAFETY: slot < queue depth, so the offset is inside `slots`.
        unsafe { (self.slots.as_ptr() as *mut u8).add(slot as usize * self.slot_bytes) }
    }

    /// Queues the not-yet-done part of a slot's write.
    fn push_write(&mut self, slot: u16) -> Result<()> {
        let f = self.in_flight[slot as usize];
        debug_assert!(
            f.done <= f.len,
            "never more written than the write's length"
        );
        debug_assert!(
            f.file_offset.is_multiple_of(self.alignment_bytes)
                && (f.len as u64).is_multiple_of(self.alignment_bytes),
            "an O_DIRECT write starts and ends aligned"
        );
        let len = (f.len - f.done) as u32;
        let offset = f.file_offset + f.done as u64;
        let fd = self.file.as_raw_fd();
        // From the caller's memory (registered if it lies in the source), or from a slot.
        let (ptr, buffer) = if f.source_addr != 0 {
            let ptr = (f.source_addr as *const u8).wrapping_add(f.done);
            let (start, end) = (ptr as usize, ptr as usize + len as usize);
            let registered = self
                .source
                .as_ref()
                .is_some_and(|(r, _)| r.start <= start && end <= r.end);
            (ptr, registered.then_some(SOURCE_BUFFER_INDEX))
        } else {
            let ptr = self.slot_ptr(slot).wrapping_add(f.done) as *const u8;
            (ptr, self.registered_buffers.then_some(0))
        };
        let sqe = match (buffer, self.registered_file) {
            (Some(i), true) => opcode::WriteFixed::new(types::Fixed(0), ptr, len, i)
                .offset(offset)
                .build(),
            (Some(i), false) => opcode::WriteFixed::new(types::Fd(fd), ptr, len, i)
                .offset(offset)
                .build(),
            (None, true) => opcode::Write::new(types::Fixed(0), ptr, len)
                .offset(offset)
                .build(),
            (None, false) => opcode::Write::new(types::Fd(fd), ptr, len)
                .offset(offset)
                .build(),
        };
        self.push(sqe.user_data(slot as u64))
    }

    /// Queues an SQE. It is handed to the kernel at once while the device has less than half the
    /// queue depth to work on; beyond that it waits for the next `reap`, whose io_uring_enter
    /// submits everything pending and waits in the same system call (as fio batches). So a
    /// lightly loaded sink starts every write immediately, and a saturated one makes one system
    /// call per completion instead of two.
    fn push(&mut self, sqe: squeue::Entry) -> Result<()> {
        // SAFETY: the SQE points into `slots`, which outlives the ring's use of it: Drop waits for
        // every in-flight request before the buffer is freed.
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() {
            // Cannot happen: at most queue_depth requests are in flight or pending, and the SQ
            // has that many entries.
            return Err(PersistError::Config(
                "io_uring submission queue full".into(),
            ));
        }
        self.unsubmitted += 1;
        debug_assert!(
            self.in_flight_count <= self.queue_depth as usize,
            "no more writes in flight than slots"
        );
        let submitted_in_flight = (self.in_flight_count as u32).saturating_sub(self.unsubmitted);
        if submitted_in_flight < self.queue_depth / 2 {
            self.submit(0)?;
        }
        Ok(())
    }

    /// Submits the fdatasync of a persist point (see the module comment).
    fn push_fsync(&mut self) -> Result<()> {
        debug_assert!(
            self.persist_started.is_some(),
            "an fdatasync belongs to a persist"
        );
        debug_assert!(
            self.sync_mode == SyncMode::Fdatasync,
            "O_DSYNC writes need no fdatasync"
        );
        // Completions are unordered, and an fsync covers only writes that completed before it
        // started: IO_DRAIN holds it in the kernel until every write submitted before it is
        // over, so this thread need not wait here (a stalled device holds no other file).
        let sqe = if self.registered_file {
            opcode::Fsync::new(types::Fixed(0))
        } else {
            opcode::Fsync::new(types::Fd(self.file.as_raw_fd()))
        }
        .flags(types::FsyncFlags::DATASYNC)
        .build()
        .flags(squeue::Flags::IO_DRAIN)
        .user_data(FSYNC_TAG);
        self.fsync_result = None;
        self.push(sqe)
    }

    /// Whether `data` can go to the device from where it lies: aligned in address and length.
    fn sendable_in_place(&self, data: &[u8]) -> bool {
        let a = self.alignment_bytes.max(self.mem_alignment_bytes);
        !data.is_empty()
            && (data.len() as u64).is_multiple_of(self.alignment_bytes)
            && (data.as_ptr() as u64).is_multiple_of(a)
            && u32::try_from(data.len()).is_ok()
    }

    /// Submits `parts` (aligned ones from where they lie, others copied into slots and so
    /// written before this returns) without waiting: the caller waits before the memory of
    /// the parts may be freed or reused (`write_in_place`, or the `HeldMemory` of
    /// `start_in_place`).
    fn submit_in_place(&mut self, offset: u64, parts: &[&[u8]]) -> Result<()> {
        if !parts.iter().all(|p| self.sendable_in_place(p)) {
            // Copied into slots (and padded) as `write_at` does.
            return crate::sink::write_each(self, offset, parts);
        }
        check_aligned(offset, self.alignment_bytes)?;
        let total: u64 = parts.iter().map(|p| p.len() as u64).sum();
        check_range(offset, total as usize, self.report.region_bytes)?;
        let mut pos = offset;
        let mut submitted = Ok(());
        for part in parts {
            while self.free_slots.is_empty() && submitted.is_ok() {
                submitted = self.reap().map(drop);
            }
            if submitted.is_err() {
                break;
            }
            let slot = self.free_slots.pop().expect("a slot is free");
            debug_assert!(
                self.in_flight[slot as usize].submitted.is_none(),
                "a free slot has no write in flight"
            );
            self.in_flight[slot as usize] = InFlight {
                file_offset: self.region_offset_bytes + pos,
                len: part.len(),
                done: 0,
                submitted: Some(Instant::now()),
                source_addr: part.as_ptr() as usize,
            };
            self.in_flight_count += 1;
            // The request reads `part` until it completes (the caller waits for that).
            submitted = self.push_write(slot);
            pos += part.len() as u64;
        }
        debug_assert!(
            submitted.is_err() || pos == offset + total,
            "every part was submitted, back to back"
        );
        submitted
    }
}

impl Sink for UringSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        check_aligned(offset, self.alignment_bytes)?;
        let padded = align_up(data.len() as u64, self.alignment_bytes) as usize;
        if padded > self.slot_bytes {
            return Err(PersistError::TooLarge {
                len: data.len(),
                max_bytes: self.slot_bytes,
            });
        }
        check_range(offset, padded, self.report.region_bytes)?;
        while self.free_slots.is_empty() {
            self.reap()?;
        }
        let slot = self.free_slots.pop().expect("a slot was freed above");
        debug_assert!(
            self.in_flight[slot as usize].submitted.is_none(),
            "a free slot has no write in flight"
        );
        // SAFETY: the slot is free (no request uses it) and holds slot_bytes >= padded bytes.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.slot_ptr(slot), padded) };
        buf[..data.len()].copy_from_slice(data);
        buf[data.len()..].fill(0);
        self.in_flight[slot as usize] = InFlight {
            file_offset: self.region_offset_bytes + offset,
            len: padded,
            done: 0,
            submitted: Some(Instant::now()),
            source_addr: 0,
        };
        self.in_flight_count += 1;
        debug_assert_eq!(
            self.free_slots.len() + self.in_flight_count,
            self.queue_depth as usize,
            "every slot is free or in flight"
        );
        self.push_write(slot)
    }

    fn write_in_place(&mut self, offset: u64, parts: &[&[u8]]) -> Result<()> {
        // `parts` is borrowed until this returns, and the wait returns once no request is in
        // flight (or, should io_uring_enter itself keep failing, with the sink failed: a
        // request left then only reads the caller's memory, it never writes to it).
        let submitted = self.submit_in_place(offset, parts);
        let waited = self.wait_in_place();
        let result = submitted.and(waited);
        debug_assert!(
            result.is_err() || self.in_flight_count == 0,
            "nothing reads the parts once write_in_place returns"
        );
        result
    }

    fn start_in_place(&mut self, offset: u64, parts: &[&[u8]], held: &Hold) -> Result<()> {
        if !held_in(held.as_ref(), parts) {
            return self.write_in_place(offset, parts);
        }
        // Kept until every request is over: the memory outlives the caller's borrow.
        if !self.held.iter().any(|h| Arc::ptr_eq(h, held)) {
            self.held.push(held.clone());
        }
        self.submit_in_place(offset, parts)
    }

    fn wait_in_place(&mut self) -> Result<()> {
        self.wait_in_place_within(None).map(drop)
    }

    fn wait_in_place_within(&mut self, limit: Option<Instant>) -> Result<bool> {
        // The parts are the caller's memory: nothing may still read them once this says so.
        let waited = self.wait_all_writes_through_errors(limit);
        debug_assert!(
            !matches!(waited, Ok(true)) || self.in_flight_count == 0,
            "a wait that says it is over has no write in flight"
        );
        if self.in_flight_count == 0 {
            self.held.clear();
        }
        waited
    }

    fn persist(&mut self) -> Result<()> {
        self.start_persist()?;
        self.finish_persist()
    }

    fn start_persist(&mut self) -> Result<()> {
        assert!(
            self.persist_started.is_none(),
            "start_persist twice without finish_persist"
        );
        self.persist_started = Some(Instant::now());
        if self.sync_mode == SyncMode::Dsync {
            // O_DSYNC: each write is durable when it completes; the persist is their wait.
            return Ok(());
        }
        self.push_fsync()
    }

    fn finish_persist(&mut self) -> Result<()> {
        self.finish_persist_within(None).map(drop)
    }

    fn finish_persist_within(&mut self, limit: Option<Instant>) -> Result<bool> {
        if self.persist_started.is_none() {
            return Ok(true);
        }
        // The writes the persist covers complete first (their errors are the persist's), then
        // the fsync; a rest resubmitted behind it is written, then synced by another.
        loop {
            let over = match self.sync_mode {
                SyncMode::Dsync => self.in_flight_count == 0,
                SyncMode::Fdatasync => match self.fsync_result {
                    Some(res) if res >= 0 && self.fsync_stale => {
                        if self.in_flight_count == 0 {
                            self.fsync_stale = false;
                            self.push_fsync()?;
                        }
                        false
                    }
                    Some(_) => true,
                    None => false,
                },
            };
            if over {
                break;
            }
            if self.reap_by(limit)?.is_none() {
                return Ok(false);
            }
        }
        debug_assert!(
            self.sync_mode == SyncMode::Dsync || self.fsync_result.is_some(),
            "the persist's fdatasync completed"
        );
        debug_assert!(
            self.sync_mode == SyncMode::Fdatasync || self.in_flight_count == 0,
            "with O_DSYNC the persist is its writes' completion"
        );
        self.persist_started = None;
        match self.fsync_result.take() {
            Some(res) if res < 0 => Err(PersistError::io(
                "io_uring fdatasync",
                &self.report.path,
                std::io::Error::from_raw_os_error(-res),
            )),
            _ => Ok(true),
        }
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        check_aligned(offset, self.alignment_bytes)?;
        let padded = align_up(buf.len() as u64, self.alignment_bytes) as usize;
        if padded > self.slot_bytes {
            return Err(PersistError::TooLarge {
                len: buf.len(),
                max_bytes: self.slot_bytes,
            });
        }
        check_range(offset, padded, self.report.region_bytes)?;
        // Reads are synchronous (queue depth 1): free every slot so slot 0 can be used.
        self.wait_all_writes()?;
        assert_eq!(self.in_flight_count, 0, "slot 0 is free for the read");
        assert!(
            (self.region_offset_bytes + offset).is_multiple_of(self.alignment_bytes),
            "the O_DIRECT file offset is aligned"
        );
        let ptr = self.slot_ptr(0);
        let mut done = 0usize;
        while done < padded {
            let fd = self.file.as_raw_fd();
            let (p, len, off) = (
                ptr.wrapping_add(done),
                (padded - done) as u32,
                self.region_offset_bytes + offset + done as u64,
            );
            let sqe = match (self.registered_buffers, self.registered_file) {
                (true, true) => opcode::ReadFixed::new(types::Fixed(0), p, len, 0)
                    .offset(off)
                    .build(),
                (true, false) => opcode::ReadFixed::new(types::Fd(fd), p, len, 0)
                    .offset(off)
                    .build(),
                (false, true) => opcode::Read::new(types::Fixed(0), p, len)
                    .offset(off)
                    .build(),
                (false, false) => opcode::Read::new(types::Fd(fd), p, len).offset(off).build(),
            };
            self.push(sqe.user_data(READ_TAG))?;
            let res = loop {
                if let Some(res) = self.reap()? {
                    break res;
                }
            };
            if res < 0 {
                return Err(PersistError::io(
                    "io_uring read",
                    &self.report.path,
                    std::io::Error::from_raw_os_error(-res),
                ));
            }
            if res == 0 {
                return Err(PersistError::io(
                    "io_uring read",
                    &self.report.path,
                    std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                ));
            }
            done += res as usize;
        }
        // SAFETY: slot 0 holds `padded` bytes just read.
        let data = unsafe { std::slice::from_raw_parts(ptr, buf.len()) };
        buf.copy_from_slice(data);
        Ok(())
    }

    fn report(&self) -> &SinkReport {
        &self.report
    }

    fn grow(&mut self, to: u64) -> Result<()> {
        super::grow_reported(&self.file, self.region_offset_bytes, &mut self.report, to).map(|_| ())
    }

    fn drain_completion_latencies_ns(&mut self, record: &mut dyn FnMut(u64)) -> bool {
        for &ns in &self.latencies_ns {
            record(ns);
        }
        self.latencies_ns.clear();
        true
    }
}

impl Drop for UringSink {
    fn drop(&mut self) {
        // The kernel may still be writing from our buffers: wait for every request before the
        // buffers are freed, whatever their outcome (errors were already reported or latched),
        // up to one completion deadline (none after a stall): a dead device hangs no thread.
        let wait = (!self.stalled).then_some(self.completion_deadline);
        let deadline = wait.map_or(Some(Instant::now()), |d| d.map(|d| Instant::now() + d));
        while self.in_flight_count > 0 {
            match submit_and_wait_until(&mut self.ring, 1, deadline) {
                Ok(true) => {}
                Ok(false) | Err(_) => break,
            }
            let n = self
                .ring
                .completion()
                .filter(|c| c.user_data() < READ_TAG)
                .count();
            self.in_flight_count = self.in_flight_count.saturating_sub(n);
        }
        if self.in_flight_count > 0 {
            // Requests the kernel never reported done may still read the held memory: it is
            // never freed rather than freed under them.
            std::mem::forget(std::mem::take(&mut self.held));
        } else if self.registered_file {
            // The ring's reference to the file goes now, not when the kernel gets round to
            // tearing the ring down (a workqueue, later): a file removed after this sink is
            // dropped gives its space back at once, and the room a burst finds right after
            // removing a preparation that did not fit is the disk's real room.
            let _ = self.ring.submitter().unregister_files();
        }
    }
}
