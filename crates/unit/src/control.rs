//! The control endpoint of a long-running unit (`snbuf serve`): a Unix socket, mode 0600, so
//! only its owner on this host can trigger it. One request per connection, one JSON line each
//! way, at most 64 KiB; a malformed request gets an error reply, never a crash.
//!
//! Requests:
//! - `{"cmd":"trigger","at":"now"|TICKS,"pre_s":2.0,"post_s":3.0,"burst_id":"..."}` → accepted at
//!   once (`{"ok":true,"burst_id","window"}`), recorded in the background; refused while another
//!   burst is being recorded (each trigger is its own burst).
//! - `{"cmd":"status"}` → the unit, the burst being recorded (live per link, with each link's
//!   durable watermark) and the last 100 bursts (`bursts_total` counts them all).
//! - `{"cmd":"shutdown"}` → stops once the burst in progress, if any, is sealed.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::error::RecordError;
use crate::status_file::link_json;
use crate::unit::Unit;
use crate::window::TriggerAt;

pub const MAX_REQUEST_BYTES: u64 = 64 << 10;
/// Connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// How long a client may take to send its request or read the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `pre_s` or `post_s` a trigger may ask for: a day.
const MAX_WINDOW_S: f64 = 86_400.0;

/// What happened to one trigger.
#[derive(Clone, Debug)]
struct BurstOutcome {
    burst_id: String,
    result: Value,
}

/// The bursts `status` reports: the most recent ones (bounded, since a unit runs for months)
/// and how many there were in all.
#[derive(Default)]
struct BurstHistory {
    recent: std::collections::VecDeque<BurstOutcome>,
    total: u64,
    /// Bursts by final state (`sealed`, `failed`, `recovered`, `error`), over the whole run.
    by_state: std::collections::BTreeMap<String, u64>,
}

