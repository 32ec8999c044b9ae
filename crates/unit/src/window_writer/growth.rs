//! A link's file growing with its window: a step ahead of the writes toward the region the
//! window needs (larger than the prepared files, or moved out by a join), and by a quarter
//! more when a denser stream than planned fills it.

use super::*;

impl LinkWork<'_> {
    /// Grows the link's file toward `window_region` (the room the window needs: more than the
    /// prepared files had, or moved out by a join) a step ahead of its writes, so that no chunk
    /// finds it full: never all at once, since growing a file on memory (tmpfs) zeroes its
    /// pages, and zeroing 100 s of file would hold this writer while the window's oldest frames
    /// age out of the buffer.
    pub(super) fn grow_ahead(&mut self, window_region: u64, job: &WindowJob) {
        let have = self.lw.region_bytes();
        let ahead = job.grow_ahead_bytes;
        debug_assert!(ahead > 0, "files grow by some bytes");
        if window_region <= have
            || self.c.grow_failed_for >= window_region
            || self.lw.written_bytes() + ahead < have
        {
            return;
        }
        let to = window_region.min(self.lw.written_bytes() + 2 * ahead);
        match self.lw.grow(to) {
            Ok(()) => {
                let now = self.lw.region_bytes();
                assert!(now >= have, "a link's file only grows");
                job.reach.allocated(now - have);
            }
            Err(e) => {
                self.c.grow_failed_for = window_region;
                tracing::warn!(link = self.lw.link(), error = %e,
                    "the link's file cannot grow for its window: it stops when full");
            }
        }
    }

    /// The link brought more frames than its file was sized for (a stream denser than
    /// planned): grows the file by a quarter (at least 16 MiB), as far as the output (and, on a
    /// memory-backed one, memory) has room for it. Returns whether it grew; if not, says why,
    /// and the link stops full.
    pub(super) fn grow_for_more(&mut self, job: &WindowJob) -> bool {
        let now = self.lw.region_bytes();
        let to = (now + (now / 4).max(GROW_AT_LEAST_BYTES)).min((job.room_to_grow)(now));
        if to <= now {
            tracing::error!(
                link = self.lw.link(),
                at_bytes = now,
                "the link's file is full and its output has no room for more"
            );
            return false;
        }
        match self.lw.grow(to) {
            Ok(()) if self.lw.region_bytes() > now => {
                // Only what the window was promised counts as taken: growth past it is room
                // no join counted on.
                let promised = job.reach.now().region_bytes;
                job.reach.allocated(
                    self.lw
                        .region_bytes()
                        .min(promised)
                        .saturating_sub(now.min(promised)),
                );
                tracing::info!(
                    link = self.lw.link(),
                    from_bytes = now,
                    to_bytes = to,
                    "the link brought more frames than its file was sized for: it grew"
                );
                true
            }
            Ok(()) => false,
            Err(e) => {
                tracing::error!(link = self.lw.link(), at_bytes = now, error = %e,
                    "the link's file is full and cannot grow");
                false
            }
        }
    }
}

/// How far ahead of its writes a link's file grows toward its window's region: a second of the
/// link's data (`frames_per_s` frames of `frame_bytes`), at least 16 MiB. Enough that the writer
/// never finds the file full between two turns, small enough that zeroing it on memory (tmpfs)
/// takes a fraction of that second.
pub(crate) fn grow_ahead_bytes(frames_per_s: f64, frame_bytes: usize) -> u64 {
    const AHEAD_S: f64 = 1.0;
    let bytes = (frames_per_s * frame_bytes as f64 * AHEAD_S).min(u64::MAX as f64 / 4.0) as u64;
    bytes.max(16 << 20)
}
