//! The control endpoint of a long-running unit (`snbuf serve`): a Unix socket, mode 0600, so
//! only its owner on this host can trigger it. One request per connection, one JSON line each
//! way, at most 64 KiB; a malformed request gets an error reply, never a crash.
//!
//! Requests and replies are typed in `protocol`:
//! - `{"cmd":"trigger","at":"now"|TICKS,"pre_s":2.0,"post_s":3.0,"burst_id":"..."}` → accepted at
//!   once with the window decided then (`TriggerReply`), recorded in the background. While a
//!   burst is being recorded, one whose window begins at or after that burst's start joins it
//!   (`joined` in the reply); one that comes as it ends opens a burst of its own once its
//!   writers are done; one whose window begins before it is refused.
//! - `{"cmd":"status"}` → the unit, its links as measured, the burst being recorded (live per
//!   link, with each link's durable watermark) and the last 100 bursts (`UnitStatus`).
//! - `{"cmd":"shutdown"}` → stops once the burst in progress, if any, is sealed.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::protocol::{
    At, BurstOutcome, IngestStatus, LinkStatus, OutcomeState, RecordingBurst, Refusal, Request,
    TriggerReply, TriggerRequest, UnitStatus,
};
use crate::recorder::Unit;
use crate::server::trigger_check::{self, CheckedTrigger, Refusals};

pub const MAX_REQUEST_BYTES: u64 = 64 << 10;
/// Connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// How long a client may take to send its request or read the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The bursts `status` reports: the most recent ones (bounded, since a unit runs for months)
/// and how many there were in all.
#[derive(Default)]
struct BurstHistory {
    recent: std::collections::VecDeque<BurstOutcome>,
    total: u64,
    /// Bursts by final state (`sealed`, `failed`, `recovered`, `error`), over the whole run.
    by_state: std::collections::BTreeMap<OutcomeState, u64>,
    /// Seconds of accepted windows the buffers no longer held (`TriggerInfo::not_buffered_s`).
    not_buffered_s: f64,
}

/// How many past bursts `status` lists.
const MAX_BURSTS_SHOWN: usize = 100;
/// How long a trigger that comes before the first frame (a unit just started, a source not yet
/// flowing) waits for one before it is refused: a trigger sent right after `serve` starts is
/// taken, not lost to the few milliseconds the links take to deliver their first frame.
pub const FIRST_FRAME_WAIT: Duration = Duration::from_secs(2);

impl BurstHistory {
    /// A burst is over: counted, and kept among the recent ones.
    fn push(&mut self, outcome: BurstOutcome) {
        self.total += 1;
        *self.by_state.entry(outcome.state).or_default() += 1;
        if self.recent.len() == MAX_BURSTS_SHOWN {
            self.recent.pop_front();
        }
        self.recent.push_back(outcome);
    }
}

pub struct Server {
    unit: Arc<Unit>,
    socket: PathBuf,
    listener: UnixListener,
    bursts: Arc<Mutex<BurstHistory>>,
    shutdown: Arc<AtomicBool>,
    /// Set when a trigger is accepted, before its recording thread starts, so that a second
    /// trigger right behind it is refused; cleared when the burst is sealed.
    busy: Arc<AtomicBool>,
    /// The burst being recorded, while `busy`: with its window, for live views.
    current: Arc<Mutex<Option<RecordingBurst>>>,
    counter: Mutex<u64>,
    refusals: Refusals,
}

/// Why a trigger was not taken. `busy`: a burst in progress is what stands in its way (it could
/// not join it, or it is ending), so the same trigger may be taken once that burst's writers are
/// done; a caller that waits (the fleet) tries again rather than giving it up.
#[derive(Clone, Debug)]
pub struct Refused {
    pub why: String,
    pub busy: bool,
}

