//! Per-link counters: one plain type (`LinkCounters`) for every reader — the live view of a burst,
//! the status file, `snbuf status`, the unit's run totals behind the Prometheus counters — and
//! its atomic twin (`LiveLink`) that a writer thread updates while a burst records.
//!
//! The promise the durable watermark makes: a chunk counts in `durable_chunks` (and its newest
//! frame in `durable_until_timestamp`) only after the persist that covers it returned, and the
//! watermark never goes back (asserted).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// One link's figures: of the burst being recorded (`Unit::progress`), or of the unit's whole
/// run (`Unit::totals`, where the frame and chunk counts sum every burst).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LinkCounters {
    pub link: u32,
    /// Frames the link has produced into its buffer.
    pub frames_in: u64,
    /// Frames of trigger windows made durable.
    pub durable_frames: u64,
    /// Chunks made durable, and the timestamp of the newest durable frame: the durable
    /// watermark. Everything up to it survives a crash (`snbuf recover` keeps it).
    pub durable_chunks: u64,
    pub durable_until_timestamp: Option<u64>,
    /// Frames of trigger windows the link could not record.
    pub lost_frames: u64,
    pub buffer_fill_frames: u64,
    /// Frames of the window produced but not yet durable: the part of the buffer that a slow
    /// medium puts at risk (loss starts when it reaches the buffer's capacity).
    pub backlog_frames: u64,
    pub failed: bool,
    /// What the network receiver counted for the link (links from the network only).
    pub ingest: Option<snbuf_readout::udp::IngestSnapshot>,
}

impl LinkCounters {
    /// Adds a finished burst's figures to run totals (counters only grow; the watermark is the
    /// newest burst's).
    pub fn add_burst(&mut self, burst: &LinkCounters) {
        self.durable_frames += burst.durable_frames;
        self.durable_chunks += burst.durable_chunks;
        self.lost_frames += burst.lost_frames;
        if burst.durable_until_timestamp.is_some() {
            self.durable_until_timestamp = burst.durable_until_timestamp;
        }
    }
}

/// Every link at one moment, with the unit's phase.
#[derive(Clone, Debug)]
pub struct Progress {
    pub phase: &'static str,
    pub elapsed: Duration,
    pub links: Vec<LinkCounters>,
}

/// A link's counters while its burst records: written by its writer thread only, read by anyone.
#[derive(Debug, Default)]
pub(crate) struct LiveLink {
    durable_frames: AtomicU64,
    durable_chunks: AtomicU64,
    durable_until: AtomicU64,
    lost_frames: AtomicU64,
    /// Window frames the link has overwritten while its writer waited on the device, not yet
    /// in `lost_frames` (the writer counts them for good when it reads again, or fails the
    /// link): shown as lost now, so a stall's loss is seen as it happens.
    overwritten_frames: AtomicU64,
    /// Sequence number of the next frame the writer reads from the buffer (u64::MAX once done).
    cursor: AtomicU64,
    failed: AtomicBool,
}

impl LiveLink {
    /// Raises the durable watermark by `chunks` chunks and `frames` frames up to `until_ts`.
    /// Call only after the persist that covers them returned.
    pub fn acknowledge(&self, chunks: u64, frames: u64, until_ts: u64) {
        let had = self.durable_chunks.load(Ordering::Relaxed);
        // The watermark only grows: a crash must never take back what a reader was told.
        assert!(chunks > 0, "an acknowledgment covers at least one chunk");
        assert!(
            had == 0 || until_ts >= self.durable_until.load(Ordering::Relaxed),
            "the durable watermark went back"
        );
        debug_assert!(frames >= chunks, "every chunk acknowledged holds a frame");
        // Timestamp and frames before the chunk count: a reader that sees the chunks sees them.
        self.durable_until.store(until_ts, Ordering::Release);
        self.durable_frames.fetch_add(frames, Ordering::Release);
        self.durable_chunks.fetch_add(chunks, Ordering::Release);
    }

    pub fn add_lost(&self, frames: u64) {
        self.lost_frames.fetch_add(frames, Ordering::Relaxed);
    }

