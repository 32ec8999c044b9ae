//! The recorder: emulated links feed latency buffers; a trigger opens a timestamp window; writer
//! threads persist it as a burst; nothing acknowledged is lost and nothing lost goes uncounted.
//!
//! Threads: one producer emulates every link (it never waits for storage, and it comes before
//! the writers for the CPU: see `LINKS_NICE`; how late it ever ran is reported); `writers` threads
//! each own a subset of links and, for each, locate the window's first frame in the latency
//! buffer, then copy frames out in chunks of `chunk_frames` and make each chunk durable through
//! the burst writer. A frame of the window that the producer overwrote before its writer got to
//! it is counted as lost for that link — live, and in the manifest. The caller sees progress
//! about once a second through a callback (only the binary knows the terminal).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use snbuf_burst::{
    verify_burst, BurstError, BurstSpec, BurstWriter, FrameInfo, LinkWriter, Manifest, TriggerInfo,
    VerifyReport, WriteError,
};
use snbuf_persist::fault::FaultPlan;
use snbuf_persist::memory::PageSize;
use snbuf_persist::{cpu, Method, PersistError, Sink, SyncMode};

use crate::frame::{timestamp_of, FrameType};
use crate::latency_buffer::{latency_buffer, LatencyBuffer, Lookup, ReadError};
use crate::next_burst::{link_region_bytes, open_link_sink, NextBurst};
use crate::source::{Emulator, GapSpec, Payload};
use crate::status_file::StatusFile;

/// How often the status file is rewritten while a burst records.
const STATUS_FILE_INTERVAL: Duration = Duration::from_millis(100);

/// The links come before the writers for the CPU. Real links never wait (a readout card's DMA);
/// the emulation must not either, or the input is slower than set and a keep-up test proves
/// nothing. With ten busy writers on two cores the scheduler kept the emulation up to 69 ms
/// from its schedule at 5 GB/s, against 6-9 ms with this order. The emulation raises its own
/// priority where that is allowed (root or CAP_SYS_NICE); elsewhere the writers lower theirs.
const LINKS_NICE: i32 = -10;
const WRITERS_NICE: i32 = 10;