impl From<String> for Refused {
    fn from(why: String) -> Refused {
        Refused { why, busy: false }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{path}: an snbuf server is already listening there")]
    AlreadyRunning { path: PathBuf },
    #[error("{path}: {cause}")]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("no snbuf server at {path} ({cause}); start one with `snbuf serve`")]
    NotRunning {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("the server at {path} answered something that is not a reply: {what}")]
    BadReply { path: PathBuf, what: String },
    #[error("the server refused: {0}")]
    Refused(String),
}

impl Server {
    /// Binds the socket (replacing a stale one left by a dead server, never a live one).
    pub fn bind(unit: Unit, socket: &Path) -> Result<Server, ControlError> {
        if socket.exists() {
            if UnixStream::connect(socket).is_ok() {
                return Err(ControlError::AlreadyRunning {
                    path: socket.to_path_buf(),
                });
            }
            std::fs::remove_file(socket).map_err(|cause| ControlError::Io {
                path: socket.to_path_buf(),
                cause,
            })?;
        }
        let listener = UnixListener::bind(socket).map_err(|cause| ControlError::Io {
            path: socket.to_path_buf(),
            cause,
        })?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600)).map_err(
            |cause| ControlError::Io {
                path: socket.to_path_buf(),
                cause,
            },
        )?;
        Ok(Server {
            unit: Arc::new(unit),
            socket: socket.to_path_buf(),
            listener,
            bursts: Arc::new(Mutex::new(BurstHistory::default())),
            shutdown: Arc::new(AtomicBool::new(false)),
            busy: Arc::new(AtomicBool::new(false)),
            current: Arc::new(Mutex::new(None)),
            counter: Mutex::new(0),
            refusals: Refusals::default(),
        })
    }

    pub fn unit(&self) -> &Unit {
        &self.unit
    }

    /// Recovers, in the background, every burst a stopped unit left unsealed in the output
    /// (`interrupted`): the unit takes triggers meanwhile (recovering a large burst reads all
    /// of it). Each recovered one counts as a finished burst (state `recovered`), so the log,
    /// `status`, the fleet's events and the exporter see it as they see any other; one that
    /// could not be recovered is logged and left as it was. Returns the thread, which ends
    /// when all are done, with how many were recovered.
    pub fn recover_interrupted(&self) -> std::io::Result<std::thread::JoinHandle<usize>> {
        let config = self.unit.config();
        let (output, hz) = (config.output_dir.clone(), config.clock().hz());
        let found = crate::interrupted::find(&output);
        if !found.is_empty() {
            tracing::warn!(
                bursts = found.len(),
                "bursts interrupted when the unit last stopped: recovering them"
            );
        }
        let bursts = self.bursts.clone();
        std::thread::Builder::new()
            .name("snbuf-recover".into())
            .spawn(move || {
                let mut recovered = 0;
                for dir in found {
                    let outcome = crate::interrupted::recover_one(&dir, Some(hz));
                    if outcome.state != OutcomeState::Error {
                        recovered += 1;
                        bursts.lock().expect("bursts").push(outcome);
                    }
                }
                recovered
            })
    }

    /// Stops taking triggers and ends `run` once the burst in progress is sealed (a drain):
    /// what SIGTERM and `{"cmd":"shutdown"}` do.
    pub fn begin_shutdown(&self) {
        self.shutdown.store(true, Ordering::Release);
        // Wake the accept loop so that it sees the shutdown.
        let _ = UnixStream::connect(&self.socket);
    }

    pub fn stopping(&self) -> bool {
        self.shutdown.load(Ordering::Acquire)
    }

    /// The burst being recorded, and its window.
    pub fn recording(&self) -> Option<RecordingBurst> {
        self.current.lock().expect("current").clone()
    }

    /// Serves requests until a shutdown request, then waits for the burst in progress.
    ///
    /// Each connection is served on its own thread, at most `MAX_CLIENTS` at once (one more is
    /// told to retry): a client that connects and says nothing holds only itself, for at most
    /// `CLIENT_TIMEOUT`, never a trigger behind it.
    pub fn run(&self) {
        let active = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for stream in self.listener.incoming() {
                if self.shutdown.load(Ordering::Acquire) {
                    break;
                }
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
                let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
                if active.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                    active.fetch_sub(1, Ordering::AcqRel);
                    let busy = format!("{MAX_CLIENTS} clients are being served; retry");
                    let _ = writeln!(stream, "{}", Refusal::json(busy));
                    continue;
                }
                let active = &active;
                let spawned = std::thread::Builder::new()
                    .name("snbuf-control".into())
                    .spawn_scoped(scope, move || {
                        let reply = match read_request(&mut stream) {
                            Ok(req) => self.handle_contained(&req),
                            Err(e) => Refusal::json(e),
                        };
                        let _ = writeln!(stream, "{reply}");
                        active.fetch_sub(1, Ordering::AcqRel);
                        if self.shutdown.load(Ordering::Acquire) {
                            // Wake the accept loop so that it sees the shutdown.
                            let _ = UnixStream::connect(&self.socket);
                        }
                    });
                if spawned.is_err() {
                    active.fetch_sub(1, Ordering::AcqRel);
                }
            }
        });
        // The drain: the burst being recorded, and every burst still being sealed. Bounded by
        // whoever drains (the service's drain timeout); a writer stuck in the kernel is given
        // up by the watchdog.
        while self.busy.load(Ordering::Acquire) || !self.unit.sealing().is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.unit.wind_down();
        let _ = std::fs::remove_file(&self.socket);
    }

    /// `handle`, a panic while answering caught: the request is refused with the panic's
    /// message and logged, and the accept loop and its count of clients go on (before, each
    /// such panic held a client slot for good, and ended the process at shutdown). What the
    /// panic left half-done is not undone: state it changed stays as it was left.
    fn handle_contained(&self, req: &Value) -> Value {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.handle(req))) {
            Ok(reply) => reply,
            Err(panic) => {
                let why = crate::error::panic_text(&*panic);
                tracing::error!(request = %req, "a request failed inside the server: {why}");
                Refusal::json(format!(
                    "the server failed on this request ({why}); it goes on"
                ))
            }
        }
    }

    /// Answers one request (as the control socket does): the socket's JSON in, JSON out.
    pub fn handle(&self, req: &Value) -> Value {
        let request = match Request::parse(req) {
            Ok(r) => r,
            Err(e) => return Refusal::json(e),
        };
        let to_json = |v: Result<Value, serde_json::Error>| v.expect("replies serialise");
        match request {
            Request::Status => to_json(serde_json::to_value(self.status())),
            Request::Shutdown => {
                tracing::info!("shutdown requested");
                self.begin_shutdown();
                json!({"ok": true})
            }
            Request::Cancel(c) => match self.cancel(&c.burst_id) {
                Ok(reply) => to_json(serde_json::to_value(reply)),
                Err(e) => Refusal::json(e),
            },
            Request::Trigger(t) => match self.trigger(&t) {
                Ok(reply) => to_json(serde_json::to_value(reply)),
                Err(e) => Refusal::json(e),
            },
        }
    }

    /// Takes a trigger: decides its window now, from what the buffers hold, and records that
    /// window in the background (the window replied is the one recorded and the one in the
    /// manifest). Refused, with the reason, when it cannot be recorded.
    ///
    /// One that comes before any frame (a unit just started, a source not yet flowing) waits
    /// for the first, at most `FIRST_FRAME_WAIT`, when that is all that stands in its way.
    pub fn trigger(&self, req: &TriggerRequest) -> Result<TriggerReply, String> {
        if self.unit.newest_timestamp().is_none()
            && trigger_check::check(&self.unit, req, false).err()
                == Some(crate::window::WindowError::NothingBuffered.to_string())
        {
            self.wait_for_first_frame(FIRST_FRAME_WAIT);
        }
        self.trigger_as(req, true).map_err(|r| r.why)
    }

    /// As `trigger`, for a caller that tries again while a burst is in the way (the fleet): that
    /// refusal is neither counted nor logged each time it is tried; every other is.
    pub fn trigger_or_wait(&self, req: &TriggerRequest) -> Result<TriggerReply, Refused> {
        self.trigger_as(req, false)
    }

    /// A refusal decided outside (the fleet's own checks), counted and logged as any other.
    pub fn count_refusal(&self, why: &str) {
        let unit_id = self.unit.config().unit_id.clone().unwrap_or_default();
        self.refusals.refused(&unit_id, why);
    }

    fn trigger_as(&self, req: &TriggerRequest, count_busy: bool) -> Result<TriggerReply, Refused> {
        let unit_id = self.unit.config().unit_id.clone().unwrap_or_default();
        // The socket's caller waits for a burst that is ending; the fleet waits on its own task.
        match self.accept(req, count_busy) {
            Ok(reply) => {
                tracing::info!(
                    unit = %unit_id,
                    burst = %reply.burst_id,
                    window = ?reply.window,
                    cut = ?reply.cut,
                    "trigger accepted"
                );
                Ok(reply)
            }
            Err(e) => {
                if count_busy || !e.busy {
                    self.refusals.refused(&unit_id, &e.why);
                }
                Err(e)
            }
        }
    }

    /// The one check of a trigger, the socket's and the fleet's (`trigger_check`), with what
    /// only the server knows: whether it is stopping, and the bursts it already has.
    pub fn check_trigger(&self, req: &TriggerRequest) -> Result<CheckedTrigger, String> {
        if self.stopping() {
            return Err("the unit is stopping: it takes no more triggers".into());
        }
        let config = self.unit.config();
        let busy = self.busy.load(Ordering::Acquire);
        let checked = trigger_check::check(&self.unit, req, !busy)?;
        if let Some(id) = &req.burst_id {
            // A burst this trigger opened or joined (an earlier run's, or this one's): it was
            // recorded. Anything else of that name in the output (the unit's socket, its
            // journal, another trigger's burst) is no answer to it: its burst is named apart
            // (`burst_name_for`).
            match snbuf_burst::names::burst_answering(&config.output_dir, id) {
                Some(b) if b == *id => return Err(format!("burst {id} already exists")),
                Some(b) => return Err(format!("trigger {id} was already recorded, in burst {b}")),
                None => {}
            }
            // One that joined a burst already sealed is refused; one that joined the burst
            // being recorded gets its answer again (`join`).
            let recording = self.recording().map(|r| r.burst_id);
            if let Some(b) = self
                .answered_by(id)
                .filter(|b| Some(b) != recording.as_ref())
            {
                return Err(format!("trigger {id} was already recorded, in burst {b}"));
            }
        }
        Ok(checked)
    }

    /// Waits, at most `bound`, until some link has buffered a frame (at once when one has), so
    /// that a window can be placed; the check that follows refuses the trigger if none came.
    fn wait_for_first_frame(&self, bound: Duration) {
        let give_up_at = Instant::now() + bound;
        while self.unit.newest_timestamp().is_none() && !self.stopping() {
            if Instant::now() >= give_up_at {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Triggers refused since the unit started.
    pub fn refused_total(&self) -> u64 {
        self.refusals.total()
    }

    /// `wait_for_ending`: whether to wait here for a burst that is ending (the socket), or to be
    /// refused as busy at once and try again (the fleet, whose waits must not block).
    fn accept(&self, req: &TriggerRequest, wait_for_ending: bool) -> Result<TriggerReply, Refused> {
        let CheckedTrigger { window, cut } = self.check_trigger(req)?;
        let config = self.unit.config();
        // Decided again below when the unit changed meanwhile, at the moment decided now: a
        // trigger "at now" that waited for a burst to end keeps its own moment.
        let pinned = TriggerRequest {
            at: Some(At::Ticks(window.trigger_timestamp)),
            ..req.clone()
        };
        if self.busy.load(Ordering::Acquire) {
            match self.join(req, window, wait_for_ending)? {
                Some(joined) => return Ok(joined),
                // The burst ended as this trigger came: checked again, as one of its own.
                None => return self.accept(&pinned, wait_for_ending),
            }
        }
        let trigger_id = match &req.burst_id {
            Some(id) => id.clone(),
            None => self.next_burst_id(),
        };
        snbuf_burst::check_burst_id(&trigger_id).map_err(|e| e.to_string())?;
        let burst_id = burst_name_for(&config.output_dir, &trigger_id)?;
        // Connections are served concurrently: the check above was a quick refusal, this is
        // the one that counts (only one trigger can take the unit).
        if self
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another trigger took the unit first: this one may join its burst.
            return self.accept(&pinned, wait_for_ending);
        }
        if let Some(s) = window.not_buffered_s {
            tracing::warn!(
                burst = %burst_id,
                "the window reaches {s:.3} s further back than the latency buffers hold: recording what is there, the rest counted lost"
            );
            self.bursts.lock().expect("bursts").not_buffered_s += s;
        }
        *self.current.lock().expect("current") = Some(RecordingBurst {
            burst_id: burst_id.clone(),
            window: window.clone(),
        });
        let mut first = snbuf_burst::AnsweredTrigger::whole(&trigger_id, &window);
        if let Some(c) = &cut {
            // The trigger asked for more than is recorded: the manifest keeps both.
            first.window_end_timestamp = c.asked_end;
        }
        if let Err(e) = self.record_in_background(&burst_id, window.clone(), first) {
            *self.current.lock().expect("current") = None;
            self.busy.store(false, Ordering::Release);
            return Err(format!("start the recording thread: {e}").into());
        }
        Ok(TriggerReply {
            ok: true,
            burst_id,
            window_s: window.length_s().unwrap_or(0.0),
            window,
            joined: None,
            cut: cut.map(|c| c.why),
        })
    }

    /// The burst of this run that answered trigger `id` by joining it (the one being recorded, or
    /// one of the last `MAX_BURSTS_SHOWN`), if any: a trigger delivered again is not recorded
    /// twice.
    pub fn answered_by(&self, id: &str) -> Option<String> {
        // The unit first (recording or sealing), then the history: a burst is kept in the
        // history before the unit forgets it, so one of the two always has it.
        if let Some(burst) = self.unit.answering(id) {
            return Some(burst);
        }
        let h = self.bursts.lock().expect("bursts");
        h.recent
            .iter()
            .find(|b| b.triggers.iter().any(|t| t == id))
            .map(|b| b.burst_id.clone())
    }

    /// The next burst id of this unit's own (`BURST-0001`, ...).
    fn next_burst_id(&self) -> String {
        let mut n = self.counter.lock().expect("counter");
        *n += 1;
        format!("{}-{:04}", self.unit.config().burst_id, *n)
    }

    /// How many bursts finished in all, and the most recent ones, oldest first.
    pub fn recent_bursts(&self) -> (u64, Vec<BurstOutcome>) {
        let h = self.bursts.lock().expect("bursts");
        (h.total, h.recent.iter().cloned().collect())
    }

    /// Seconds of accepted windows the buffers no longer held, over the whole run.
    pub fn not_buffered_seconds_total(&self) -> f64 {
        self.bursts.lock().expect("bursts").not_buffered_s
    }

    /// Bursts by final state over the whole run, and whether one is being recorded.
    pub fn burst_counts(&self) -> (Vec<(String, u64)>, bool) {
        let h = self.bursts.lock().expect("bursts");
        (
            h.by_state
                .iter()
                .map(|(k, v)| (k.name().to_string(), *v))
                .collect(),
            self.busy.load(Ordering::Acquire),
        )
    }

    /// The unit's status, as `{"cmd":"status"}` answers it.
    pub fn status(&self) -> UnitStatus {
        let u = &self.unit;
        let c = u.config();
        let (live, totals) = u.progress_and_totals("live");
        let links: Vec<LinkStatus> = live.links.iter().map(LinkStatus::from).collect();
        let history = self.bursts.lock().expect("bursts");
        UnitStatus {
            ok: true,
            uptime_s: u.uptime().as_secs_f64(),
            ingest: u.ingest().map(|i| IngestStatus {
                routing: i.routing.into(),
                gro: i.gro,
                gro_refused: i.gro_refused.clone(),
                rcvbuf_bytes: i.rcvbuf_bytes,
                rmem_max_bytes: i.rmem_max_bytes,
                nap_s: i.nap.as_secs_f64(),
                receive_cpu: i.receive_cpu,
                nic: i.nic.as_ref().map(|n| n.to_string()),
                links: links.iter().map(|l| l.counters.ingest).collect(),
            }),
            links: c.links,
            frame_type: c.frame_type.name(),
            clock_hz: c.clock().hz(),
            frame_step_ticks: u.frame_step_ticks(),
            rate_bytes_per_s_per_link: c.link_bytes_per_s(),
            buffer_s: c.buffer.as_secs_f64(),
            buffer_memory_bytes: u.buffer_memory_bytes(),
            buffer_capacity_frames: u.buffer_capacity_frames(),
            method: c.method.name().into(),
            newest_timestamp: u.newest_timestamp(),
            recording: self.busy.load(Ordering::Acquire).then(|| links.clone()),
            live: links,
            durable_watermark: totals.iter().map(|l| l.durable_until_timestamp).collect(),
            link_rates: u.link_rates(),
            recording_burst: self.current.lock().expect("current").clone(),
            sealing_bursts: u.sealing(),
            next_burst: u.next_burst_state().into(),
            bursts_total: history.total,
            bursts: history.recent.iter().cloned().collect(),
        }
    }
}

/// The name of the burst that trigger `trigger_id` opens (`snbuf_burst::names`): its own
/// id unless that names something else in `output`. A trigger is never lost to a name it could
/// not know was taken.
fn burst_name_for(output: &Path, trigger_id: &str) -> Result<String, String> {
    let name = snbuf_burst::names::free_burst_name(output, trigger_id).ok_or_else(|| {
        format!(
            "no free burst name for trigger {trigger_id} in {}",
            output.display()
        )
    })?;
    debug_assert!(
        snbuf_burst::check_burst_id(&name).is_ok(),
        "a burst's name is a plain directory name"
    );
    if name != trigger_id {
        tracing::warn!(trigger = %trigger_id, burst = %name,
            "the trigger's id names something else in the output: its burst is named apart");
    }
    Ok(name)
}

fn read_request(stream: &mut UnixStream) -> Result<Value, String> {
    let mut line = String::new();
    let mut reader = BufReader::new(stream.take(MAX_REQUEST_BYTES + 1));
    reader
        .read_line(&mut line)
        .map_err(|e| format!("cannot read the request: {e}"))?;
    if line.len() as u64 > MAX_REQUEST_BYTES {
        return Err(format!("request larger than {MAX_REQUEST_BYTES} bytes"));
    }
    serde_json::from_str(line.trim()).map_err(|e| format!("the request is not JSON: {e}"))
}

mod cancel;
mod client;
mod join;
mod recording;

pub use client::{ask, request};