/// How many past bursts `status` lists.
const MAX_BURSTS_SHOWN: usize = 100;

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
    current: Arc<Mutex<Option<(String, Value)>>>,
    counter: Mutex<u64>,
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
        })
    }

    pub fn unit(&self) -> &Unit {
        &self.unit
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
    pub fn recording(&self) -> Option<(String, Value)> {
        self.current.lock().expect("current").clone()
    }

    /// Serves requests until a shutdown request, then waits for the burst in progress.
    ///
    /// Each connection is served on its own thread, at most `MAX_CLIENTS` at once (one more is
    /// told to retry): a client that connects and says nothing holds only itself, for at most
    /// `CLIENT_TIMEOUT`, never a trigger behind it.
    pub fn run(&self, log: impl Fn(&str) + Sync) {
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
                    let _ = writeln!(stream, "{}", json!({"ok": false, "error": busy}));
                    continue;
                }
                let (active, log) = (&active, &log);
                let spawned = std::thread::Builder::new()
                    .name("snbuf-control".into())
                    .spawn_scoped(scope, move || {
                        let reply = match read_request(&mut stream) {
                            Ok(req) => self.handle(&req, &mut |l: &str| log(l)),
                            Err(e) => json!({"ok": false, "error": e}),
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
        while self.busy.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.unit.wind_down();
        let _ = std::fs::remove_file(&self.socket);
    }

    /// Answers one request (as the control socket does): for other front ends of the same unit,
    /// such as its NATS subscription.
    pub fn handle(&self, req: &Value, log: &mut dyn FnMut(&str)) -> Value {
        match req.get("cmd").and_then(Value::as_str) {
            Some("status") => self.status(),
            Some("shutdown") => {
                log("shutdown requested");
                self.begin_shutdown();
                json!({"ok": true})
            }
            Some("trigger") => match self.trigger(req) {
                Ok(v) => {
                    tracing::info!(
                        unit = self.unit.config().unit_id.as_deref().unwrap_or(""),
                        burst = v["burst_id"].as_str().unwrap_or(""),
                        window = %v["window"],
                        "trigger accepted"
                    );
                    v
                }
                Err(e) => {
                    tracing::warn!(
                        unit = self.unit.config().unit_id.as_deref().unwrap_or(""),
                        reason = %e,
                        "trigger refused"
                    );
                    json!({"ok": false, "error": e})
                }
            },
            Some(other) => {
                json!({"ok": false, "error": format!("unknown command '{other}' (known: trigger, status, shutdown)")})
            }
            None => json!({"ok": false, "error": "the request has no \"cmd\""}),
        }
    }

    fn trigger(&self, req: &Value) -> Result<Value, String> {
        let at = match req.get("at") {
            None => TriggerAt::Now,
            Some(Value::String(s)) if s == "now" => TriggerAt::Now,
            Some(v) => TriggerAt::Timestamp(
                v.as_u64()
                    .ok_or("\"at\" must be \"now\" or a timestamp in ticks")?,
            ),
        };
        let secs = |key: &str, default: Duration| -> Result<Duration, String> {
            match req.get(key) {
                None => Ok(default),
                // Bounded: a window of more than a day is a mistake, and a huge number must
                // be refused here rather than overflow a Duration.
                Some(v) => v
                    .as_f64()
                    .filter(|s| (0.0..=MAX_WINDOW_S).contains(s))
                    .map(Duration::from_secs_f64)
                    .ok_or_else(|| {
                        format!("\"{key}\" must be a number of seconds from 0 to {MAX_WINDOW_S}")
                    }),
            }
        };
        if self.stopping() {
            return Err("the unit is stopping: it takes no more triggers".into());
        }
        let config = self.unit.config();
        let pre = secs("pre_s", config.pre)?;
        let post = secs("post_s", config.post)?;
        let window = self.unit.window(at, pre, post).map_err(|e| e.to_string())?;
        if self.busy.load(Ordering::Acquire) {
            return Err(RecordError::Busy.to_string());
        }
        let burst_id = match req.get("burst_id") {
            Some(v) => v
                .as_str()
                .ok_or("\"burst_id\" must be a string")?
                .to_string(),
            None => {
                let mut n = self.counter.lock().expect("counter");
                *n += 1;
                format!("{}-{:04}", config.burst_id, *n)
            }
        };
        snbuf_burst::check_burst_id(&burst_id).map_err(|e| e.to_string())?;
        if config.output_dir.join(&burst_id).exists() {
            return Err(format!("burst {burst_id} already exists"));
        }
        let (unit, bursts, busy, current, id) = (
            self.unit.clone(),
            self.bursts.clone(),
            self.busy.clone(),
            self.current.clone(),
            burst_id.clone(),
        );
        // Connections are served concurrently: the check above was a quick refusal, this is
        // the one that counts (only one trigger can take the unit).
        if self
            .busy
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(RecordError::Busy.to_string());
        }
        *self.current.lock().expect("current") = Some((burst_id.clone(), json!(window)));
        let recording = std::thread::Builder::new().name("snbuf-trigger".into());
        let spawned = recording.spawn(move || {
            let unit_id = unit.config().unit_id.clone().unwrap_or_default();
            let span = tracing::info_span!("burst", unit = %unit_id, burst = %id);
            let _in_burst = span.enter();
            let result = match unit.trigger(at, pre, post, &id, |_| {}) {
                Ok(rep) => json!({
                    "state": rep.manifest.state, "dir": rep.burst_dir, "frames": rep.frames_recorded,
                    "lost_frames": rep.lost_frames, "valid": rep.verify.valid,
                    "output_bytes_per_s": rep.output_bytes_per_s, "window": rep.window,
                    "prepared_ahead": rep.prepared_ahead,
                    "window_cut_to_bytes_per_link": rep.window_cut_to_bytes_per_link,
                }),
                Err(e) => json!({"state": "error", "error": e.to_string()}),
            };
            if result["state"] == "sealed" && result["valid"] == true {
                tracing::info!(
                    frames = result["frames"].as_u64(),
                    lost_frames = result["lost_frames"].as_u64(),
                    "burst sealed and verified"
                );
            } else {
                tracing::error!(outcome = %result, "burst not sealed clean");
            }
            let mut bursts = bursts.lock().expect("bursts");
            bursts.total += 1;
            let state = result["state"].as_str().unwrap_or("unknown").to_string();
            *bursts.by_state.entry(state).or_default() += 1;
            if bursts.recent.len() == MAX_BURSTS_SHOWN {
                bursts.recent.pop_front();
            }
            bursts.recent.push_back(BurstOutcome {
                burst_id: id,
                result,
            });
            drop(bursts);
            // Arm for the next trigger: its files are prepared in the background.
            unit.prepare_next();
            *current.lock().expect("current") = None;
            busy.store(false, Ordering::Release);
        });
        if let Err(e) = spawned {
            *self.current.lock().expect("current") = None;
            self.busy.store(false, Ordering::Release);
            return Err(format!("start the recording thread: {e}"));
        }
        let window_s = (window.window_end_timestamp - window.window_start_timestamp) as f64
            / config.ticks_per_s();
        Ok(json!({"ok": true, "burst_id": burst_id, "window": window, "window_s": window_s}))
    }

    /// How many bursts finished in all, and the most recent ones (id and outcome), oldest first.
    pub fn recent_bursts(&self) -> (u64, Vec<(String, Value)>) {
        let h = self.bursts.lock().expect("bursts");
        (
            h.total,
            h.recent
                .iter()
                .map(|b| (b.burst_id.clone(), b.result.clone()))
                .collect(),
        )
    }

    /// Bursts by final state over the whole run, and whether one is being recorded.
    pub fn burst_counts(&self) -> (Vec<(String, u64)>, bool) {
        let h = self.bursts.lock().expect("bursts");
        (
            h.by_state.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            self.busy.load(Ordering::Acquire),
        )
    }

    /// The unit's status, as `{"cmd":"status"}` answers it.
    pub fn status(&self) -> Value {
        let u = &self.unit;
        let c = u.config();
        let live = self.busy.load(Ordering::Acquire).then(|| {
            let p = u.progress("recording");
            json!(p.links.iter().map(link_json).collect::<Vec<_>>())
        });
        let history = self.bursts.lock().expect("bursts");
        let bursts: Vec<Value> = history
            .recent
            .iter()
            .map(|b| {
                let mut v = b.result.clone();
                v["burst_id"] = json!(b.burst_id);
                v
            })
            .collect();
        let ingest = u.ingest().map(|i| {
            json!({
                "routing": i.routing,
                "rcvbuf_bytes": i.rcvbuf_bytes,
                "rmem_max_bytes": i.rmem_max_bytes,
                "links": u.progress("ingest").links.iter().map(|l| link_json(l)["ingest"].clone()).collect::<Vec<_>>(),
            })
        });
        json!({
            "ok": true,
            "uptime_s": u.uptime().as_secs_f64(),
            "ingest": ingest,
            "links": c.links,
            "frame_type": c.frame_type.name(),
            "rate_bytes_per_s_per_link": c.frames_per_s_per_link * c.frame_type.frame_bytes() as f64,
            "buffer_s": c.buffer.as_secs_f64(),
            "buffer_memory_bytes": u.buffer_memory_bytes(),
            "method": c.method.name(),
            "newest_timestamp": u.newest_timestamp(),
            "recording": live,
            "live": u.progress("live").links.iter().map(link_json).collect::<Vec<_>>(),
            "buffer_capacity_frames": u.buffer_capacity_frames(),
            "ticks_per_s": c.ticks_per_s(),
            "recording_burst": self.current.lock().expect("current").as_ref().map(|(id, w)| json!({"burst_id": id, "window": w})),
            "next_burst": u.next_burst_state(),
            "bursts_total": history.total,
            "bursts": bursts,
        })
    }
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

/// Sends one request to a server and returns its reply.
pub fn request(socket: &Path, req: &Value) -> Result<Value, ControlError> {
    let mut s = UnixStream::connect(socket).map_err(|cause| ControlError::NotRunning {
        path: socket.to_path_buf(),
        cause,
    })?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = s.set_write_timeout(Some(Duration::from_secs(30)));
    writeln!(s, "{req}").map_err(|cause| ControlError::Io {
        path: socket.to_path_buf(),
        cause,
    })?;
    let mut line = String::new();
    BufReader::new(s.take(16 << 20))
        .read_line(&mut line)
        .map_err(|cause| ControlError::Io {
            path: socket.to_path_buf(),
            cause,
        })?;
    serde_json::from_str(line.trim()).map_err(|e| ControlError::BadReply {
        path: socket.to_path_buf(),
        what: e.to_string(),
    })
}
