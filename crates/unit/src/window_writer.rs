//! What one writer thread does: persists the window of each of its links. For each link it
//! finds the window's first frame in the latency buffer, writes frames out in chunks, and makes
//! each group of chunks durable through the burst writer. Every link's chunk is started before
//! any is waited for, and so are the persists: on io_uring one thread keeps all its links'
//! writes and flushes in flight. Loss is explicit: every frame of the window is either durable
//! or counted lost, per link, live and in the manifest.
//!
//! Loss is counted by timestamps: whenever frames are read, any window frames between the
//! timestamp expected next and the first one present are lost (overwritten in the buffer before
//! the writer got to them, before the buffer's start, or never produced by the link), and so
//! are frames missing inside what was read. So only frames inside the window are ever counted,
//! however far a slow writer falls behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use snbuf_burst::WriteError;
use snbuf_platform::HeldMemory;
use snbuf_readout::{LatencyBuffer, Lookup, RingReadError};

use crate::chunk_cuts::frames_for_next_chunk;
use crate::counters::LiveLink;
use crate::watchdog::WriterWatch;
use crate::window::{
    first_at_or_after, frames_before, frames_between, frames_in_window, frames_missing_inside,
    on_grid,
};
use crate::window_job::{DynLink, WindowJob};

mod durable;
mod growth;

pub(crate) use growth::grow_ahead_bytes;
mod loss;

/// A caught-up writer sleeps at least this long (no busy polling) and at most this long (a link
/// that runs ahead of its rate fills a chunk sooner; 5 ms of backlog is far inside any buffer).
const MIN_IDLE_SLEEP: Duration = Duration::from_micros(200);
const MAX_IDLE_SLEEP: Duration = Duration::from_millis(5);

/// A write or flush not over this long after it was started is late: the writer's rounds no
/// longer wait for it (it is only looked at, its link sitting out), so a device that stopped
/// answering holds its neighbours once, this long, and its completion deadline fails only its
/// own link. Until then a round waits for all its links' requests, as for a healthy device:
/// the next round's writes then go out together, which the block layer dispatches (and the
/// device answers) in batches; staggered one by one, each costs a doorbell and an interrupt.
const LATE_AFTER: Duration = Duration::from_millis(20);

/// The longest a link that waits for frames leaves its appended chunks unacknowledged, unless
/// its group fills first (`chunks_per_persist`): a power cut meanwhile loses at most this much
/// of a window still being written (a crash loses the buffer's copy anyway).
const ACKNOWLEDGE_WITHIN: Duration = Duration::from_millis(50);

/// The least a full link file grows by (`grow_for_more`).
const GROW_AT_LEAST_BYTES: u64 = 16 << 20;

/// Where a link's writer is in the window.
#[derive(Default)]
struct Cursor {
    /// Sequence number of the next frame to read from the buffer.
    next: Option<u64>,
    /// Timestamp the next frame of the window should have (None before the first is read).
    expect_ts: Option<u64>,
    /// The first window frame's timestamp: the link's frame grid.
    grid: Option<u64>,
    /// The link's timestamps left their grid (a jump that is not whole frames): then the
    /// window's frame count is not exact, and the loss invariant is not asserted.
    off_grid: bool,
    /// Frames appended to the burst but not yet acknowledged by a persist, and the timestamp
    /// of the newest of them.
    pending_frames: u64,
    /// When the first chunk not yet acknowledged was appended (None: nothing pending).
    pending_since: Option<Instant>,
    pending_until: u64,
    /// Window frames counted lost since the last persist (behind the durable watermark's
    /// successor, so a failure does not count them twice).
    lost_pending: u64,
    /// What is pending should be made durable this round (a group is full, or the link waits
    /// for frames), and whether that persist was started.
    persist_due: bool,
    persist_started: bool,
    /// The window's end was reached: the link is done once what is pending is durable.
    finishing: bool,
    done: bool,
    /// The window's region a grow of this link's file failed for: not tried again until the
    /// window grows further (a full link then tries once more, `grow_for_more`).
    grow_failed_for: u64,
}

