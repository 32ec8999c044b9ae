//! A trigger that comes while a burst is being recorded: it joins that burst when its window
//! begins at or after the burst's start (a second alert for the same supernova), waiting a
//! moment for a burst that is still opening its files; when the burst is ending, it waits for
//! the unit to be free and opens a burst of its own (the one ending is sealed meanwhile); the
//! ending burst stops waiting for a link that has gone silent.

use std::sync::atomic::Ordering;
use std::time::Duration;

use snbuf_burst::Window;

use super::{Busy, Refused, TriggerDesk};
use crate::protocol::{TriggerReply, TriggerRequest};
use crate::reach::JoinRefusal;

/// How long a trigger that came while the burst before it was opening its files waits for them,
/// to join it: opening takes milliseconds, or a device's completion deadline when it stalls.
const BURST_OPENING_WAIT: Duration = Duration::from_secs(5);
/// The longest a trigger waits for a burst that is ending to free the unit: its writers finish
/// their last chunks in milliseconds, or when a link that stopped sending is given up. Within
/// the control client's 30 s, and never longer than the unit's buffer keeps the trigger's data.
const BURST_ENDING_WAIT: Duration = Duration::from_secs(20);

impl TriggerDesk {
    /// A trigger that came while a burst is being recorded: it joins that burst when its window
    /// begins at or after the burst's start (the burst's end moves out to hold it); when the
    /// burst is ending, it waits for the unit to be free (`wait_for_ending`; else it is refused
    /// as busy, to try again); else it is refused as busy, with the reason it could not join.
    ///
    /// Ok(None): the burst was over by the time the trigger looked (its files closed and the
    /// unit free again): the trigger is one of its own, not refused.
    pub(super) fn join(
        &self,
        req: &TriggerRequest,
        window: Window,
        wait_for_ending: bool,
    ) -> Result<Option<TriggerReply>, Refused> {
        let current = self.current.lock().expect("current").clone();
        let Some(current) = current else {
            return Ok(None);
        };
        let id = req.burst_id.clone().unwrap_or_else(|| self.next_burst_id());
        // Accepted, its files still opening: the reach comes in a moment. Or just over: the unit
        // is free in a moment.
        let opening_until = std::time::Instant::now() + BURST_OPENING_WAIT;
        let mut reach = self.unit.reach();
        while reach.is_none()
            && self.busy.load(Ordering::Acquire)
            && std::time::Instant::now() < opening_until
        {
            std::thread::sleep(Duration::from_millis(5));
            reach = self.unit.reach();
        }
        if reach.is_none() && !self.busy.load(Ordering::Acquire) {
            return Ok(None);
        }
        let config = self.unit.config();
        let joined =
            match crate::reach::join(config, reach.as_deref(), &current.burst_id, &id, &window) {
                Ok(joined) => joined,
                Err(why @ (JoinRefusal::Ending | JoinRefusal::NoBurst)) => {
                    // Waited for here (the socket) or tried again (the fleet): either way a
                    // link of the ending burst that died must not hold the unit for a buffer
                    // and more while this trigger's window start ages out. Not when the burst
                    // goes on as the next (--max-burst): its links are then given up in time
                    // for that one (`hasten_give_up`), and the trigger joins it.
                    if let Some(r) = reach.as_deref().filter(|r| r.continued_in().is_none()) {
                        r.give_up_silent_links();
                    }
                    if !wait_for_ending {
                        return Err(Busy::CannotJoin(why).into());
                    }
                    let bound = config.buffer.min(BURST_ENDING_WAIT);
                    return self.once_free(&current.burst_id, bound);
                }
                // Another burst began since this trigger looked: decided again, against it.
                Err(JoinRefusal::NotRecording(_)) => return Ok(None),
                Err(why) => return Err(Busy::CannotJoin(why).into()),
            };
        if let (Some(r), true) = (reach.as_deref(), joined.continued_in.is_some()) {
            self.unit.hasten_give_up(r);
        }
        if let (Some(r), Some(c)) = (reach, self.current.lock().expect("current").as_mut()) {
            // Unless the continuation has taken the unit meanwhile.
            if c.burst_id == r.burst_id() {
                c.window = r.window();
            }
        }
        tracing::info!(burst = %current.burst_id, trigger = %id, joined = ?joined,
            "trigger joined the burst being recorded");
        Ok(Some(TriggerReply {
            ok: true,
            burst_id: current.burst_id,
            window_s: window.length_s().unwrap_or(0.0),
            window,
            joined: Some(joined),
            cut: None,
        }))
    }

    /// The burst `ending` is in the way: Ok(None) once the unit is free (within `bound`), so
    /// that the trigger opens a burst of its own while that one is sealed, or once its
    /// continuation (--max-burst) records, for the trigger to join; Err if neither by then.
    fn once_free(&self, ending: &str, bound: Duration) -> Result<Option<TriggerReply>, Refused> {
        let give_up_at = std::time::Instant::now() + bound;
        let moved_on = || {
            let current = self.current.lock().expect("current");
            current.as_ref().is_some_and(|c| c.burst_id != ending)
                && self.unit.reach().is_some_and(|r| r.burst_id() != ending)
        };
        while self.busy.load(Ordering::Acquire) && !moved_on() {
            if std::time::Instant::now() >= give_up_at {
                let waited_s = bound.as_secs_f64();
                return Err(Busy::StillEnding { waited_s }.into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(None)
    }
}
