//! A running readout unit: links emulated into their latency buffers, the next burst prepared,
//! and one trigger at a time recorded as a burst.
//!
//! Threads: one emulates every link (it never waits for storage, and it comes before the
//! writers for the CPU: see `LINKS_NICE`; how late it ever ran is reported); a trigger starts
//! the writer threads of its burst (`writers`) and waits for them while it reports progress;
//! `prepare` readies the next burst's files in the background.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use snbuf_burst::{LinkIdentity, Window};
use snbuf_readout::LatencyBuffer;

use crate::config::RecordConfig;
use crate::counters::{LinkCounters, LiveLink, Progress};
use crate::error::RecordError;
use crate::link_rates::{measure_links, stream_step_ticks, RateMeter};
use crate::links::{Links, SourceTotals};
use crate::reach::BurstReach;
use crate::status_file::{StatusFile, STATUS_FILE_INTERVAL};
use crate::summary::RecordSummary;
use crate::window::{TriggerAt, WindowClock};
use crate::window_job::WindowJob;
use crate::writers::{WriterPlacement, Writers};
use snbuf_burst::opening::ahead::NextBurst;
use snbuf_burst::opening::open::open_burst;

/// How close to the wall clock a unit's newest frame must be for its data clock to be taken as
/// the wall clock (`Unit::data_time_at`): a frame's way from the detector through the network
/// and the receiver's batching takes milliseconds; a clock off by more is another clock.
pub const CLOCK_AGREES_S: f64 = 0.25;

pub struct Unit {
    config: RecordConfig,
    buffers: Vec<LatencyBuffer>,
    /// What fills the buffers (stopped when the unit stops).
    links: Mutex<Links>,
    started: Instant,
    buffer_memory_bytes: u64,
    buffer_page_bytes: Option<u64>,
    /// Per link, the NUMA node its buffer's pages were asked from (None: the kernel's default).
    buffer_nodes: Vec<Option<u32>>,
    /// The live counters of the burst being recorded, if one is.
    live: Mutex<Option<Arc<Vec<LiveLink>>>>,
    /// The reach of the burst being recorded (its window's end, which a trigger may move out),
    /// from when its files are open until its writers are done; then, until its caller says it
    /// is accounted for (`forget_sealed`), that of each burst being sealed and read back.
    reaches: Mutex<Reaches>,
    /// The next burst's files, prepared ahead of its trigger.
    next: Mutex<NextBurst>,
    /// Per link, what every finished burst made durable and lost (counters that only grow).
    finished: Mutex<Vec<LinkCounters>>,
    /// Each link's data clock and rate as measured (`link_rates`), by a thread of its own.
    rates: Arc<Mutex<RateMeter>>,
    rates_stop: Arc<std::sync::atomic::AtomicBool>,
    rates_thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Unit {
    /// Allocates and prefaults the buffers, and starts the links: the outputs made ready, the
    /// buffers allocated (each on its device's NUMA node), the next burst's files prepared,
    /// then the links and the rate meter started, in the order a failure must undo.
    pub fn start(config: &RecordConfig) -> Result<Unit, RecordError> {
        config.validate()?;
        prepare_outputs(config)?;
        let (producers, buffers, buffer_nodes) = allocate_buffers(config)?;
        assert_eq!(buffers.len(), config.links as usize, "a buffer per link");
        // Prepared after the buffers hold their memory: on a memory-backed output the burst's
        // files are sized to what is left.
        let mut next = NextBurst::default();
        next.start(
            &config.burst_files(),
            config.pre,
            config.post,
            sources_of(&buffers),
        );
        let buffer_memory_bytes: u64 = buffers.iter().map(|b| b.memory_bytes()).sum();
        let buffer_page_bytes = buffers[0]
            .pages_obtained()
            .map(|p| p.effective_page_bytes());
        let links = crate::links::start(config, producers)?;
        let rates = Arc::new(Mutex::new(RateMeter::new(
            config.clock().hz(),
            config.frame_bytes(),
            config.link_bytes_per_s(),
        )));
        let rates_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let rates_thread = measure_links(config, &buffers, rates.clone(), rates_stop.clone())?;
        Ok(Unit {
            config: config.clone(),
            buffers,
            links: Mutex::new(links),
            started: Instant::now(),
            buffer_memory_bytes,
            buffer_page_bytes,
            buffer_nodes,
            live: Mutex::new(None),
            reaches: Mutex::new(Reaches::default()),
            finished: Mutex::new(
                (0..config.links)
                    .map(|link| LinkCounters {
                        link,
                        ..LinkCounters::default()
                    })
                    .collect(),
            ),
            next: Mutex::new(next),
            rates,
            rates_stop,
            rates_thread: Mutex::new(Some(rates_thread)),
        })
    }

    pub fn config(&self) -> &RecordConfig {
        &self.config
    }

    /// Starts preparing the next burst's files for the configured window (see `prepare`);
    /// `serve` calls this after each burst.
    pub fn prepare_next(&self) {
        self.next.lock().expect("next burst").start(
            &self.config.burst_files(),
            self.config.pre,
            self.config.post,
            sources_of(&self.buffers),
        );
    }

    /// The next burst's files: "ready", "preparing" or "none" (a trigger opens them itself).
    pub fn next_burst_state(&self) -> &'static str {
        self.next.lock().expect("next burst").state()
    }