#[derive(Clone)]
pub struct RecordConfig {
    pub frame_type: FrameType,
    pub links: u32,
    pub frames_per_s_per_link: f64,
    /// How much of each link the latency buffer holds.
    pub buffer: Duration,
    pub pre: Duration,
    pub post: Duration,
    pub trigger_after: Duration,
    pub method: Method,
    pub sync_mode: SyncMode,
    pub output_dir: PathBuf,
    pub burst_id: String,
    pub writers: usize,
    pub cpus: Vec<usize>,
    pub page_size: PageSize,
    pub chunk_frames: u32,
    /// Chunks a writer appends per persist (fdatasync, fence): 1 acknowledges every chunk on its
    /// own; more keeps several writes in flight and flushes less often, acknowledging later.
    pub chunks_per_persist: u32,
    pub payload: Payload,
    pub gaps: Option<GapSpec>,
    /// Where to keep the live state with each link's durable watermark while a burst records
    /// (see `status_file`); none by default.
    pub status_file: Option<PathBuf>,
    /// Faults injected into the links' sinks, for reliability tests (`--inject-fault`).
    pub faults: Vec<FaultPlan>,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Setup(String),
    #[error(transparent)]
    Burst(#[from] snbuf_burst::BurstError),
    #[error("a burst is being recorded; this trigger is refused (each trigger is its own burst: retry when it is sealed)")]
    Busy,
}

/// One link's live figures.
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkProgress {
    pub link: u32,
    /// Frames the link has produced into its buffer.
    pub frames_in: u64,
    /// Frames of the window made durable.
    pub frames_out: u64,
    /// Chunks made durable, and the timestamp of the newest durable frame: the durable
    /// watermark. Everything up to it survives a crash (`snbuf recover` keeps it).
    pub durable_chunks: u64,
    pub durable_until_timestamp: Option<u64>,
    pub lost_frames: u64,
    pub buffer_fill_frames: u64,
    /// Frames of the window produced but not yet durable: the part of the buffer that a slow
    /// medium puts at risk (loss starts when it reaches the buffer's capacity).
    pub backlog_frames: u64,
    pub failed: bool,
}

#[derive(Clone, Debug)]
pub struct Progress {
    pub phase: &'static str,
    pub elapsed: Duration,
    pub links: Vec<LinkProgress>,
}

#[derive(Clone, Debug)]
pub struct RecordReport {
    pub burst_dir: PathBuf,
    pub manifest: Manifest,
    pub verify: VerifyReport,
    pub window: TriggerInfo,
    pub frame_bytes: u32,
    pub input_bytes_per_s: f64,
    /// Bytes made durable per second, from the trigger to the last chunk.
    pub output_bytes_per_s: f64,
    pub frames_recorded: u64,
    pub lost_frames: u64,
    pub buffer_memory_bytes: u64,
    pub buffer_page_bytes: Option<u64>,
    pub durability: String,
    pub survives_power_loss: bool,
    /// Whether the burst's files were prepared before the trigger (else opened at it).
    pub prepared_ahead: bool,
    pub skipped_at_source: u64,
    /// The longest a frame was overdue at the link emulation from the trigger to the window's
    /// end (s): the links ran at their set rate while this stayed a few ms.
    pub source_max_lag_s: f64,
    /// CPU seconds of the writer threads (copy out of the buffers, checksum, persist).
    pub writer_cpu_s: f64,
    /// CPU seconds of the link emulation while the window was recorded (ingest).
    pub source_cpu_s: f64,
}

impl RecordReport {
    /// Core-seconds per GiB recorded, ingest + checksum + persist, while the window recorded.
    pub fn cpu_core_s_per_gib(&self) -> f64 {
        let gib = (self.frames_recorded * self.frame_bytes as u64) as f64 / (1u64 << 30) as f64;
        if gib > 0.0 {
            (self.writer_cpu_s + self.source_cpu_s) / gib
        } else {
            0.0
        }
    }
}

/// CPU seconds a thread has used, from its CPU-time clock.
fn cpu_seconds(clock: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// The CPU-time clock of a running thread (so another thread can read it).
fn thread_clock<T>(h: &std::thread::JoinHandle<T>) -> Option<libc::clockid_t> {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread is alive (we hold its handle); the out-pointer is valid.
    (unsafe { libc::pthread_getcpuclockid(h.as_pthread_t(), &mut clock) } == 0).then_some(clock)
}

/// A link of the burst on whichever sink `open` chose.
type DynLink = LinkWriter<Box<dyn Sink>>;

struct LinkShared {
    /// Frames of the window made durable (counted only after their persist returned).
    out: AtomicU64,
    /// Chunks made durable, and the timestamp of the newest durable frame (meaningful once a
    /// chunk is): the link's durable watermark, which a crash must never take back.
    durable_chunks: AtomicU64,
    durable_until: AtomicU64,
    lost: AtomicU64,
    cursor: AtomicU64,
    failed: AtomicBool,
}

impl RecordConfig {
    pub fn validate(&self) -> Result<(), RecordError> {
        let bad = |s: String| Err(RecordError::Config(s));
        if self.links == 0 {
            return bad("at least one link is needed".into());
        }
        if !(self.frames_per_s_per_link.is_finite() && self.frames_per_s_per_link > 0.0) {
            return bad("the rate per link must be more than 0".into());
        }
        if self.pre > self.buffer {
            return bad(format!(
                "--pre {:.1}s is longer than --buffer {:.1}s: the buffer cannot hold the data before the trigger",
                self.pre.as_secs_f64(),
                self.buffer.as_secs_f64()
            ));
        }
        if self.writers == 0 || self.writers as u32 > self.links {
            return bad(format!(
                "--writers must be between 1 and the number of links ({})",
                self.links
            ));
        }
        if self.chunk_frames == 0 {
            return bad("chunks need at least one frame".into());
        }
        if self.chunks_per_persist == 0 {
            return bad("--chunks-per-persist must be at least 1".into());
        }
        if self.buffer_frames() < 2 * self.chunk_frames as u64 {
            return bad(
                "the buffer must hold at least two chunks; raise --buffer or the rate".into(),
            );
        }
        if self.cpus.is_empty() {
            return bad("no CPU to run on".into());
        }
        snbuf_burst::burst_writer::check_burst_id(&self.burst_id)
            .map_err(|e| RecordError::Config(e.to_string()))?;
        Ok(())
    }

    pub fn buffer_frames(&self) -> u64 {
        (self.buffer.as_secs_f64() * self.frames_per_s_per_link).ceil() as u64
    }

    /// Emulated detector ticks per wall second.
    /// Detector ticks per wall-clock second: the frame type's clock scaled by the emulated rate.
    pub fn ticks_per_s(&self) -> f64 {
        self.frames_per_s_per_link * self.frame_type.ticks_per_frame() as f64
    }
}

/// When a trigger's window is centred.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TriggerAt {
    /// The newest frame buffered when the trigger arrives.
    Now,
    /// A detector timestamp (ticks). One older than the buffer records what is still there and
    /// counts the rest as lost.
    Timestamp(u64),
}

/// A running readout unit: links emulated into their latency buffers, ready for triggers.
pub struct Unit {
    config: RecordConfig,
    buffers: Vec<LatencyBuffer>,
    stop: Arc<AtomicBool>,
    source: Option<std::thread::JoinHandle<(u64, u64)>>,
    started: Instant,
    buffer_memory_bytes: u64,
    buffer_page_bytes: Option<u64>,
    /// The live counters of the burst being recorded, if one is.
    live: std::sync::Mutex<Option<Arc<Vec<LinkShared>>>>,
    /// The emulator thread's CPU clock.
    source_clock: Option<libc::clockid_t>,
    /// The longest a due frame waited for the emulator, in ns, since the last trigger.
    source_max_lag_ns: Arc<AtomicU64>,
    /// Whether the emulation thread could raise its priority (else writers lower theirs).
    links_favoured: Arc<AtomicBool>,
    /// The next burst's files, prepared ahead of its trigger.
    next: std::sync::Mutex<NextBurst>,
    /// Per link, what every finished burst made durable and lost (for counters that only grow).
    finished: std::sync::Mutex<Vec<LinkSums>>,
}

/// Sums over a link's finished bursts.
#[derive(Clone, Copy, Debug, Default)]
struct LinkSums {
    frames_out: u64,
    lost_frames: u64,
    durable_until_timestamp: Option<u64>,
}

/// One link over the unit's whole run: counters that only grow, across bursts (Prometheus
/// counters), and the newest durable timestamp of any burst.
#[derive(Clone, Copy, Debug, Default)]
pub struct LinkTotals {
    pub link: u32,
    pub frames_in: u64,
    pub frames_out: u64,
    pub lost_frames: u64,
    pub buffer_fill_frames: u64,
    pub backlog_frames: u64,
    pub durable_until_timestamp: Option<u64>,
    pub failed: bool,
}

impl Unit {
    /// Allocates and prefaults the buffers, and starts the links.
    pub fn start(config: &RecordConfig) -> Result<Unit, RecordError> {
        config.validate()?;
        let ft = config.frame_type;
        let fb = ft.frame_bytes() as usize;
        std::fs::create_dir_all(&config.output_dir).map_err(|e| {
            RecordError::Setup(format!(
                "create output directory {}: {e}",
                config.output_dir.display()
            ))
        })?;
        // Preparations a crashed process left hold no data; this unit's start preparing now.
        if let Err(e) = snbuf_burst::prepared::remove_stale(&config.output_dir) {
            return Err(RecordError::Setup(format!(
                "clean {}: {e}",
                config.output_dir.display()
            )));
        }
        let mut next = NextBurst::default();
        next.start(config, config.pre, config.post);
        let mut producers = Vec::new();
        let mut buffers: Vec<LatencyBuffer> = Vec::new();
        for link in 0..config.links {
            let (p, b) = latency_buffer(fb, config.buffer_frames(), config.page_size)
                .map_err(|e| RecordError::Setup(format!("latency buffer for link {link}: {e}")))?;
            producers.push((link, p));
            buffers.push(b);
        }
        let buffer_memory_bytes: u64 = buffers.iter().map(|b| b.memory_bytes()).sum();
        let buffer_page_bytes = buffers[0]
            .pages_obtained()
            .map(|p| p.effective_page_bytes());
        // The emulated detector clock runs at `ticks_per_s` (the frame type's clock, scaled by
        // the emulated rate) from the Unix epoch, with frame k due at k / rate seconds: units
        // started at different times with the same frame type and rate agree on time, so one
        // wall-clock trigger is the same window on all of them (the fleet relies on it). At a
        // link's native rate this is the detector clock itself.
        let fps = config.frames_per_s_per_link;
        let (anchor_ns, anchor) = (snbuf_burst::manifest::now_unix_ns(), Instant::now());
        let frame0 = (anchor_ns as f64 / 1e9 * fps).ceil();
        let until_frame0 =
            Duration::from_nanos((frame0 / fps * 1e9 - anchor_ns as f64).max(0.0) as u64);
        // The emulator makes frame k when k + 1 frame periods have passed since its start.
        let emulation_start = (anchor + until_frame0)
            .checked_sub(Duration::from_secs_f64(1.0 / fps))
            .unwrap_or(anchor);
        let first_ts = frame0 as u64 * ft.ticks_per_frame();
        let mut emulator = Emulator::new(
            ft,
            config.frames_per_s_per_link,
            config.payload.clone(),
            config.gaps,
            producers,
            first_ts,
        )
        .map_err(RecordError::Config)?;
        let stop = Arc::new(AtomicBool::new(false));
        let producer_cpu = config.cpus[0];
        let stop2 = stop.clone();
        let source_max_lag_ns = Arc::new(AtomicU64::new(0));
        let lag2 = source_max_lag_ns.clone();
        let links_favoured = Arc::new(AtomicBool::new(false));
        let favoured2 = links_favoured.clone();
        // Named threads, so `top -H` and profilers show which part of the unit is busy.
        let source = std::thread::Builder::new()
            .name("snbuf-links".into())
            .spawn(move || {
                let _ = cpu::pin_current_thread(producer_cpu);
                favoured2.store(
                    cpu::set_current_thread_nice(LINKS_NICE).is_ok(),
                    Ordering::Relaxed,
                );
                emulator.start_at(emulation_start);
                emulator.run(&stop2, &lag2);
                (emulator.produced_per_link(), emulator.skipped_per_link())
            })
            .map_err(|e| RecordError::Setup(format!("start the link emulation thread: {e}")))?;
        let source_clock = thread_clock(&source);
        Ok(Unit {
            config: config.clone(),
            buffers,
            stop,
            source_clock,
            source_max_lag_ns,
            links_favoured,
            source: Some(source),
            started: Instant::now(),
            buffer_memory_bytes,
            buffer_page_bytes,
            live: std::sync::Mutex::new(None),
            finished: std::sync::Mutex::new(vec![LinkSums::default(); config.links as usize]),
            next: std::sync::Mutex::new(next),
        })
    }

