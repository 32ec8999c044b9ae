//! An operator cancels the burst being recorded (`snbuf trigger --cancel ID`): it ends soon,
//! sealed with what was written, and the unit is free for the next trigger.

use std::time::Duration;

use super::TriggerDesk;
use crate::protocol::CancelReply;

/// How far past the newest buffered frame a cancelled burst ends: every frame a writer may have
/// read when the end moved lies before it (a writer reads only what is buffered), so no link
/// has written past the new end; the burst then ends about this much later.
const CANCEL_MARGIN: Duration = Duration::from_secs(1);

impl TriggerDesk {
    /// Cancels burst `burst_id`, the one being recorded: its window's end moves in to just past
    /// the newest frame buffered (`reach::BurstReach::cancel`).
    pub fn cancel(&self, burst_id: &str) -> Result<CancelReply, String> {
        let recording = self
            .recording()
            .ok_or("no burst is being recorded: nothing to cancel")?;
        if recording.burst_id != burst_id {
            return Err(format!(
                "burst {burst_id} is not the one being recorded ({})",
                recording.burst_id
            ));
        }
        let reach = self
            .unit
            .reach()
            .ok_or("the burst is still opening its files: cancel it again in a moment")?;
        let clock = self.unit.config().clock();
        let newest = self.unit.newest_timestamp().unwrap_or(0);
        let before = reach.now().end;
        let end = reach.cancel(newest.saturating_add(clock.ticks(CANCEL_MARGIN)))?;
        if let Some(c) = self.current.lock().expect("current").as_mut() {
            c.window = reach.window();
        }
        let cut_s = clock.seconds(before.saturating_sub(end));
        tracing::warn!(burst = %burst_id, end, cut_s,
            "burst cancelled by an operator: it ends here, sealed with what was written");
        Ok(CancelReply {
            ok: true,
            burst_id: burst_id.to_string(),
            window_end_timestamp: end,
            cut_s,
        })
    }
}