/// One link as its writer works on it.
struct LinkWork<'a> {
    lw: DynLink,
    /// Its place among its writer's links, and the writer's watchdog.
    index: usize,
    watch: &'a WriterWatch,
    buf: &'a LatencyBuffer,
    /// `buf`'s memory, for a sink that writes from it after the read returned.
    held: Arc<dyn HeldMemory>,
    live: &'a LiveLink,
    c: Cursor,
    /// The chunk whose write is in flight, if any (finished once its device is done).
    started: Option<StartedChunk>,
    /// When the write or flush now in flight was started.
    in_flight_since: Option<Instant>,
    /// The ring's count of frames when it last grew, and when that was: how long the link has
    /// been silent.
    last_arrival: (u64, Instant),
    /// How long the link must be silent to be given up, once a trigger waits (`silent_limit`).
    silent_limit: Option<Duration>,
}

/// What one turn on a link came to.
enum Turn {
    /// The link finished, or was failed, or skipped frames.
    Progressed,
    /// A chunk's payload write was started from the ring: `finish_chunk` completes it.
    Started(StartedChunk),
    /// Nothing to do until this many more frames arrive.
    Waiting { frames_missing: u64 },
}

/// A read of the ring whose chunk may still be being written from it (io_uring).
struct StartedChunk {
    /// The first frame read.
    next: u64,
    /// The window's end the read was cut at.
    end: u64,
    /// How many frames were read and what came of them, or why nothing was.
    read: Result<(usize, Batch), RingReadError>,
}

/// What a writer took from one read of a link's buffer.
struct Batch {
    /// Frames before the window, passed over.
    before: usize,
    /// Window frames after those, staged as the next chunk.
    inside: usize,
    first: u64,
    last: u64,
    /// Whether staging succeeded.
    staged: Result<(), WriteError>,
}

/// Persists the window of each of `links` (reading from `bufs`, same order); returns the links.
/// Beats on `watch` each round; once the watchdog gave this writer up (it was stuck in a call
/// longer than allowed, and the burst was sealed without it), it returns at once.
///
/// The writer's round (turns, the device waits youngest first, the flushes, the sleep) is one
/// schedule over all its links, kept in this one function so that its order reads in one place.
pub(crate) fn write_window(
    links: Vec<DynLink>,
    bufs: &[LatencyBuffer],
    live: &[LiveLink],
    job: &WindowJob,
    watch: &WriterWatch,
) -> Vec<DynLink> {
    assert_eq!(
        links.len(),
        bufs.len(),
        "a buffer per link, in the same order"
    );
    assert!(job.ticks_per_frame > 0, "frames are some ticks apart");
    assert!(job.frames_per_s > 0.0, "a link fills chunks at some rate");
    let mut work = link_works(links, bufs, live, watch);
    while work.iter().any(|w| !w.c.done) {
        watch.beat();
        if watch.given_up() {
            return work.into_iter().map(|w| w.lw).collect();
        }
        let mut progressed = false;
        // The fewest frames any link still needs for a full chunk: how long to sleep.
        let mut fewest_missing = job.chunk_frames as u64;
        // Every link's chunk is started before any is waited for, and so are the persists: on
        // io_uring one writer keeps all its links' writes (and then flushes) in flight at once.
        // Other methods write in `turn` and persist in `start_flush`, one link after the other.
        // A link whose write or flush is still in flight (a slow or stalled device) sits out.
        // A writer the watchdog gave up while it was stuck in a call touches nothing more
        // (each link's step looks first), and returns at the top of the loop.
        // It beats before each step: a step may block in the kernel (a pwrite, an fdatasync),
        // and the watchdog judges each one, not a round of several.
        let go_on = || {
            watch.beat();
            !watch.given_up()
        };
        for w in work.iter_mut().filter(|w| go_on() && w.ready_for_turn()) {
            match w.turn(job) {
                Turn::Progressed => progressed = true,
                Turn::Started(chunk) => {
                    w.started = Some(chunk);
                    w.in_flight_since = Some(Instant::now());
                    progressed = true
                }
                Turn::Waiting { frames_missing } => {
                    fewest_missing = fewest_missing.min(frames_missing)
                }
            }
        }
        for w in work.iter_mut().filter(|w| go_on() && w.flush_can_start()) {
            w.start_flush();
        }
        // The devices: every write and flush is waited for until it is late, then only looked
        // at (`LATE_AFTER`); what the chunks just written asked for is started, and waited for
        // in the same way, so that the next round's writes go out together.
        progressed |= wait_devices(&mut work, job, &go_on);
        for w in work.iter_mut().filter(|w| go_on() && w.flush_can_start()) {
            w.start_flush();
        }
        progressed |= wait_devices(&mut work, job, &go_on);
        // Only a link waiting on its device mid-window: one at its window's end has its loss
        // counted already.
        for w in work
            .iter()
            .filter(|w| !w.ready_for_turn() && !w.c.done && !w.c.finishing)
        {
            w.show_overwritten(job);
        }
        // A late request is not waited for: its link sits out, the others sleep as usual.
        let in_flight = work.iter().any(|w| w.in_flight() && !w.late());
        if !progressed && !in_flight {
            // Caught up: sleep until the first link could have a full chunk, not in short
            // polls. With ten writers on two cores, 200 us polls cost more CPU in context
            // switches than the copies did. Bounded both ways: a link may run ahead of its
            // nominal rate (a producer catching up), and the window's end may arrive sooner.
            let until_chunk = Duration::from_secs_f64(fewest_missing as f64 / job.frames_per_s);
            std::thread::sleep(until_chunk.clamp(MIN_IDLE_SLEEP, MAX_IDLE_SLEEP));
        }
    }
    for w in &mut work {
        w.finish(job);
    }
    work.into_iter().map(|w| w.lw).collect()
}