    /// Whether the next burst's files are still being prepared.
    pub fn preparing_next(&self) -> bool {
        self.next.lock().expect("next burst").is_preparing()
    }

    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn buffer_memory_bytes(&self) -> u64 {
        self.buffer_memory_bytes
    }

    /// Whether a burst is being recorded now.
    pub fn recording(&self) -> bool {
        self.live.lock().expect("unit state").is_some()
    }

    /// Live figures of every link (of the burst being recorded, if any).
    pub fn progress(&self, phase: &'static str) -> Progress {
        let live = self.live.lock().expect("unit state").clone();
        let ingest = self.links.lock().expect("links").ingest.clone();
        Progress {
            phase,
            elapsed: self.started.elapsed(),
            links: self
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let (written, fill) = (b.written(), b.fill_frames());
                    let mut c = match live.as_ref() {
                        Some(l) => l[i].snapshot(i as u32, written, fill),
                        None => LinkCounters {
                            link: i as u32,
                            frames_in: written,
                            buffer_fill_frames: fill,
                            ..LinkCounters::default()
                        },
                    };
                    c.ingest = ingest.as_ref().map(|g| g.counters[i].snapshot());
                    c
                })
                .collect(),
        }
    }

    /// Every link over the whole run: finished bursts plus the one being recorded.
    pub fn totals(&self) -> Vec<LinkCounters> {
        self.progress_and_totals("totals").1
    }

    /// Every link now (`progress`) and over the whole run (`totals`), from one reading of the
    /// links: taken under the run's totals lock, so a burst that ends meanwhile is counted in
    /// one or the other, never both.
    pub fn progress_and_totals(&self, phase: &'static str) -> (Progress, Vec<LinkCounters>) {
        let finished = self.finished.lock().expect("unit totals");
        let now = self.progress(phase);
        let totals = now
            .links
            .iter()
            .zip(finished.iter())
            .map(|(now, done)| {
                let mut t = *done;
                t.add_burst(now);
                LinkCounters {
                    frames_in: now.frames_in,
                    buffer_fill_frames: now.buffer_fill_frames,
                    backlog_frames: now.backlog_frames,
                    failed: now.failed,
                    ingest: now.ingest,
                    ..t
                }
            })
            .collect();
        drop(finished);
        (now, totals)
    }

    /// Frames each link's buffer holds when full.
    pub fn buffer_capacity_frames(&self) -> u64 {
        self.config.buffer_frames()
    }

    /// Ticks between a link's frames. The emulator's are the configured rate's (a sub-sampled
    /// detector below the frame type's own rate). A stream from the network has the spacing
    /// its sender gave it, whatever rate the unit was configured for (that sizes buffers and
    /// socket memory only): a detector replayed slowly sends fewer frames a second, not frames
    /// further apart. So it is measured on the buffers (the finest step any link has), and is
    /// the frame type's own until frames have come.
    pub fn frame_step_ticks(&self) -> u64 {
        stream_step_ticks(&self.config, &self.buffers)
    }

    /// The detector clock this unit's windows are cut in.
    pub fn clock(&self) -> WindowClock {
        WindowClock {
            frame_step_ticks: self.frame_step_ticks(),
            clock: self.config.clock(),
            buffer: self.config.buffer,
        }
    }

    /// The window a trigger at `at` records (see `WindowClock::window`), decided now from what
    /// the buffers hold: the one to pass to `trigger`, and to tell whoever asked.
    pub fn window(
        &self,
        at: TriggerAt,
        pre: Duration,
        post: Duration,
    ) -> Result<Window, crate::window::WindowError> {
        self.clock().window(self.held(), at, pre, post)
    }

    /// Records the burst of `window` (from `window`), blocking until it is durable, sealed and
    /// verified (its end where the triggers that joined it moved it: `reach`). One burst
    /// recorded at a time: a second call while one records is refused.
    pub fn trigger(
        &self,
        window: &Window,
        burst_id: &str,
        on_progress: impl FnMut(&Progress),
    ) -> Result<RecordSummary, RecordError> {
        let first = snbuf_burst::AnsweredTrigger::whole(burst_id, window);
        self.trigger_answering(window, first, on_progress)
    }

    /// As `trigger`, for a trigger whose own window is not all of `window` (`first`: its answer
    /// as the manifest keeps it, e.g. cut short to what the outputs hold); the burst is named
    /// after it.
    pub fn trigger_answering(
        &self,
        window: &Window,
        first: snbuf_burst::AnsweredTrigger,
        mut on_progress: impl FnMut(&Progress),
    ) -> Result<RecordSummary, RecordError> {
        let burst_id = first.trigger_id.clone();
        let opening = crate::reach::Opening::by(first);
        let written = self.write(&burst_id, window, opening, &mut on_progress)?;
        let sealed = self.seal(written);
        self.forget_sealed(&burst_id);
        sealed
    }

    /// The first half of a burst: opens its files and writes its window until every link is
    /// done (durable, or its losses counted), then frees the unit: from when this returns, a
    /// trigger starts a burst of its own while this one is sealed and read back (`seal`), so
    /// that a unit is never closed to a new window for as long as a read-back takes. Its
    /// triggers stay answered (`answering`) until `forget_sealed`. `burst_id` names the burst
    /// (its directory); `opening` says the triggers it opens for (and the burst it continues).
    pub fn write(
        &self,
        burst_id: &str,
        window: &Window,
        opening: crate::reach::Opening,
        on_progress: &mut dyn FnMut(&Progress),
    ) -> Result<WrittenBurst, RecordError> {
        // Outside the catch below, so only checked in debug builds: the server builds the
        // triggers to hold it, and a panic here would leave the server's `busy` set.
        debug_assert!(
            opening.triggers.iter().all(|t| {
                t.covered_start_timestamp >= window.window_start_timestamp
                    && t.covered_end_timestamp <= window.window_end_timestamp
            }),
            "what each trigger is told is covered is inside the window"
        );
        snbuf_burst::check_burst_id(burst_id).map_err(crate::config::ConfigError::from)?;
        let live: Arc<Vec<LiveLink>> = Arc::new(
            (0..self.config.links)
                .map(|_| LiveLink::default())
                .collect(),
        );
        {
            let mut slot = self.live.lock().expect("unit state");
            if slot.is_some() {
                return Err(RecordError::Busy);
            }
            *slot = Some(live.clone());
        }
        // A panic while recording is this burst's error, not the unit's end: caught here, so
        // that the unit is left as after any failed burst (no reach a later trigger could join,
        // no live counters, the totals kept) and takes triggers again.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.record_window(burst_id, window, opening, &live, on_progress)
        }))
        .unwrap_or_else(|panic| Err(RecordError::Panicked(crate::error::panic_text(&*panic))));
        {
            // The recording reach moves to the sealing ones in one step, so a trigger delivered
            // again always finds the burst that answers it.
            // What goes on past --max-burst is kept for the server whatever became of this
            // burst (an error, a panic): the triggers were told it would be recorded.
            let mut reaches = self.reaches.lock().expect("reaches");
            if let Some(reach) = reaches.recording.take() {
                reach.close();
                reaches.continuation = reach.take_continuation();
                if result.is_ok() {
                    reaches.sealing.push(reach);
                }
            }
        }
        {
            // Into the run's totals before the live counters go, under the same lock order
            // (finished, then live) as `totals`, so no reader sees a burst counted twice or not.
            let mut finished = self.finished.lock().expect("unit totals");
            for (i, (sum, l)) in finished.iter_mut().zip(live.iter()).enumerate() {
                sum.add_burst(&l.snapshot(i as u32, 0, 0));
            }
            *self.live.lock().expect("unit state") = None;
        }
        result
    }

    /// One piece: one burst from trigger to its last write (open, write), with the counters and
    /// clocks its report needs (`seal` makes the report).
    fn record_window(
        &self,
        burst_id: &str,
        window: &Window,
        opening: crate::reach::Opening,
        live: &Arc<Vec<LiveLink>>,
        on_progress: &mut dyn FnMut(&Progress),
    ) -> Result<WrittenBurst, RecordError> {
        let config = &self.config;
        let fb = config.frame_type.frame_bytes() as usize;
        let window = window.clone();
        // A trigger cut short, or one whose burst is named apart from it: the manifest says so
        // from the start (its own answer, not the one the burst's name would give), not only at
        // the seal.
        let first = &opening.triggers[0];
        let first_not_as_named = first.window_end_timestamp != first.covered_end_timestamp
            || first.trigger_id != burst_id
            || opening.triggers.len() > 1
            || opening.continues.is_some();
        let chain = opening.continues.clone();
        // A preparation stuck on its device is waited for no longer than a write would be.
        let prepared = self
            .next
            .lock()
            .expect("next burst")
            .take(config.completion_deadline);
        let identities = self.link_identities();
        let sources = sources_of(&self.buffers);
        // The step is decided once for the burst (a stream's is measured: `frame_step_ticks`).
        let step = self.frame_step_ticks();
        // What opening the burst needs of the configuration, made once: its files are opened
        // from it now, and grown from it when a trigger joins.
        let files = config.burst_files();
        let opened = open_burst(
            &files, burst_id, &window, identities, prepared, &sources, step,
        )?;
        let (mut seal, link_writers) = opened.burst.split();
        seal.set_continues(opening.continues.as_ref().map(|c| c.previous.clone()));
        if opening.continues.is_some() {
            // Said before a frame is written: a unit killed from here on leaves a burst that
            // says what it continues (recovery keeps the one before pointing at it). A failure
            // is not the burst's: the manifest is written again within a turn of the loop.
            if let Err(e) = seal.answer(window.clone(), opening.triggers.clone()) {
                tracing::error!(error = %e, "the manifest could not say what this burst continues yet; it does at the next write");
            }
        }
        let reach = Arc::new(BurstReach::new(
            burst_id,
            window.clone(),
            opening.triggers,
            self.give_up_at(&window),
            crate::reach::LinkFiles {
                links: config.links,
                allocated_bytes: opened.region_bytes,
                region_bytes: opened.window_region_bytes,
            },
            step,
            chain,
        ));
        self.reaches.lock().expect("reaches").recording = Some(reach.clone());

        let trigger_instant = Instant::now();
        let (source_clock, max_lag_ns, links_favoured) = {
            let links = self.links.lock().expect("links");
            (
                links.clock,
                links.max_lag_ns.clone(),
                links.favoured.clone(),
            )
        };
        max_lag_ns.store(0, Ordering::Relaxed);
        let source_cpu0 = source_clock.map(|c| c.seconds()).unwrap_or(0.0);
        let frames_in = || self.buffers.iter().map(|b| b.written()).sum::<u64>();
        let source_frames0 = frames_in();
        let process_cpu0 = snbuf_platform::cpu::process_cpu_seconds();
        let writers = Writers::start(
            link_writers,
            &self.buffers,
            live,
            &WindowJob {
                window: window.clone(),
                ticks_per_frame: step,
                chunk_frames: config.chunk_frames,
                block_frames: crate::chunk_cuts::block_frames(config.frame_bytes()),
                crcs: snbuf_burst::chunk::FrameCrcCombiner::new(config.frame_type.frame_bytes()),
                chunks_per_persist: config.chunks_per_persist,
                frames_per_s: config.link_frames_per_s(),
                clock_hz: config.clock().hz(),
                grow_ahead_bytes: crate::window_writer::grow_ahead_bytes(
                    config.link_frames_per_s(),
                    fb,
                ),
                reach: reach.clone(),
                burst_id: burst_id.to_string(),
                unit_id: config.unit_id.clone().unwrap_or_default(),
                room_to_grow: Arc::new(move |region| {
                    snbuf_burst::opening::sizing::room_to_grow(&files, region)
                }),
            },
            WriterPlacement {
                writers: config.writers,
                cpus: &config.cpus,
                near: &crate::writers::near_cpus(config.writers, &self.buffer_nodes, &config.cpus),
                links_favoured: links_favoured.load(Ordering::Relaxed),
            },
        )?;
        let dir = seal.dir().to_path_buf();
        let mut status = config
            .status_file
            .as_deref()
            .map(|p| StatusFile::new(p).every(STATUS_FILE_INTERVAL));
        let mut report_status = |phase: &'static str, force: bool| {
            if let Some(file) = status.as_mut() {
                if let Err(e) = file.update(burst_id, Some(&dir), force, || self.progress(phase)) {
                    // A reporting channel, not the data: recording goes on without it.
                    tracing::warn!("status file: {e}; it is no longer updated");
                    status = None;
                }
            }
        };
        report_status("recording", true);
        let mut next_tick = Instant::now() + Duration::from_secs(1);
        let mut answered_version = if first_not_as_named { u64::MAX } else { 0 };
        let silence_allowed = crate::watchdog::silence_allowed(config.completion_deadline);
        while writers.running() {
            std::thread::sleep(Duration::from_millis(20));
            writers.watch(silence_allowed);
            // A trigger joined: the manifest names it, and the window it now records, at once.
            // (The window and the list are copied only when they changed.)
            if reach.version() != answered_version {
                let (version, now, triggers) = reach.answered();
                answered_version = version;
                // Past --max-burst, the next burst's name too: a burst recovered after a crash
                // says what continued it (none, once a cancel dropped it).
                seal.set_continued_in(reach.continued_in());
                if let Err(e) = seal.answer(now, triggers) {
                    tracing::error!(error = %e, "the manifest could not name a trigger that joined; it does at the seal");
                }
            }
            report_status("recording", false);
            if Instant::now() >= next_tick {
                on_progress(&self.progress("recording"));
                next_tick += Duration::from_secs(1);
            }
        }
        let joined = writers.join(&dir);
        // Kept, closed, until the burst is sealed: a trigger meanwhile is told it is ending
        // (and opens a burst of its own once the unit is free), not that there is none.
        reach.close();
        // The burst reached --max-burst: the rest goes on as the next burst (`write` keeps it
        // for the server, `take_continuation`); the manifest names it.
        seal.set_continued_in(reach.continued_in());
        let (links, writer_cpu_s) = joined?;
        // The window as recorded: its end where the last joined trigger moved it.
        let (_, window, triggers) = reach.answered();
        if reach.version() > 0 || first_not_as_named {
            // Joined, cut, named apart or cancelled: the manifest holds the window as it ended.
            seal.set_answered(window.clone(), triggers);
        }
        // The last figures of this burst's links, while they are still its own: what the status
        // file shows while it is sealed, whatever the next burst does meanwhile.
        let last_progress = self.progress("sealing");
        on_progress(&last_progress);
        Ok(WrittenBurst {
            burst_id: burst_id.to_string(),
            last_progress,
            dir,
            status,
            seal,
            chunks_from_source: links.iter().map(|l| l.chunks_from_source()).sum(),
            links,
            window,
            writer_cpu_s,
            writing_s: trigger_instant.elapsed().as_secs_f64(),
            source_cpu_s: source_clock.map(|c| c.seconds()).unwrap_or(0.0) - source_cpu0,
            source_bytes: (frames_in() - source_frames0) * fb as u64,
            process_cpu_s: snbuf_platform::cpu::process_cpu_seconds() - process_cpu0,
            source_max_lag_s: max_lag_ns.load(Ordering::Relaxed) as f64 * 1e-9,
            survives_power_loss: opened.survives_power_loss,
            prepared_ahead: opened.prepared_ahead,
            cut_to_bytes_per_link: opened.cut_to_bytes_per_link,
        })
    }

    /// The reach of the burst being recorded (its window's end, the triggers it answers), while
    /// its writers run: what a trigger joins (`reach::join`).
    pub(crate) fn reach(&self) -> Option<Arc<BurstReach>> {
        self.reaches.lock().expect("reaches").recording.clone()
    }

    /// The burst of `reach` will be continued (--max-burst): its writers stop waiting for a
    /// link that sends nothing half a buffer after the burst's end is due, not a buffer and
    /// more, so that the next burst's start is still in the buffers when they are done (that
    /// link's rest is counted lost; the others lose nothing at the seam).
    pub(crate) fn hasten_give_up(&self, reach: &BurstReach) {
        let normal = self.give_up_at(&reach.window());
        let by = normal
            .checked_sub(self.config.buffer / 2 + Duration::from_secs(2))
            .unwrap_or(normal);
        debug_assert!(by <= normal, "only ever sooner");
        reach.give_up_no_later_than(by);
    }

    /// When the writers of `window` stop waiting for data that does not come
    /// (`reach::give_up_at`).
    fn give_up_at(&self, window: &Window) -> Instant {
        let newest = self.newest_timestamp();
        crate::reach::give_up_at(&self.config, window, newest, &self.link_rates())
    }

    /// Each link's detector identity, from the newest frame in its buffer (frames without a
    /// header give zeros), with its DUNE SourceID.
    fn link_identities(&self) -> Vec<LinkIdentity> {
        self.buffers
            .iter()
            .enumerate()
            .map(|(l, b)| {
                let w = b.written();
                let id = (w > 0)
                    .then(|| {
                        b.read_with(w - 1, 1, |run| b.layout().identity(run.frame(0)))
                            .ok()
                            .and_then(|(_, id)| id)
                    })
                    .flatten()
                    .unwrap_or_default();
                LinkIdentity {
                    det_id: id.det_id,
                    crate_id: id.crate_id,
                    slot_id: id.slot_id,
                    stream_id: id.stream_id,
                    source_id: self.config.source_id(l as u32),
                }
            })
            .collect()
    }

    /// Network ingest's settings and per-link counters, when the links come from the network.
    pub fn ingest(&self) -> Option<snbuf_readout::udp::IngestInfo> {
        self.links.lock().expect("links").ingest.clone()
    }

    /// Stops the links; returns frames produced and frames skipped (producer late) per link.
    pub fn stop(self) -> SourceTotals {
        self.links.lock().expect("links").stop()
    }
}

impl Unit {
    /// Stops the links and removes the unused preparation: the unit records nothing more. Also
    /// what dropping it does; a server calls it when it stops, whoever else still holds the unit
    /// (a metrics endpoint, a fleet link), so that nothing of a stopped unit stays on disk.
    pub fn wind_down(&self) {
        self.rates_stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.rates_thread.lock().ok().and_then(|mut h| h.take()) {
            let _ = h.join();
        }
        if let Ok(mut links) = self.links.lock() {
            links.stop();
        }
        // An unused preparation removes its files when dropped.
        if let Ok(mut next) = self.next.lock() {
            next.take(self.config.completion_deadline);
        }
    }
}

/// Each link's latency buffer, as the memory its chunks are written from.
fn sources_of(buffers: &[LatencyBuffer]) -> Vec<snbuf_persist::sink::SourceMemory> {
    buffers
        .iter()
        .map(|b| snbuf_persist::sink::SourceMemory(b.held_memory()))
        .collect()
}

impl Drop for Unit {
    fn drop(&mut self) {
        self.wind_down();
    }
}

mod held;
mod seal;
mod setup;

use seal::Reaches;
pub use seal::WrittenBurst;

use setup::{allocate_buffers, prepare_outputs};
