//! The trigger desk: the one place a unit takes triggers, whatever their source. A source (the
//! control socket, the fleet's NATS subscription, any other: a SNEWS alert feed, DUNE's own
//! trigger messages) is a thin adapter that turns its message into a `TriggerRequest`, brings it
//! to `TriggerDesk::take` and says the typed `Decision` its own way; nothing is decided by
//! comparing words.
//!
//! The desk decides a trigger's window from what the buffers hold (`check`), opens a burst for
//! it (`recording`: written on a thread of its own, then sealed), lets a trigger whose window
//! begins inside the burst being recorded join it (`join`), lets an operator cut that burst
//! short (`cancel`), and keeps what became of every burst (`history`).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::protocol::{
    At, IngestStatus, LinkStatus, OutcomeState, RecordingBurst, TriggerReply, TriggerRequest,
    UnitStatus,
};
use crate::recorder::Unit;
use crate::window::WindowError;
use check::{CheckedTrigger, Refusals};

mod cancel;
pub mod check;
mod decision;
mod history;
mod join;
mod recording;

pub use crate::reach::JoinRefusal;
pub use decision::{Busy, Decision, Patience, Refused, Waiting};
use history::BurstHistory;

/// How long a trigger that comes before the first frame (a unit just started, a source not yet
/// flowing) waits for one at the desk (`Patience::WaitHere`) before it is refused: a trigger
/// sent right after `serve` starts is taken, not lost to the few milliseconds the links take
/// to deliver their first frame.
pub const FIRST_FRAME_WAIT: Duration = Duration::from_secs(2);

/// A unit's trigger desk: the unit, the burst it records, and what became of the others.
pub struct TriggerDesk {
    unit: Arc<Unit>,
    bursts: Arc<Mutex<BurstHistory>>,
    stopping: AtomicBool,
    /// Set when a trigger is accepted, before its recording thread starts, so that a second
    /// trigger right behind it is refused; cleared when the burst is sealed.
    busy: Arc<AtomicBool>,
    /// The burst being recorded, while `busy`: with its window, for live views.
    current: Arc<Mutex<Option<RecordingBurst>>>,
    counter: Mutex<u64>,
    refusals: Refusals,
}