    pub fn config(&self) -> &RecordConfig {
        &self.config
    }

    /// Starts preparing the next burst's files for the configured window (see `next_burst`);
    /// `serve` calls this after each burst.
    pub fn prepare_next(&self) {
        self.next.lock().expect("next burst").start(
            &self.config,
            self.config.pre,
            self.config.post,
        );
    }

    /// The next burst's files: "ready", "preparing" or "none" (a trigger opens them itself).
    pub fn next_burst_state(&self) -> &'static str {
        self.next.lock().expect("next burst").state()
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

    /// The newest frame's timestamp on link 0: the unit's "now" in detector ticks.
    pub fn newest_timestamp(&self) -> Option<u64> {
        let b = &self.buffers[0];
        let mut f = vec![0u8; b.frame_bytes()];
        let w = b.written();
        if w == 0 {
            return None;
        }
        b.read(w - 1, &mut f).ok().map(|_| timestamp_of(&f))
    }

    /// Live figures of every link (of the burst being recorded, if any).
    pub fn progress(&self, phase: &'static str) -> Progress {
        let live = self.live.lock().expect("unit state").clone();
        Progress {
            phase,
            elapsed: self.started.elapsed(),
            links: self
                .buffers
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let written = b.written();
                    let s = live.as_ref().map(|s| &s[i]);
                    LinkProgress {
                        link: i as u32,
                        frames_in: written,
                        frames_out: s.map(|s| s.out.load(Ordering::Acquire)).unwrap_or(0),
                        durable_chunks: s
                            .map(|s| s.durable_chunks.load(Ordering::Acquire))
                            .unwrap_or(0),
                        durable_until_timestamp: s
                            .filter(|s| s.durable_chunks.load(Ordering::Acquire) > 0)
                            .map(|s| s.durable_until.load(Ordering::Acquire)),
                        lost_frames: s.map(|s| s.lost.load(Ordering::Relaxed)).unwrap_or(0),
                        buffer_fill_frames: b.fill_frames(),
                        // A failed link writes nothing more: nothing of it is at risk.
                        backlog_frames: s
                            .filter(|s| !s.failed.load(Ordering::Relaxed))
                            .map(|s| written.saturating_sub(s.cursor.load(Ordering::Relaxed)))
                            .unwrap_or(0),
                        failed: s.is_some_and(|s| s.failed.load(Ordering::Relaxed)),
                    }
                })
                .collect(),
        }
    }

    /// Every link over the whole run: finished bursts plus the one being recorded.
    pub fn totals(&self) -> Vec<LinkTotals> {
        let finished = self.finished.lock().expect("unit totals");
        let p = self.progress("totals");
        p.links
            .iter()
            .zip(finished.iter())
            .map(|(l, f)| LinkTotals {
                link: l.link,
                frames_in: l.frames_in,
                frames_out: f.frames_out + l.frames_out,
                lost_frames: f.lost_frames + l.lost_frames,
                buffer_fill_frames: l.buffer_fill_frames,
                backlog_frames: l.backlog_frames,
                durable_until_timestamp: l.durable_until_timestamp.or(f.durable_until_timestamp),
                failed: l.failed,
            })
            .collect()
    }

    /// Frames each link's buffer holds when full.
    pub fn buffer_capacity_frames(&self) -> u64 {
        self.config.buffer_frames()
    }

    /// The window a trigger at `at` records: whole frames from `pre` before to `post` after.
    /// Refused when nothing is buffered yet, or when `at` lies further ahead of the newest frame
    /// than the buffer is long (a clock mix-up, not a trigger: the burst would wait for data
    /// that is far away).
    pub fn window(
        &self,
        at: TriggerAt,
        pre: Duration,
        post: Duration,
    ) -> Result<TriggerInfo, String> {
        let step = self.config.frame_type.ticks_per_frame();
        let newest = self
            .newest_timestamp()
            .ok_or("no frame buffered yet to trigger on")?;
        let t = match at {
            TriggerAt::Now => newest,
            TriggerAt::Timestamp(t) => t,
        };
        let ahead_limit = (self.config.buffer.as_secs_f64() * self.config.ticks_per_s()) as u64;
        if t > newest.saturating_add(ahead_limit) {
            return Err(format!(
                "trigger at {t} is {:.1} s ahead of the newest frame ({newest}); at most the \
                 buffer's {:.1} s ahead is accepted",
                (t - newest) as f64 / self.config.ticks_per_s(),
                self.config.buffer.as_secs_f64()
            ));
        }
        let pre_ticks = (pre.as_secs_f64() * self.config.ticks_per_s()) as u64 / step * step;
        let post_ticks =
            ((post.as_secs_f64() * self.config.ticks_per_s()) as u64).div_ceil(step) * step;
        Ok(TriggerInfo {
            trigger_timestamp: t,
            window_start_timestamp: t.saturating_sub(pre_ticks),
            window_end_timestamp: t.saturating_add(post_ticks),
        })
    }

    /// Records one burst, blocking until its window is durable, sealed and verified. A trigger
    /// that arrives while another burst is being recorded is refused (not merged): each trigger
    /// is its own burst, and the caller can retry once the current one is sealed.
    pub fn trigger(
        &self,
        at: TriggerAt,
        pre: Duration,
        post: Duration,
        burst_id: &str,
        mut on_progress: impl FnMut(&Progress),
    ) -> Result<RecordReport, RecordError> {
        let config = &self.config;
        snbuf_burst::burst_writer::check_burst_id(burst_id)
            .map_err(|e| RecordError::Config(e.to_string()))?;
        if pre > config.buffer {
            return Err(RecordError::Config(format!(
                "pre {:.1}s is longer than the {:.1}s buffer",
                pre.as_secs_f64(),
                config.buffer.as_secs_f64()
            )));
        }
        let shared: Arc<Vec<LinkShared>> = Arc::new(
            (0..config.links)
                .map(|_| LinkShared {
                    out: AtomicU64::new(0),
                    durable_chunks: AtomicU64::new(0),
                    durable_until: AtomicU64::new(0),
                    lost: AtomicU64::new(0),
                    cursor: AtomicU64::new(0),
                    failed: AtomicBool::new(false),
                })
                .collect(),
        );
        {
            let mut live = self.live.lock().expect("unit state");
            if live.is_some() {
                return Err(RecordError::Busy);
            }
            *live = Some(shared.clone());
        }
        let result = self.record_window(at, pre, post, burst_id, &shared, &mut on_progress);
        {
            // Into the run's totals before the live counters go, under the same lock order
            // (finished, then live) as `totals`, so no reader sees a burst counted twice or not.
            let mut finished = self.finished.lock().expect("unit totals");
            for (sum, s) in finished.iter_mut().zip(shared.iter()) {
                sum.frames_out += s.out.load(Ordering::Acquire);
                sum.lost_frames += s.lost.load(Ordering::Acquire);
                if s.durable_chunks.load(Ordering::Acquire) > 0 {
                    sum.durable_until_timestamp = Some(s.durable_until.load(Ordering::Acquire));
                }
            }
            *self.live.lock().expect("unit state") = None;
        }
        result
    }

    fn record_window(
        &self,
        at: TriggerAt,
        pre: Duration,
        post: Duration,
        burst_id: &str,
        shared: &Arc<Vec<LinkShared>>,
        on_progress: &mut dyn FnMut(&Progress),
    ) -> Result<RecordReport, RecordError> {
        let config = &self.config;
        let ft = config.frame_type;
        let fb = ft.frame_bytes() as usize;
        let step = ft.ticks_per_frame();
        let window = self.window(at, pre, post).map_err(RecordError::Setup)?;

        // The burst: one sink per link, sized for the window (plus slack for partial chunks).
        let payload_bytes = config.chunk_frames as usize * fb;
        let window_frames =
            (window.window_end_timestamp - window.window_start_timestamp) / step + 1;
        let (region, stride) = link_region_bytes(config, window_frames);
        let spec = BurstSpec {
            burst_id: burst_id.to_string(),
            frame: FrameInfo {
                frame_type: ft.name(),
                frame_bytes: fb as u32,
                ticks_per_frame: step,
                clock_hz: ft.clock_hz(),
            },
            trigger: Some(window.clone()),
            method: config.method.name().to_string(),
            links: (0..config.links).collect(),
            max_payload_bytes: payload_bytes,
        };
        let prepared = self.next.lock().expect("next burst").take();
        let (burst, survives, prepared_ahead) = match prepared {
            Some(p) if p.region_bytes >= region && p.burst.fits(&spec) => {
                (p.burst.start(spec)?, p.survives_power_loss, true)
            }
            // Nothing prepared, or too small for this window (dropping it removes its files).
            _ => {
                let mut survives = true;
                let mut create = |region: u64| {
                    survives = true;
                    BurstWriter::create(&config.output_dir, spec.clone(), |link, path| {
                        // Reserve the space, but do not populate page tables now: that costs
                        // time in proportion to the window, and the pre-trigger data is ageing.
                        let sink = open_link_sink(config, link, path, region, stride, false)?;
                        survives &= sink.report().durability.survives_power_loss();
                        Ok(sink)
                    })
                };
                let burst = match create(region) {
                    Err(BurstError::Open {
                        cause: PersistError::NoSpace { .. },
                        ..
                    }) => {
                        // The disk cannot hold the whole window. A supernova burst is worth
                        // what fits: record into the space there is, and each link stops,
                        // failed with "full", when its share is used up.
                        let fits = space_for_each_link(config, stride);
                        if fits == 0 {
                            return Err(RecordError::Setup(format!(
                                "{}: no space left for even one chunk per link",
                                config.output_dir.display()
                            )));
                        }
                        let _ = writeln!(
                            std::io::stderr(),
                            "snbuf: {} has room for {} per link of the {} this window needs; \
                             each link stops when its share is full",
                            config.output_dir.display(),
                            snbuf_units::Bytes(fits),
                            snbuf_units::Bytes(region)
                        );
                        create(fits)?
                    }
                    other => other?,
                };
                (burst, survives, false)
            }
        };
        let (seal, link_writers) = burst.split();

        let mut per_writer: Vec<Vec<DynLink>> = (0..config.writers).map(|_| Vec::new()).collect();
        for lw in link_writers {
            per_writer[lw.link() as usize % config.writers].push(lw);
        }
        let trigger_instant = Instant::now();
        self.source_max_lag_ns.store(0, Ordering::Relaxed);
        let source_cpu0 = self.source_clock.map(cpu_seconds).unwrap_or(0.0);
        let mut handles = Vec::new();
        for (w, links) in per_writer.into_iter().enumerate() {
            let cpu_id = config.cpus[(1 + w) % config.cpus.len()];
            let links_favoured = self.links_favoured.load(Ordering::Relaxed);
            let bufs: Vec<LatencyBuffer> = links
                .iter()
                .map(|l| self.buffers[l.link() as usize].clone())
                .collect();
            let shared = shared.clone();
            let job = WindowJob {
                window: window.clone(),
                step,
                chunk_frames: config.chunk_frames,
                chunks_per_persist: config.chunks_per_persist,
                frames_per_s: config.frames_per_s_per_link,
            };
            let spawned = std::thread::Builder::new()
                .name(format!("snbuf-writer{w}"))
                .spawn(move || {
                    let _ = cpu::pin_current_thread(cpu_id);
                    if !links_favoured {
                        let _ = cpu::set_current_thread_nice(WRITERS_NICE);
                    }
                    let cpu0 = cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID);
                    let links = write_window(links, &bufs, &shared, &job);
                    (links, cpu_seconds(libc::CLOCK_THREAD_CPUTIME_ID) - cpu0)
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // Let the running writers finish what they persist; the burst is left
                    // unsealed, which `snbuf recover` turns into a valid one.
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(RecordError::Setup(format!(
                        "start writer thread {w}: {e}; the burst is unsealed, run `snbuf recover`"
                    )));
                }
            }
        }
        let mut status = config
            .status_file
            .as_deref()
            .map(|p| (StatusFile::new(p), Instant::now()));
        let dir = seal.dir().to_path_buf();
        let mut report_status = |phase: &'static str, force: bool| {
            if let Some((file, last)) = status.as_mut() {
                if force || last.elapsed() >= STATUS_FILE_INTERVAL {
                    *last = Instant::now();
                    if let Err(e) = file.write(burst_id, Some(&dir), &self.progress(phase)) {
                        // A reporting channel, not the data: recording goes on without it.
                        let _ = writeln!(
                            std::io::stderr(),
                            "snbuf: status file: {e}; it is no longer updated"
                        );
                        status = None;
                    }
                }
            }
        };
        report_status("recording", true);
        let mut next_tick = Instant::now() + Duration::from_secs(1);
        while handles.iter().any(|h| !h.is_finished()) {
            std::thread::sleep(Duration::from_millis(20));
            report_status("recording", false);
            if Instant::now() >= next_tick {
                on_progress(&self.progress("recording"));
                next_tick += Duration::from_secs(1);
            }
        }
        let mut links: Vec<DynLink> = Vec::new();
        let mut writer_cpu_s = 0.0;
        for h in handles {
            let (l, cpu) = h
                .join()
                .map_err(|_| RecordError::Setup("a writer thread panicked".into()))?;
            links.extend(l);
            writer_cpu_s += cpu;
        }
        let writing_s = trigger_instant.elapsed().as_secs_f64();
        let source_cpu_s = self.source_clock.map(cpu_seconds).unwrap_or(0.0) - source_cpu0;
        let source_max_lag_s = self.source_max_lag_ns.load(Ordering::Relaxed) as f64 * 1e-9;
        on_progress(&self.progress("sealing"));
        report_status("sealing", true);

        let manifest = seal.seal(links)?;
        report_status("sealed", true);
        let durability = manifest.durability.clone();
        let verify = verify_burst(&dir).map_err(|e| RecordError::Setup(e.to_string()))?;
        let frames_recorded: u64 = manifest.links.iter().map(|l| l.frames).sum();
        let lost_frames: u64 = manifest.links.iter().map(|l| l.lost_frames).sum();
        let produced = self.buffers[0].written();
        Ok(RecordReport {
            burst_dir: dir,
            output_bytes_per_s: frames_recorded as f64 * fb as f64 / writing_s,
            frames_recorded,
            lost_frames,
            manifest,
            verify,
            window,
            frame_bytes: fb as u32,
            input_bytes_per_s: produced as f64 * fb as f64 * config.links as f64
                / self.started.elapsed().as_secs_f64(),
            buffer_memory_bytes: self.buffer_memory_bytes,
            buffer_page_bytes: self.buffer_page_bytes,
            durability,
            survives_power_loss: survives,
            prepared_ahead,
            skipped_at_source: 0,
            source_max_lag_s,
            writer_cpu_s,
            source_cpu_s,
        })
    }

    /// Stops the links; returns frames produced and frames skipped (producer late) per link.
    pub fn stop(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.source
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or((0, 0))
    }
}

