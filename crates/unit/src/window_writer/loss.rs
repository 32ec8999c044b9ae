//! Loss, counted to the frame: what a link shows as lost while its writer waits on the device,
//! what a read finds missing, and the accounting at the window's end, where every frame of the
//! window is durable or counted lost (asserted).

use super::*;

impl LinkWork<'_> {
    /// While the writer waits on this link's device: the window frames the link has overwritten
    /// since, shown as lost at once (the writer counts them when it reads again, or when the
    /// link fails; they can only be lost: the buffer no longer holds them).
    pub(super) fn show_overwritten(&self, job: &WindowJob) {
        let Ok(oldest_ts) = self.buf.timestamp_at(self.buf.oldest()) else {
            return;
        };
        let expect = self
            .c
            .expect_ts
            .unwrap_or(job.window.window_start_timestamp);
        let we = job.reach.now().end;
        self.live.set_overwritten(frames_between(
            expect,
            oldest_ts.min(we),
            job.ticks_per_frame,
        ));
    }

    /// Counts `frames` of the window lost for good. Added before what was shown as overwritten
    /// is cleared: the live count (a Prometheus counter) never goes back.
    pub(super) fn count_lost(&mut self, frames: u64) {
        if frames > 0 {
            self.lw.add_lost_frames(frames);
            self.live.add_lost(frames);
            self.c.lost_pending += frames;
        }
        debug_assert!(
            self.c.lost_pending <= self.live.lost_frames(),
            "what is pending was counted live"
        );
        self.live.set_overwritten(0);
    }

    /// After the window: a failed link loses the rest of its window, every frame after its
    /// durable watermark not already counted (loss stays explicit, whatever stopped it). Then
    /// every frame of the window is durable or counted lost, which is asserted.
    pub(super) fn finish(&mut self, job: &WindowJob) {
        assert!(self.c.done, "link {}: its window is over", self.lw.link());
        // This writer is done: the end is final (a writer whose links all failed closes it, so
        // no trigger joins a burst whose losses are being counted).
        let mut we = job.reach.now().end;
        while !job.reach.close_at(we) {
            we = job.reach.now().end;
        }
        let ws = job.window.window_start_timestamp;
        let tpf = job.ticks_per_frame;
        let anchor = self.c.grid.unwrap_or(ws);
        if self.live.failed() {
            let after_watermark = match self.live.durable_until() {
                Some(t) => frames_between(t.saturating_add(tpf), we, tpf),
                // Nothing durable: the whole window, on the link's grid.
                None => frames_in_window(ws, we, anchor, tpf),
            };
            let rest = after_watermark.saturating_sub(self.c.lost_pending);
            if rest > 0 {
                self.lw.add_lost_frames(rest);
                self.live.add_lost(rest);
            }
        }
        // A failed link's overwritten frames are in `rest` now (they were shown until here).
        self.live.set_overwritten(0);
        if !self.c.off_grid && we > ws {
            let accounted = self.live.durable_frames() + self.live.lost_frames();
            let window = frames_in_window(ws, we, anchor, tpf);
            assert_eq!(
                accounted,
                window,
                "link {}: frames durable + frames lost must be the window's frames",
                self.lw.link()
            );
        }
    }
}