/// Each link's work: its writer, its buffer (held while a device may read from it), its live
/// counters, and a cursor at the window's start.
fn link_works<'a>(
    links: Vec<DynLink>,
    bufs: &'a [LatencyBuffer],
    live: &'a [LiveLink],
    watch: &'a WriterWatch,
) -> Vec<LinkWork<'a>> {
    links
        .into_iter()
        .zip(bufs)
        .enumerate()
        .map(|(index, (lw, buf))| LinkWork {
            live: &live[lw.link() as usize],
            lw,
            index,
            watch,
            held: buf.held_memory(),
            buf,
            c: Cursor::default(),
            started: None,
            in_flight_since: None,
            last_arrival: (buf.written(), Instant::now()),
            silent_limit: None,
        })
        .collect()
}

/// Waits for each link's write or flush in flight until it is over or late (`LATE_AFTER`
/// after it was started; one already late is only looked at), finishing what is over. Returns
/// whether any was.
fn wait_devices(work: &mut [LinkWork], job: &WindowJob, go_on: &dyn Fn() -> bool) -> bool {
    let mut over = false;
    for w in work.iter_mut().filter(|w| w.in_flight()) {
        if !go_on() {
            break;
        }
        debug_assert!(!w.c.done, "a link done has nothing in flight");
        let since = w.in_flight_since.expect("a request in flight was started");
        let limit = since + LATE_AFTER;
        over |= if w.started.is_some() {
            w.finish_chunk_by(limit, job)
        } else {
            w.finish_flush_by(Some(limit))
        };
    }
    over
}