impl Drop for Unit {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.source.take() {
            let _ = h.join();
        }
        // An unused preparation removes its files when dropped.
        if let Ok(mut next) = self.next.lock() {
            next.take();
        }
    }
}

/// A self-contained recording: start the unit, buffer for `trigger_after`, trigger, record the
/// window, seal, verify, stop.
pub fn record(
    config: &RecordConfig,
    mut on_progress: impl FnMut(&Progress),
) -> Result<RecordReport, RecordError> {
    let unit = Unit::start(config)?;
    let trigger_at = Instant::now() + config.trigger_after;
    let mut next_tick = Instant::now() + Duration::from_secs(1);
    let status = config.status_file.as_deref().map(StatusFile::new);
    let mut status_written = Instant::now() - STATUS_FILE_INTERVAL;
    // The trigger fires after `trigger_after`, once the burst's files are prepared: a unit is
    // armed when it can start persisting at once.
    loop {
        let due = Instant::now() >= trigger_at;
        let preparing = unit.next.lock().expect("next burst").is_preparing();
        if due && !preparing {
            break;
        }
        std::thread::sleep(
            Duration::from_millis(20)
                .min(trigger_at.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(if due { 5 } else { 0 })),
        );
        let phase = if due { "preparing" } else { "buffering" };
        if let Some(file) = &status {
            if status_written.elapsed() >= STATUS_FILE_INTERVAL {
                status_written = Instant::now();
                // Failures are reported once the burst records (same file, same error).
                let _ = file.write(&config.burst_id, None, &unit.progress(phase));
            }
        }
        if Instant::now() >= next_tick {
            on_progress(&unit.progress(phase));
            next_tick += Duration::from_secs(1);
        }
    }
    let mut report = unit.trigger(
        TriggerAt::Now,
        config.pre,
        config.post,
        &config.burst_id,
        &mut on_progress,
    )?;
    let (_, skipped) = unit.stop();
    report.skipped_at_source = skipped;
    Ok(report)
}

