//! A trigger that comes while a burst is being recorded: it joins that burst when its window
//! begins inside it (a second alert for the same supernova), waiting a moment for a burst that
//! is still opening its files or has just ended.

use std::sync::atomic::Ordering;
use std::time::Duration;

use snbuf_burst::TriggerInfo;

use super::Server;
use crate::error::RecordError;
use crate::protocol::{TriggerReply, TriggerRequest};

/// How long a trigger that came while the burst before it was opening its files waits for them,
/// to join it: opening takes milliseconds, or a device's completion deadline when it stalls.
const BURST_OPENING_WAIT: Duration = Duration::from_secs(5);

impl Server {
    /// A trigger that came while a burst is being recorded: it joins that burst when its window
    /// begins inside the burst's (the burst's end moves out to hold it), else it is refused as
    /// busy, with the reason it could not join.
    ///
    /// Ok(None): the burst was over by the time the trigger looked (its files closed and the
    /// unit free again): the trigger is one of its own, not refused.
    pub(super) fn join(
        &self,
        req: &TriggerRequest,
        window: TriggerInfo,
    ) -> Result<Option<TriggerReply>, String> {
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
        let joined = crate::reach::join(config, reach.as_deref(), &current.burst_id, &id, &window)
            .map_err(|why| format!("{} (it cannot join it: {why})", RecordError::Busy))?;
        if let (Some(r), Some(c)) = (reach, self.current.lock().expect("current").as_mut()) {
            c.window = r.window();
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
}
