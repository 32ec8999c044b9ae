//! The control endpoint of a long-running unit (`snbuf serve`): a Unix socket, mode 0600, so
//! only its owner on this host can trigger it. One request per connection, one JSON line each
//! way, at most 64 KiB; a malformed request gets an error reply, never a crash. A thin source
//! of the unit's trigger desk (`crate::desk`): it says the desk's decisions as JSON.
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
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::desk::{Decision, Patience, TriggerDesk};
use crate::protocol::{Refusal, Request, TriggerReply, TriggerRequest};
use crate::recorder::Unit;

pub const MAX_REQUEST_BYTES: u64 = 64 << 10;
/// Connections served at once.
pub const MAX_CLIENTS: usize = 16;
/// How long a client may take to send its request or read the reply.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

pub struct Server {
    desk: Arc<TriggerDesk>,
    socket: PathBuf,
    listener: UnixListener,
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
            desk: Arc::new(TriggerDesk::new(unit)),
            socket: socket.to_path_buf(),
            listener,
        })
    }

    /// The unit's trigger desk, which every other source of triggers (the fleet) is given.
    pub fn desk(&self) -> &Arc<TriggerDesk> {
        &self.desk
    }

    pub fn unit(&self) -> &Unit {
        self.desk.unit()
    }

    /// Stops taking triggers and ends `run` once the burst in progress is sealed (a drain):
    /// what SIGTERM and `{"cmd":"shutdown"}` do.
    pub fn begin_shutdown(&self) {
        self.desk.stop();
        // Wake the accept loop so that it sees the shutdown.
        let _ = UnixStream::connect(&self.socket);
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
                if self.desk.stopping() {
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
                        if self.desk.stopping() {
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
        let unit = self.desk.unit();
        while self.desk.is_recording() || !unit.sealing().is_empty() {
            std::thread::sleep(Duration::from_millis(50));
        }
        unit.wind_down();
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
            Request::Status => to_json(serde_json::to_value(self.desk.status())),
            Request::Shutdown => {
                tracing::info!("shutdown requested");
                self.begin_shutdown();
                json!({"ok": true})
            }
            Request::Cancel(c) => match self.desk.cancel(&c.burst_id) {
                Ok(reply) => to_json(serde_json::to_value(reply)),
                Err(e) => Refusal::json(e),
            },
            Request::Trigger(t) => match self.trigger(&t) {
                Ok(reply) => to_json(serde_json::to_value(reply)),
                Err(why) => Refusal::json(why),
            },
        }
    }

    /// A trigger brought to the desk, its client waiting for the answer (`Patience::WaitHere`:
    /// for the first frame, or for a burst that is ending, a bounded while): the reply, or why
    /// it is refused.
    pub fn trigger(&self, req: &TriggerRequest) -> Result<TriggerReply, String> {
        match self.desk.take(req, Patience::WaitHere) {
            Decision::Accepted(reply) | Decision::Joined(reply) | Decision::Continued(reply) => {
                Ok(reply)
            }
            Decision::Refused(why) => Err(why.to_string()),
            // (A desk that waits here answers no wait; were it to, the client is told of it.)
            Decision::Waiting(w) => Err(w.to_string()),
        }
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

mod client;

pub use client::{ask, request};