impl LinkWork<'_> {
    /// How long the link has brought no frame, its ring's count being `written` now.
    fn silent_for(&mut self, written: u64) -> Duration {
        let now = Instant::now();
        if written != self.last_arrival.0 {
            self.last_arrival = (written, now);
        }
        now.saturating_duration_since(self.last_arrival.1)
    }

    /// How long the link must bring nothing to be taken for dead: `reach::silent_after` at the
    /// sparser of its configured rate and its own, the step between its newest frames
    /// (`link_rates::measured_step_of`: the smallest, so a pause or a lost frame does not make
    /// a dense link look sparse): a network stream sparser than the unit was told is not cut
    /// between two of its frames, and a link that died still shows the rate it had. Decided
    /// once, when a trigger first waits.
    fn silent_limit(&mut self, job: &WindowJob) -> Duration {
        if let Some(limit) = self.silent_limit {
            return limit;
        }
        let own_per_s = crate::link_rates::measured_step_of(self.buf)
            .map(|step| job.clock_hz as f64 / step as f64);
        let per_s = own_per_s.map_or(job.frames_per_s, |own| own.min(job.frames_per_s));
        let limit = crate::reach::silent_after(per_s);
        self.silent_limit = Some(limit);
        limit
    }

    /// Does what can be done on this link now: read and append a chunk, or acknowledge what is
    /// pending while waiting for frames.
    ///
    /// One piece: the per-link step of the writer's loop; its branches (read, append,
    /// acknowledge, finish) share the link's state.
    fn turn(&mut self, job: &WindowJob) -> Turn {
        let reach = job.reach.now();
        let (ws, we) = (job.window.window_start_timestamp, reach.end);
        self.grow_ahead(reach.region_bytes, job);
        let next = match self.c.next {
            Some(n) => n,
            None => {
                let n = match self.buf.find_timestamp(ws) {
                    Lookup::At(n) => n,
                    Lookup::After { next } => next,
                    // The window starts before the buffer does: start at what is left; the
                    // shortfall is counted when the first frame is read.
                    Lookup::BeforeOldest { oldest } => oldest,
                };
                self.advance_to(n);
                n
            }
        };
        // Wait for a full chunk unless the window's end is already buffered. Chunks are cut
        // on block boundaries of the ring where they can be, so their payload is written from
        // the ring itself.
        let want = frames_for_next_chunk(next, job.chunk_frames as u64, job.block_frames);
        let written = self.buf.written();
        let available = written.saturating_sub(next);
        // Silence is timed only once a trigger waits (no clock read a turn otherwise): a link
        // dead long before is given up after that much more of it.
        let given_up = Instant::now() >= reach.give_up_at
            || (reach.give_up_silent && self.silent_for(written) >= self.silent_limit(job));
        if available == 0 {
            if given_up {
                if !job.reach.close_at(we) {
                    return Turn::Progressed; // the window moved out meanwhile
                }
                // The source stopped short of the window's end: the rest never came.
                let expect = self.c.expect_ts.unwrap_or(ws);
                self.count_lost(frames_between(expect, we, job.ticks_per_frame));
                self.finish_window();
                return Turn::Progressed;
            }
            // Nothing new to write: acknowledge what is pending rather than sit on it.
            self.acknowledge_while_waiting();
            return Turn::Waiting {
                frames_missing: job.chunk_frames as u64,
            };
        }
        if available < want {
            let newest_ts = self.buf.timestamp_at(written - 1).unwrap_or(0);
            if newest_ts < we && !given_up {
                self.acknowledge_while_waiting();
                return Turn::Waiting {
                    frames_missing: want - available,
                };
            }
        }
        // The frames go from the ring straight to where the chunk is written (at most one
        // copy, none for whole blocks on a block device), staged: they count only if the ring
        // says afterwards that they were not overwritten while being written and checksummed
        // (`finish_chunk`, once the write is over).
        let lw = &mut self.lw;
        let held = &self.held;
        let layout = *self.buf.layout();
        let frame_checksums = self.buf.frame_checksums();
        let timestamp_of = |frame: &[u8]| layout.timestamp(frame);
        let read = self.buf.read_with(next, available.min(want), |run| {
            let n = run.frames();
            debug_assert!(n >= 1 && n as u64 <= available.min(want), "within the ask");
            // Frames before the window (a window that starts in the future) are passed over.
            // A link's frames are in timestamp order (as `find_timestamp` and the loss count
            // assume), so both edges are found by bisection: a handful of frame headers read,
            // not one per frame (each would be a cache miss: the links stream frames past the
            // cache, and the writer reads nothing else of a frame it writes from the ring).
            let before = first_at_or_after(n, 0, |i| timestamp_of(run.frame(i)), ws);
            let inside = first_at_or_after(n, before, |i| timestamp_of(run.frame(i)), we) - before;
            if inside == 0 {
                return Batch {
                    before,
                    inside,
                    first: 0,
                    last: 0,
                    staged: Ok(()),
                };
            }
            let mut parts: [&[u8]; 2] = [&[], &[]];
            let mut k = 0;
            for p in run.parts(before..before + inside) {
                parts[k] = p;
                k += 1;
            }
            // The chunk's checksum from its frames' own (the link computed them while the
            // frames were in its cache): the payload itself is never read for it.
            let crc = frame_checksums.then(|| {
                job.crcs
                    .combine((before..before + inside).map(|i| run.frame_crc(i)))
            });
            Batch {
                before,
                inside,
                first: timestamp_of(run.frame(before)),
                last: timestamp_of(run.frame(before + inside - 1)),
                // The sink holds the ring while it writes from it; `finish_chunk` waits.
                staged: lw.start_stage(&parts[..k], crc, held),
            }
        });
        let read = match read {
            Err(RingReadError::NotYet) => {
                self.acknowledge_while_waiting();
                return Turn::Waiting {
                    frames_missing: job.chunk_frames as u64,
                };
            }
            // Overwritten or not, the write may be in flight: `finish_chunk` waits for it.
            read => read,
        };
        Turn::Started(StartedChunk {
            next,
            end: we,
            read,
        })
    }

    /// Whether a write or flush of the link is in flight.
    fn in_flight(&self) -> bool {
        self.started.is_some() || self.c.persist_started
    }

    /// Whether its request in flight is late (`LATE_AFTER`): no longer waited for.
    fn late(&self) -> bool {
        self.in_flight()
            && self
                .in_flight_since
                .is_some_and(|t| t.elapsed() >= LATE_AFTER)
    }

    /// Whether the link can take its turn: not done, and nothing of it in flight.
    fn ready_for_turn(&self) -> bool {
        !self.c.done && !self.c.finishing && self.started.is_none() && !self.c.persist_started
    }

    /// Whether what is pending should be made durable now: asked for, and no write in flight.
    fn flush_can_start(&self) -> bool {
        (self.c.persist_due || self.c.finishing)
            && !self.c.done
            && self.started.is_none()
            && !self.c.persist_started
    }

    /// Waits until `limit` at most for the write of the chunk `turn` started; once it is over,
    /// finishes the chunk. Returns whether it was over.
    fn finish_chunk_by(&mut self, limit: Instant, job: &WindowJob) -> bool {
        match self.lw.wait_staged_within(Some(limit)) {
            Ok(false) => false,
            Ok(true) => {
                let chunk = self.started.take().expect("a chunk in flight");
                self.finish_chunk(chunk, job);
                true
            }
            Err(e) => {
                // The write failed or never completed (a stalled device): the link is failed
                // whether or not the ring still holds the frames (after a long stall it does
                // not).
                self.started = None;
                self.fail(e);
                true
            }
        }
    }

    /// Once the write of the chunk `turn` started is over: checks that the ring still held its
    /// frames when the write ended (the device read them by DMA until then), and appends it,
    /// or skips what the link overwrote meanwhile (that payload is never appended: no header
    /// points at it).
    fn finish_chunk(&mut self, chunk: StartedChunk, job: &WindowJob) {
        let StartedChunk { next, end, read } = chunk;
        match read.and_then(|r| self.buf.still_holds(next).map(|()| r)) {
            Ok((n, batch)) => {
                // A reader never passes what the link has written.
                assert!(
                    next + n as u64 <= self.buf.written(),
                    "read past the written frames"
                );
                self.take_batch(next, n, batch, job, end);
            }
            Err(RingReadError::Overwritten { oldest }) => {
                // Overwritten before this writer got to them, or while they were written:
                // resume at the oldest frame left; the frames skipped are counted (by
                // timestamp) at the next read.
                self.advance_to(oldest);
            }
            Err(RingReadError::NotYet) => unreachable!("turn returns NotYet itself"),
        }
    }

    /// Accounts for and appends one read of `n` frames from `next`, cut at the window's end `we`.
    fn take_batch(&mut self, next: u64, n: usize, batch: Batch, job: &WindowJob, we: u64) {
        let tpf = job.ticks_per_frame;
        let Batch {
            before,
            inside,
            first,
            last,
            staged,
        } = batch;
        debug_assert!(before + inside <= n, "a batch is part of what was read");
        debug_assert!(inside <= job.chunk_frames as usize, "at most chunk_frames");
        if inside == 0 {
            if before == n {
                self.advance_to(next + n as u64);
                return;
            }
            if !job.reach.close_at(we) {
                return; // the window moved out: read these frames again against its new end
            }
            // The next frame present is past the window: whatever was expected is lost.
            let expect = self
                .c
                .expect_ts
                .unwrap_or(job.window.window_start_timestamp);
            self.count_lost(frames_between(expect, we, tpf));
            self.finish_window();
            return;
        }
        if let Err(e) = staged {
            if matches!(e, WriteError::Full { .. }) && self.grow_for_more(job) {
                // Read again next turn, into the room just made (the ring still has them, or
                // their loss is counted by timestamp as for any frames overwritten).
                return;
            }
            self.fail(e);
            return;
        }
        // Window frames missing before this batch and inside it. The first read counts from the
        // window's start on the grid of the first frame present.
        let grid = *self.c.grid.get_or_insert(first);
        self.c.off_grid |= !on_grid(first, grid, tpf) || !on_grid(last, grid, tpf);
        let missing_before = match self.c.expect_ts {
            Some(e) => frames_between(e, first.min(we), tpf),
            None => frames_before(job.window.window_start_timestamp, first, tpf),
        };
        self.count_lost(missing_before + frames_missing_inside(first, last, inside as u64, tpf));
        if let Err(e) = self.lw.append_staged(first, last) {
            self.fail(e);
            return;
        }
        self.c.pending_frames += inside as u64;
        self.c.pending_since.get_or_insert_with(Instant::now);
        self.c.pending_until = last;
        // One persist per group of chunks: fewer flushes, several writes in flight. Started
        // after every link of this writer had its turn (`write_window`).
        if self.lw.pending_chunks() >= job.chunks_per_persist as u64 {
            self.c.persist_due = true;
        }
        self.c.expect_ts = Some(last.saturating_add(tpf));
        self.advance_to(next + (before + inside) as u64);
        if before + inside < n && job.reach.close_at(we) {
            // A frame at or past the window's end is buffered: the window is complete (unless
            // a trigger moved the end out meanwhile: then the link goes on).
            self.count_lost(frames_between(last.saturating_add(tpf), we, tpf));
            self.finish_window();
        }
    }

    fn advance_to(&mut self, seq: u64) {
        self.c.next = Some(seq);
        self.live.set_cursor(seq);
    }

    /// The window's end was reached: once what is pending is durable (a flush the writer's
    /// loop starts and waits for), this link is done.
    fn finish_window(&mut self) {
        debug_assert!(!self.c.finishing, "a link finishes its window once");
        self.c.finishing = true;
        self.live.set_overwritten(0);
        self.live.set_cursor(u64::MAX);
    }

    /// Stops the link on a write error; the others go on. A full file refused the chunk before
    /// writing anything, so what was appended before is made durable first; any other error has
    /// already failed the link (latched, in its manifest record).
    fn fail(&mut self, e: WriteError) {
        tracing::error!(link = self.lw.link(), error = %e, "link failed: write");
        if matches!(e, WriteError::Full { .. }) && self.flush() {
            self.lw.fail(&e);
        }
        self.live.fail();
        self.c.done = true;
    }
}