impl TriggerDesk {
    pub fn new(unit: Unit) -> TriggerDesk {
        TriggerDesk {
            unit: Arc::new(unit),
            bursts: Arc::new(Mutex::new(BurstHistory::default())),
            stopping: AtomicBool::new(false),
            busy: Arc::new(AtomicBool::new(false)),
            current: Arc::new(Mutex::new(None)),
            counter: Mutex::new(0),
            refusals: Refusals::default(),
        }
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

    /// Takes no more triggers (a drain: the burst in progress is still sealed).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Whether a burst is being recorded (or its writers are finishing).
    pub fn is_recording(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// The burst being recorded, and its window.
    pub fn recording(&self) -> Option<RecordingBurst> {
        self.current.lock().expect("current").clone()
    }

    /// Takes trigger `req`: decides its window now, from what the buffers hold, and records
    /// that window in the background (the window replied is the one recorded and the one in
    /// the manifest); or joins it to the burst being recorded; or says why not. `patience`:
    /// whether to wait here for the first frame or for a burst that is ending
    /// (`Patience::WaitHere`, the socket), or to answer `Waiting` at once (`AskAgain`).
    ///
    /// Every refusal is counted and logged (at a bounded rate); a wait is not.
    pub fn take(&self, req: &TriggerRequest, patience: Patience) -> Decision {
        let wait_here = patience == Patience::WaitHere;
        if self.unit.newest_timestamp().is_none() {
            let nothing_yet = matches!(
                check::check(&self.unit, req, false),
                Err(Refused::Window(WindowError::NothingBuffered))
            );
            match (nothing_yet, wait_here) {
                (true, true) => self.wait_for_first_frame(FIRST_FRAME_WAIT),
                (true, false) => return Decision::Waiting(Waiting::FirstFrame),
                (false, _) => {}
            }
        }
        let unit_id = self.unit.config().unit_id.clone().unwrap_or_default();
        let decision = match self.accept(req, wait_here) {
            Ok(reply) => {
                tracing::info!(
                    unit = %unit_id,
                    burst = %reply.burst_id,
                    window = ?reply.window,
                    cut = ?reply.cut,
                    "trigger accepted"
                );
                Decision::of_reply(reply)
            }
            Err(Refused::Busy(busy)) if !wait_here => {
                Decision::Waiting(Waiting::BurstInTheWay(busy))
            }
            Err(refused) => {
                self.refusals.refused(&unit_id, &refused);
                Decision::Refused(refused)
            }
        };
        debug_assert!(
            !(wait_here && matches!(decision, Decision::Waiting(_))),
            "a desk that waits here answers no wait"
        );
        decision
    }

    /// A refusal decided by a source itself (the fleet's, of an id that names no burst),
    /// counted and logged as the desk's own are.
    pub fn count_refusal(&self, refused: &Refused) {
        let unit_id = self.unit.config().unit_id.clone().unwrap_or_default();
        self.refusals.refused(&unit_id, refused);
    }

    /// The one check of a trigger (`check`), with what only the desk knows: whether it is
    /// stopping, and the bursts it already has.
    fn check(&self, req: &TriggerRequest) -> Result<CheckedTrigger, Refused> {
        if self.stopping() {
            return Err(Refused::Stopping);
        }
        let config = self.unit.config();
        let busy = self.busy.load(Ordering::Acquire);
        let checked = check::check(&self.unit, req, !busy)?;
        if let Some(id) = &req.burst_id {
            // A burst this trigger opened or joined (an earlier run's, or this one's): it was
            // recorded. Anything else of that name in the output (the unit's socket, its
            // journal, another trigger's burst) is no answer to it: its burst is named apart
            // (`burst_name_for`).
            let recorded = |burst: String| Refused::AlreadyRecorded {
                trigger: id.clone(),
                burst,
            };
            match snbuf_burst::names::burst_answering(&config.output_dir, id) {
                Some(b) if b == *id => return Err(Refused::BurstExists(b)),
                Some(b) => return Err(recorded(b)),
                None => {}
            }
            // One that joined a burst already sealed is refused; one that joined the burst
            // being recorded gets its answer again (`join`).
            let recording = self.recording().map(|r| r.burst_id);
            if let Some(b) = self
                .answered_by(id)
                .filter(|b| Some(b) != recording.as_ref())
            {
                return Err(recorded(b));
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
        let CheckedTrigger { window, cut } = self.check(req)?;
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
        check::check_id(&trigger_id)?;
        let burst_id = burst_name_for(&config.output_dir, &trigger_id)?;
        // Triggers come concurrently: the check above was a quick refusal, this is the one
        // that counts (only one trigger can take the unit).
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
            return Err(Refused::CannotStart(format!(
                "start the recording thread: {e}"
            )));
        }
        debug_assert!(
            window.window_start_timestamp <= window.trigger_timestamp
                && window.trigger_timestamp <= window.window_end_timestamp,
            "a window holds its trigger"
        );
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
    /// one of the last `history::MAX_BURSTS_SHOWN`), if any: a trigger delivered again is not
    /// recorded twice.
    pub fn answered_by(&self, id: &str) -> Option<String> {
        // The unit first (recording or sealing), then the history: a burst is kept in the
        // history before the unit forgets it, so one of the two always has it.
        if let Some(burst) = self.unit.answering(id) {
            return Some(burst);
        }
        self.bursts.lock().expect("bursts").answering(id)
    }

    /// The next burst id of this unit's own (`BURST-0001`, ...).
    fn next_burst_id(&self) -> String {
        let mut n = self.counter.lock().expect("counter");
        *n += 1;
        format!("{}-{:04}", self.unit.config().burst_id, *n)
    }

    /// How many bursts finished in all, and the most recent ones, oldest first.
    pub fn recent_bursts(&self) -> (u64, Vec<crate::protocol::BurstOutcome>) {
        let h = self.bursts.lock().expect("bursts");
        (h.total, h.recent.iter().cloned().collect())
    }

    /// Seconds of accepted windows the buffers no longer held, over the whole run.
    pub fn not_buffered_seconds_total(&self) -> f64 {
        self.bursts.lock().expect("bursts").not_buffered_s
    }

    /// Bursts by final state over the whole run.
    pub fn bursts_by_state(&self) -> Vec<(OutcomeState, u64)> {
        let h = self.bursts.lock().expect("bursts");
        debug_assert_eq!(
            h.by_state.values().sum::<u64>(),
            h.total,
            "each burst has one state"
        );
        h.by_state.iter().map(|(k, v)| (*k, *v)).collect()
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
            recording: self.is_recording().then(|| links.clone()),
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
fn burst_name_for(output: &Path, trigger_id: &str) -> Result<String, Refused> {
    let name = snbuf_burst::names::free_burst_name(output, trigger_id).ok_or_else(|| {
        Refused::CannotStart(format!(
            "no free burst name for trigger {trigger_id} in {}",
            output.display()
        ))
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
