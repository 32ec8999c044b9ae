//! io_uring's completions: submitting what is pending, waiting for completions with a deadline
//! (the request's own, counted from its submission, and a caller's shorter limit), and
//! processing them (short writes resubmitted, errors kept, an fsync's result noted).

use std::time::Instant;

use super::*;

impl UringSink {
    /// When the device has run out of time: the completion deadline after the oldest request
    /// still in flight was submitted (a wait now, for a synchronous read). A request is given
    /// its deadline however many shorter waits (`wait_in_place_within`) it spans.
    pub(super) fn stall_deadline(&self) -> Option<Instant> {
        let d = self.completion_deadline?;
        let oldest = self
            .in_flight
            .iter()
            .filter_map(|f| f.submitted)
            .chain(self.persist_started)
            .min()
            .unwrap_or_else(Instant::now);
        Some(oldest + d)
    }

    /// Submits what is pending and waits for `want` completions, until `limit` at most and
    /// never past the stall deadline (then `Stalled`). Ok(false): `limit` came first.
    pub(super) fn submit_by(&mut self, want: usize, limit: Option<Instant>) -> Result<bool> {
        let stall = self.stall_deadline();
        // A kernel that cannot bound a wait (no EXT_ARG) is given no limit either: the wait
        // would be refused (EINVAL) rather than cut short.
        let limit = limit.filter(|_| self.completion_deadline.is_some());
        let deadline = match (stall, limit) {
            (Some(s), Some(l)) => Some(s.min(l)),
            (s, l) => s.or(l),
        };
        match submit_and_wait_until(&mut self.ring, want, deadline) {
            Ok(got) => {
                // Submitted either way (the kernel took the SQEs before it waited).
                self.unsubmitted = 0;
                if got {
                    return Ok(true);
                }
                if stall.is_some_and(|s| Instant::now() >= s) {
                    self.stalled = true;
                    return Err(PersistError::Stalled {
                        op: "io_uring wait",
                        path: self.report.path.clone(),
                        waited: self.completion_deadline.unwrap_or_default(),
                    });
                }
                Ok(false)
            }
            Err(e) => Err(PersistError::io("io_uring_enter", &self.report.path, e)),
        }
    }

    pub(super) fn submit(&mut self, want: usize) -> Result<()> {
        self.submit_by(want, None).map(drop)
    }

    /// Waits for at least one completion and processes all that are ready. Returns the result of
    /// the read if its completion was among them; an fsync's is kept in `fsync_result`.
    pub(super) fn reap(&mut self) -> Result<Option<i32>> {
        loop {
            if let Some(read) = self.reap_by(None)? {
                return Ok(read);
            }
        }
    }

    /// `reap`, waiting until `limit` at most: None if nothing completed by then.
    pub(super) fn reap_by(&mut self, limit: Option<Instant>) -> Result<Option<Option<i32>>> {
        // Completions already posted need no system call; otherwise submit what is pending and
        // wait for one in a single io_uring_enter.
        if self.ring.completion().is_empty() {
            if !self.submit_by(1, limit)? {
                return Ok(None);
            }
        } else if self.unsubmitted > 0 {
            self.submit(0)?;
        }
        let mut read_result = None;
        let mut first_error = None;
        let mut completions = std::mem::take(&mut self.completions);
        completions.clear();
        completions.extend(self.ring.completion().map(|c| (c.user_data(), c.result())));
        for &(tag, res) in &completions {
            if tag == FSYNC_TAG {
                self.fsync_result = Some(res);
                continue;
            }
            if tag == READ_TAG {
                read_result = Some(res);
                continue;
            }
            debug_assert!(
                tag < u64::from(self.queue_depth),
                "a write's tag is its slot's index"
            );
            let slot = tag as u16;
            let f = &mut self.in_flight[slot as usize];
            debug_assert!(
                f.submitted.is_some() && f.done <= f.len,
                "a completion is of a write in flight"
            );
            let remaining = f.len - f.done;
            let outcome = if res < 0 {
                Err(PersistError::io(
                    "io_uring write",
                    &self.report.path,
                    std::io::Error::from_raw_os_error(-res),
                ))
            } else if res == 0 {
                Err(PersistError::ShortWrite {
                    op: "io_uring write",
                    path: self.report.path.clone(),
                    written: f.done,
                    expected: f.len,
                })
            } else if (res as usize) < remaining {
                // A short completion: the rest is still owed. Resubmit it from the same slot;
                // an fdatasync already submitted does not cover it (`finish_persist_within`).
                f.done += res as usize;
                self.fsync_stale |= self.persist_started.is_some();
                if let Err(e) = self.push_write(slot) {
                    first_error.get_or_insert(e);
                }
                continue;
            } else {
                Ok(())
            };
            let f = &mut self.in_flight[slot as usize];
            if let Some(t) = f.submitted.take() {
                if self.latencies_ns.len() < MAX_PENDING_LATENCIES {
                    self.latencies_ns.push(t.elapsed().as_nanos() as u64);
                }
            }
            self.in_flight_count -= 1;
            self.free_slots.push(slot);
            if let Err(e) = outcome {
                first_error.get_or_insert(e);
            }
        }
        self.completions = completions;
        debug_assert_eq!(
            self.free_slots.len() + self.in_flight_count,
            self.queue_depth as usize,
            "every slot is free or in flight"
        );
        debug_assert!(
            self.latencies_ns.len() <= MAX_PENDING_LATENCIES,
            "the latencies kept between drains are bounded"
        );
        match first_error {
            Some(e) => Err(e),
            None => Ok(Some(read_result)),
        }
    }

    pub(super) fn wait_all_writes(&mut self) -> Result<()> {
        while self.in_flight_count > 0 {
            self.reap()?;
        }
        Ok(())
    }

    /// Waits for every write in flight even when some fail, so that none still reads a
    /// caller's memory; returns the first error. Bounded: when the device stops completing it
    /// gives up at the first wait past its deadline, and if io_uring_enter itself keeps failing
    /// (no completion arrives), after `MAX_FAILED_WAITS` attempts, with the error (the sink is
    /// failed then anyway; what may still read the memory is kept, see `wait_in_place`).
    pub(super) fn wait_all_writes_through_errors(
        &mut self,
        limit: Option<Instant>,
    ) -> Result<bool> {
        const MAX_FAILED_WAITS: u32 = 1000;
        let mut first_error = None;
        let mut failed_waits = 0;
        while self.in_flight_count > 0 && failed_waits < MAX_FAILED_WAITS {
            let before = self.in_flight_count;
            // After an error the rest is waited for to the stall deadline, not to `limit`.
            let by = if first_error.is_none() { limit } else { None };
            match self.reap_by(by) {
                Ok(Some(_)) => {}
                // `limit` came first: still in flight, nothing failed.
                Ok(None) => {
                    debug_assert!(by.is_some(), "only a caller's limit cuts a wait short");
                    return Ok(false);
                }
                Err(e) => {
                    let stalled = matches!(e, PersistError::Stalled { .. });
                    first_error.get_or_insert(e);
                    if stalled {
                        break;
                    }
                    if self.in_flight_count == before {
                        failed_waits += 1;
                    }
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => {
                debug_assert_eq!(self.in_flight_count, 0, "every write was waited for");
                Ok(true)
            }
        }
    }
}
