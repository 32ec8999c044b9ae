//! A trigger's burst recorded on a thread of its own: written, then (the unit already free for
//! the next trigger, or its continuation past --max-burst already recording) sealed and read
//! back, and its outcome kept in the server's history.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use snbuf_burst::Window;

use super::TriggerDesk;
use crate::protocol::{BurstOutcome, OutcomeState, RecordingBurst};
use crate::reach::{Continuation, Opening};

impl TriggerDesk {
    /// Records `window` as burst `id` on a thread of its own. Once its writers are done the unit
    /// is free (`busy` cleared, the next burst's files prepared) and the burst is sealed and
    /// read back on the same thread while the next trigger may already be recording; its
    /// outcome is kept when it is sealed.
    pub(super) fn record_in_background(
        &self,
        burst_id: &str,
        window: Window,
        first: snbuf_burst::AnsweredTrigger,
    ) -> std::io::Result<()> {
        let recording = Recording {
            unit: self.unit.clone(),
            bursts: self.bursts.clone(),
            busy: self.busy.clone(),
            current: self.current.clone(),
        };
        recording.start(burst_id.to_string(), window, Opening::by(first))
    }
}

/// What a burst's recording thread shares with the server.
#[derive(Clone)]
struct Recording {
    unit: Arc<crate::recorder::Unit>,
    bursts: Arc<Mutex<super::history::BurstHistory>>,
    busy: Arc<AtomicBool>,
    current: Arc<Mutex<Option<RecordingBurst>>>,
}

impl Recording {
    fn start(self, id: String, window: Window, opening: Opening) -> std::io::Result<()> {
        let thread = std::thread::Builder::new().name("snbuf-trigger".into());
        thread.spawn(move || self.record(id, window, opening))?;
        Ok(())
    }

    /// Writes burst `id`; then either the unit is free, or (the burst reached --max-burst) its
    /// continuation starts at once on a thread of its own, the unit staying busy, so that no
    /// trigger comes between them and no frame falls between them; then seals it.
    fn record(self, id: String, window: Window, opening: Opening) {
        let unit = &self.unit;
        let unit_id = unit.config().unit_id.clone().unwrap_or_default();
        let span = tracing::info_span!("burst", unit = %unit_id, burst = %id);
        let _in_burst = span.enter();
        let written = unit.write(&id, &window, opening, &mut |_| {});
        debug_assert!(
            unit.reach().is_none_or(|r| r.burst_id() != id),
            "a written burst takes no more joins"
        );
        // Whatever became of this burst, and even while the unit stops (a drain waits for it:
        // `policy::default_drain_timeout`): its triggers were told the rest is recorded.
        match unit.take_continuation() {
            Some(next) => self.continue_in(&id, next),
            None => self.free(),
        }
        // The read-back yields the disk and the CPU to the next burst's writers: its data is
        // durable already, only its verdict waits.
        yield_to_recording();
        let outcome = match written.and_then(|w| unit.seal(w)) {
            Ok(rep) => {
                let step_s = unit.config().clock().seconds(unit.frame_step_ticks());
                sealed_outcome(&id, &rep, step_s)
            }
            Err(e) => BurstOutcome {
                burst_id: id.clone(),
                state: OutcomeState::Error,
                error: Some(e.to_string()),
                ..BurstOutcome::default()
            },
        };
        if outcome.clean() {
            tracing::info!(
                frames = outcome.frames,
                lost_frames = outcome.lost_frames,
                lost_s = outcome.lost_s,
                "burst sealed and verified"
            );
        } else {
            tracing::error!(outcome = ?outcome, "burst not sealed clean");
        }
        // Kept before the unit forgets it, so that a trigger delivered again finds the
        // burst that answers it in one place or the other (`answered_by`).
        self.bursts.lock().expect("bursts").push(outcome);
        unit.forget_sealed(&id);
    }

    /// Burst `previous` reached --max-burst: `next` starts now, from where it stopped.
    fn continue_in(&self, previous: &str, next: Continuation) {
        assert!(
            self.busy.load(Ordering::Acquire) && next.burst_id != previous,
            "a continuation follows its burst with the unit still busy"
        );
        tracing::info!(next = %next.burst_id, window = ?next.window,
            "the burst reached --max-burst: the rest of its windows goes on as the next burst");
        *self.current.lock().expect("current") = Some(RecordingBurst {
            burst_id: next.burst_id.clone(),
            window: next.window.clone(),
        });
        let (id, window) = (next.burst_id.clone(), next.window.clone());
        debug_assert_eq!(next.chain.previous, previous, "it continues this burst");
        let opening = Opening::continuing(next);
        if let Err(e) = self.clone().start(id.clone(), window, opening) {
            tracing::error!(next = %id, error = %e,
                "the next burst's recording thread did not start: the rest of the windows is not recorded");
            self.free();
        }
    }

    /// Free for the next trigger, which opens a burst of its own while the last one is sealed:
    /// its files are prepared in the background meanwhile.
    fn free(&self) {
        self.unit.prepare_next();
        *self.current.lock().expect("current") = None;
        self.busy.store(false, Ordering::Release);
    }
}

/// What became of burst `id`, sealed and read back as `rep` says; `step_s`: seconds between a
/// link's frames (its losses in seconds).
fn sealed_outcome(id: &str, rep: &crate::summary::RecordSummary, step_s: f64) -> BurstOutcome {
    BurstOutcome {
        burst_id: id.to_string(),
        state: OutcomeState::of(rep.manifest.state),
        dir: Some(rep.result.burst_dir.clone()),
        frames: Some(rep.result.frames_recorded),
        lost_frames: Some(rep.result.lost_frames),
        lost_s: Some(
            rep.manifest
                .links
                .iter()
                .map(|l| l.lost_frames)
                .max()
                .unwrap_or(0) as f64
                * step_s,
        ),
        valid: rep.verify.valid,
        output_bytes_per_s: Some(rep.result.output_bytes_per_s),
        window: Some(rep.result.trigger.clone()),
        prepared_ahead: Some(rep.result.prepared_ahead),
        window_cut_to_bytes_per_link: rep.result.window_cut_to_bytes_per_link,
        error: None,
        triggers: rep
            .manifest
            .triggers
            .iter()
            .map(|t| t.trigger_id.clone())
            .collect(),
    }
}

/// The sealing thread's priorities once its burst's data is durable: the idle disk I/O class
/// (mq-deadline and BFQ serve it when nothing else waits, with aging; `none` ignores it) and
/// nice 10, so that reading a burst back never holds the writers of the next one.
fn yield_to_recording() {
    if let Err(e) = snbuf_platform::cpu::set_current_thread_io_idle() {
        tracing::warn!("seal: cannot put the read-back in the idle I/O class ({e})");
    }
    if let Err(e) = snbuf_platform::cpu::set_current_thread_nice(10) {
        tracing::warn!("seal: cannot lower the read-back's CPU priority ({e})");
    }
}