    /// Window frames overwritten while the writer waits on the device (see the field).
    pub fn set_overwritten(&self, frames: u64) {
        // Release: a reader that sees it cleared sees the loss counted for good before it.
        self.overwritten_frames.store(frames, Ordering::Release);
    }

    pub fn set_cursor(&self, seq: u64) {
        // Written by the link's own writer only: its last store is what it loads.
        debug_assert!(
            seq >= self.cursor.load(Ordering::Relaxed),
            "a link's cursor only moves forward"
        );
        self.cursor.store(seq, Ordering::Relaxed);
    }

    pub fn fail(&self) {
        self.failed.store(true, Ordering::Relaxed);
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    pub fn durable_chunks(&self) -> u64 {
        self.durable_chunks.load(Ordering::Acquire)
    }

    pub fn durable_frames(&self) -> u64 {
        self.durable_frames.load(Ordering::Acquire)
    }

    pub fn lost_frames(&self) -> u64 {
        self.lost_frames.load(Ordering::Relaxed)
    }

    /// The newest durable timestamp, once a chunk is durable.
    pub fn durable_until(&self) -> Option<u64> {
        (self.durable_chunks.load(Ordering::Acquire) > 0)
            .then(|| self.durable_until.load(Ordering::Acquire))
    }

    /// The counters now, for a link whose buffer has `written` frames and holds `fill_frames`.
    pub fn snapshot(&self, link: u32, written: u64, fill_frames: u64) -> LinkCounters {
        let failed = self.failed();
        // The overwritten frames first: the writer counts them for good, then clears them, so
        // read in this order the sum never goes back (a Prometheus counter).
        let overwritten = self.overwritten_frames.load(Ordering::Acquire);
        LinkCounters {
            link,
            frames_in: written,
            durable_frames: self.durable_frames(),
            durable_chunks: self.durable_chunks(),
            durable_until_timestamp: self.durable_until(),
            lost_frames: self.lost_frames() + overwritten,
            buffer_fill_frames: fill_frames,
            // A failed link writes nothing more: nothing of it is at risk. What the buffer no
            // longer holds is not at risk either: it is lost.
            backlog_frames: if failed {
                0
            } else {
                written
                    .saturating_sub(self.cursor.load(Ordering::Relaxed))
                    .min(fill_frames)
            },
            failed,
            ingest: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_counts_what_was_acknowledged() {
        let l = LiveLink::default();
        assert_eq!(l.durable_until(), None);
        l.acknowledge(2, 20, 1000);
        l.acknowledge(1, 10, 1300);
        l.add_lost(3);
        l.set_cursor(25);
        let c = l.snapshot(4, 40, 40);
        assert_eq!(
            (
                c.durable_chunks,
                c.durable_frames,
                c.durable_until_timestamp
            ),
            (3, 30, Some(1300))
        );
        assert_eq!((c.lost_frames, c.backlog_frames, c.link), (3, 15, 4));
        // A writer stalled behind what the buffer holds: the overwritten frames show as lost,
        // and the backlog is at most what the buffer holds.
        l.set_overwritten(7);
        let c = l.snapshot(4, 140, 100);
        assert_eq!((c.lost_frames, c.backlog_frames), (10, 100));
        assert_eq!(l.lost_frames(), 3, "counted for good only by the writer");
        l.fail();
        assert_eq!(l.snapshot(4, 40, 40).backlog_frames, 0);

        let mut run = LinkCounters::default();
        run.add_burst(&c);
        run.add_burst(&LinkCounters::default());
        assert_eq!(
            run.durable_until_timestamp,
            Some(1300),
            "kept from the last burst with one"
        );
        assert_eq!(run.durable_frames, 30);
    }

    #[test]
    #[should_panic(expected = "the durable watermark went back")]
    fn a_watermark_that_goes_back_is_a_bug() {
        let l = LiveLink::default();
        l.acknowledge(1, 1, 1000);
        l.acknowledge(1, 1, 999);
    }
}