/// Bytes of file each link can have on the output's file system now (a whole number of chunk
/// strides and pages), keeping a twentieth of the free space for the manifest and other files.
fn space_for_each_link(config: &RecordConfig, stride: u64) -> u64 {
    let free = snbuf_persist::medium::free_bytes(&config.output_dir).unwrap_or(0);
    let share = free / 20 * 19 / config.links as u64;
    let page = config.page_size.bytes() as u64;
    share / stride * stride / page * page
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

/// Where a link's writer is in the window.
struct Cursor {
    /// Sequence number of the next frame to read from the buffer.
    next: Option<u64>,
    /// Timestamp the next frame of the window should have (None before the first frame is read).
    expect_ts: Option<u64>,
    /// Frames appended to the burst but not yet acknowledged by a persist, and the timestamp of
    /// the newest of them.
    pending_frames: u64,
    pending_until: u64,
    /// Window frames counted lost since the last persist (behind the durable watermark's
    /// successor, so a failure does not count them twice).
    lost_pending: u64,
    done: bool,
}

/// Persists what `lw` has pending and counts it as durable; on failure the link is failed and
/// done (its error is in its manifest record). Returns false on failure.
fn flush(lw: &mut DynLink, c: &mut Cursor, s: &LinkShared) -> bool {
    let chunks = lw.pending_chunks();
    if chunks == 0 {
        return true;
    }
    match lw.persist() {
        Ok(_) => {
            // Only now is the watermark raised: a status reader never sees a chunk as durable
            // before its persist returned.
            s.durable_chunks.fetch_add(chunks, Ordering::Release);
            s.durable_until.store(c.pending_until, Ordering::Release);
            s.out.fetch_add(c.pending_frames, Ordering::Release);
            c.pending_frames = 0;
            c.lost_pending = 0;
            true
        }
        Err(_) => {
            s.failed.store(true, Ordering::Relaxed);
            c.done = true;
            false
        }
    }
}

/// Stops a link on a write error; the others go on. A full file refused the chunk before writing
/// anything, so what was appended before is made durable first; any other error has already
/// failed the link (latched, in its manifest record).
fn fail_link(lw: &mut DynLink, c: &mut Cursor, s: &LinkShared, e: WriteError) {
    if matches!(e, WriteError::Full { .. }) && flush(lw, c, s) {
        lw.fail(&e);
    }
    s.failed.store(true, Ordering::Relaxed);
    c.done = true;
}

/// Persists the window of each of `links` (reading from `bufs`, same order); returns the links.
///
/// Loss is counted by timestamps: whenever frames are read, any window frames between the
/// timestamp expected next and the first one present are lost (overwritten in the buffer before
/// the writer got to them, before the buffer's start, or never produced by the link). So only
/// frames inside the window are ever counted, however far a slow writer falls behind.
/// A caught-up writer sleeps at least this long (no busy polling) and at most this long (a link
/// that runs ahead of its rate fills a chunk sooner; 5 ms of backlog is far inside any buffer).
const MIN_IDLE_SLEEP: Duration = Duration::from_micros(200);
const MAX_IDLE_SLEEP: Duration = Duration::from_millis(5);

/// What every writer of a burst needs to know about the window and its chunks.
#[derive(Clone)]
struct WindowJob {
    window: TriggerInfo,
    step: u64,
    chunk_frames: u32,
    chunks_per_persist: u32,
    /// Frames per second a link produces: how long until a chunk fills.
    frames_per_s: f64,
}

fn write_window(
    mut links: Vec<DynLink>,
    bufs: &[LatencyBuffer],
    shared: &[LinkShared],
    job: &WindowJob,
) -> Vec<DynLink> {
    let WindowJob {
        ref window,
        step,
        chunk_frames,
        chunks_per_persist,
        frames_per_s,
    } = *job;
    let mut cursors: Vec<Cursor> = links
        .iter()
        .map(|_| Cursor {
            next: None,
            expect_ts: None,
            pending_frames: 0,
            pending_until: 0,
            lost_pending: 0,
            done: false,
        })
        .collect();
    let (ws, we) = (window.window_start_timestamp, window.window_end_timestamp);
    // Window frames in [from, to) on the frame grid that starts at `from`.
    let frames_between = |from: u64, to: u64| {
        if to > from {
            (to - from).div_ceil(step)
        } else {
            0
        }
    };
    while cursors.iter().any(|c| !c.done) {
        let mut progressed = false;
        // The fewest frames any link still needs for a full chunk: how long to sleep.
        let mut fewest_missing = chunk_frames as u64;
        for (i, lw) in links.iter_mut().enumerate() {
            let c = &mut cursors[i];
            if c.done {
                continue;
            }
            let buf = &bufs[i];
            let s = &shared[lw.link() as usize];
            let count_lost = |lw: &mut DynLink, c: &mut Cursor, n: u64| {
                if n > 0 {
                    lw.add_lost_frames(n);
                    s.lost.fetch_add(n, Ordering::Relaxed);
                    c.lost_pending += n;
                }
            };
            let next = *c.next.get_or_insert_with(|| {
                let n = match buf.find_timestamp(ws, step) {
                    Lookup::At(n) => n,
                    Lookup::After { next } => next,
                    // The window starts before the buffer does: start at what is left; the
                    // shortfall is counted when the first frame is read.
                    Lookup::BeforeOldest { oldest } => oldest,
                };
                s.cursor.store(n, Ordering::Relaxed);
                n
            });
            // Wait for a full chunk unless the window's end is already buffered.
            let written = buf.written();
            let available = written.saturating_sub(next);
            if available == 0 {
                // Nothing new to write: acknowledge what is pending rather than sit on it.
                flush(lw, c, s);
                continue;
            }
            if available < chunk_frames as u64 {
                let newest_ts = buf
                    .read_with(written - 1, 1, |run| timestamp_of(run.frame(0)))
                    .map(|(_, ts)| ts)
                    .unwrap_or(0);
                if newest_ts < we {
                    flush(lw, c, s);
                    fewest_missing = fewest_missing.min(chunk_frames as u64 - available);
                    continue;
                }
            }
            // The frames go from the ring straight to where the chunk is written (one copy),
            // staged: they count only if the ring says afterwards that they were not overwritten
            // while being copied.
            let read = buf.read_with(next, available.min(chunk_frames as u64), |run| {
                let n = run.frames();
                // Frames before the window (a window that starts in the future) are passed over.
                let before = (0..n)
                    .take_while(|&i| timestamp_of(run.frame(i)) < ws)
                    .count();
                let inside = (before..n)
                    .take_while(|&i| timestamp_of(run.frame(i)) < we)
                    .count();
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
                Batch {
                    before,
                    inside,
                    first: timestamp_of(run.frame(before)),
                    last: timestamp_of(run.frame(before + inside - 1)),
                    staged: lw.stage(&parts[..k]),
                }
            });
            let (n, batch) = match read {
                Ok(r) => r,
                Err(ReadError::Overwritten { oldest }) => {
                    // Overwritten before this writer got to them: resume at the oldest frame
                    // left; the frames skipped are counted (by timestamp) at the next read. What
                    // was staged is discarded (no header points at it).
                    c.next = Some(oldest);
                    s.cursor.store(oldest, Ordering::Relaxed);
                    progressed = true;
                    continue;
                }
                Err(ReadError::NotYet) => {
                    flush(lw, c, s);
                    continue;
                }
            };
            progressed = true;
            let Batch {
                before,
                inside,
                first,
                last,
                staged,
            } = batch;
            if inside == 0 {
                if before == n {
                    c.next = Some(next + n as u64);
                    s.cursor.store(next + n as u64, Ordering::Relaxed);
                    continue;
                }
                // The next frame present is past the window: whatever was expected is lost.
                count_lost(lw, c, frames_between(c.expect_ts.unwrap_or(ws), we));
                if !flush(lw, c, s) {
                    continue;
                }
                c.done = true;
                s.cursor.store(u64::MAX, Ordering::Relaxed);
                continue;
            }
            if let Err(e) = staged {
                fail_link(lw, c, s, e);
                continue;
            }
            // Window frames missing before this batch. The first read counts from the window's
            // start (floor: the first frame present fixes the grid).
            let missing = match c.expect_ts {
                Some(e) => frames_between(e, first.min(we)),
                None => first.saturating_sub(ws) / step,
            };
            count_lost(lw, c, missing);
            if let Err(e) = lw.append_staged(first, last) {
                fail_link(lw, c, s, e);
                continue;
            }
            c.pending_frames += inside as u64;
            c.pending_until = last;
            // One persist per group of chunks: fewer flushes, several writes in flight.
            if lw.pending_chunks() >= chunks_per_persist as u64 && !flush(lw, c, s) {
                continue;
            }
            c.expect_ts = Some(last + step);
            let consumed = (before + inside) as u64;
            c.next = Some(next + consumed);
            s.cursor.store(next + consumed, Ordering::Relaxed);
            if before + inside < n {
                // A frame at or past the window's end is buffered: the window is complete.
                count_lost(lw, c, frames_between(last + step, we));
                if !flush(lw, c, s) {
                    continue;
                }
                c.done = true;
                s.cursor.store(u64::MAX, Ordering::Relaxed);
            }
        }
        if !progressed {
            // Caught up: sleep until the first link could have a full chunk, not in short
            // polls. With ten writers on two cores, 200 us polls cost more CPU in context
            // switches than the copies did. Bounded both ways: a link may run ahead of its
            // nominal rate (a producer catching up), and the window's end may arrive sooner.
            let until_chunk = Duration::from_secs_f64(fewest_missing as f64 / frames_per_s);
            std::thread::sleep(until_chunk.clamp(MIN_IDLE_SLEEP, MAX_IDLE_SLEEP));
        }
    }
    // A failed link loses the rest of its window: every frame after its durable watermark that
    // is not already counted. Loss stays explicit, whatever stopped the link.
    for (lw, c) in links.iter_mut().zip(&cursors) {
        let s = &shared[lw.link() as usize];
        if !s.failed.load(Ordering::Relaxed) {
            continue;
        }
        let from = if s.durable_chunks.load(Ordering::Relaxed) > 0 {
            s.durable_until.load(Ordering::Relaxed) + step
        } else {
            ws
        };
        let n = frames_between(from, we).saturating_sub(c.lost_pending);
        if n > 0 {
            lw.add_lost_frames(n);
            s.lost.fetch_add(n, Ordering::Relaxed);
        }
    }
    links
}
