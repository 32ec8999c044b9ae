//! Making what a link appended durable: when a persist is due, starting it and finishing it
//! (only then is the link's watermark raised), and a failed persist failing the link.

use super::*;

impl LinkWork<'_> {
    /// The link waits for frames: what is pending is made durable now if it has waited
    /// `ACKNOWLEDGE_WITHIN` since its first chunk was appended; sooner, the next chunk is likely
    /// to join it in the same persist (a link that keeps up waits a little before each chunk,
    /// and a persist each time would cost a flush a chunk).
    pub(super) fn acknowledge_while_waiting(&mut self) {
        debug_assert!(!self.c.done, "a link done waits for nothing");
        if self
            .c
            .pending_since
            .is_some_and(|t| t.elapsed() >= ACKNOWLEDGE_WITHIN)
        {
            self.c.persist_due = true;
        }
    }

    /// Persists what is pending and counts it as durable; on failure the link is failed and
    /// done (its error is in its manifest record). Returns false on failure.
    pub(super) fn flush(&mut self) -> bool {
        self.start_flush() && self.finish_flush_by(None) && !self.c.done
    }

    /// The first half of `flush`: the persist of what is pending is started (on io_uring the
    /// fdatasync is submitted; other methods persist here).
    pub(super) fn start_flush(&mut self) -> bool {
        debug_assert!(self.started.is_none(), "no chunk write in flight");
        debug_assert!(!self.c.persist_started, "one persist at a time");
        self.c.persist_due = false;
        if self.lw.pending_chunks() == 0 {
            self.c.done |= self.c.finishing;
            return true;
        }
        match self.lw.start_persist() {
            Ok(()) => {
                self.c.persist_started = true;
                self.in_flight_since = Some(Instant::now());
                true
            }
            Err(e) => self.persist_failed(e),
        }
    }

    /// The second half of `flush`, waiting until `limit` at most: once the persist returned,
    /// what it covered is acknowledged (and a link at its window's end is done). Returns
    /// whether the persist is over.
    pub(super) fn finish_flush_by(&mut self, limit: Option<Instant>) -> bool {
        if !self.c.persist_started {
            return true;
        }
        // Nothing was appended since `start_flush`: all that is pending is covered.
        let chunks = self.lw.pending_chunks();
        let over = self.lw.finish_persist_within(limit);
        if matches!(over, Ok(None)) {
            return false;
        }
        self.c.persist_started = false;
        match over.map(|a| a.expect("over")) {
            Ok(acknowledged) => {
                assert_eq!(
                    acknowledged, chunks,
                    "a persist acknowledges what was pending"
                );
                // Only now is the watermark raised: a status reader never sees a chunk as
                // durable before its persist returned.
                self.live
                    .acknowledge(chunks, self.c.pending_frames, self.c.pending_until);
                self.watch.acknowledged(self.index, &self.lw);
                self.c.pending_frames = 0;
                self.c.pending_since = None;
                self.c.lost_pending = 0;
                self.c.done |= self.c.finishing;
                true
            }
            Err(e) => {
                self.persist_failed(e);
                true
            }
        }
    }

    /// A persist failed: the link is failed and done (its error is in its manifest record).
    pub(super) fn persist_failed(&mut self, e: WriteError) -> bool {
        tracing::error!(link = self.lw.link(), error = %e, "link failed: persist");
        self.live.fail();
        self.c.done = true;
        false
    }
}
