//! Latching of failures: after an I/O error, a sink refuses everything.
//!
//! PostgreSQL's fsync bug taught the field that a failed fsync may have dropped the dirty pages
//! it was flushing: retrying it can return success with the data gone. So the first error that
//! leaves the target in an unknown state is remembered, and every later call fails with it. The
//! caller marks that link's burst failed; other sinks (other links) carry on.

use crate::error::{PersistError, Result};
use crate::sink::{Hold, Sink, SinkReport};

pub struct Latched<S> {
    inner: S,
    failure: Option<String>,
}

impl<S: Sink> Latched<S> {
    pub fn new(inner: S) -> Self {
        Latched {
            inner,
            failure: None,
        }
    }

    /// The first error that poisoned the sink, if any.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// The error every call returns once the sink has failed. Cold: the hot path is one branch.
    #[cold]
    #[inline(never)]
    fn latched_error(&self) -> PersistError {
        assert!(
            self.failure.is_some(),
            "only a sink that failed answers with its failure"
        );
        PersistError::Latched {
            path: self.inner.report().path.clone(),
            cause: self.failure.clone().unwrap_or_default(),
        }
    }

    /// Remembers the first error that leaves the target in an unknown state.
    #[cold]
    #[inline(never)]
    fn record(&mut self, e: PersistError) -> PersistError {
        if e.poisons_sink() && self.failure.is_none() {
            self.failure = Some(e.to_string());
        }
        assert!(
            !e.poisons_sink() || self.failure.is_some(),
            "an error that poisons the sink is latched"
        );
        e
    }
}

/// Runs one call on the inner sink unless it has failed, latching a new failure.
macro_rules! latched_call {
    ($self:ident, $call:expr) => {{
        if $self.failure.is_some() {
            return Err($self.latched_error());
        }
        match $call {
            Ok(v) => Ok(v),
            Err(e) => Err($self.record(e)),
        }
    }};
}

impl<S: Sink> Sink for Latched<S> {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        latched_call!(self, self.inner.write_at(offset, data))
    }

    fn persist(&mut self) -> Result<()> {
        latched_call!(self, self.inner.persist())
    }

    fn write_persist_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        latched_call!(self, self.inner.write_persist_at(offset, data))
    }

    fn write_in_place(&mut self, offset: u64, parts: &[&[u8]]) -> Result<()> {
        latched_call!(self, self.inner.write_in_place(offset, parts))
    }

    fn write_in_place_checksummed(&mut self, offset: u64, parts: &[&[u8]]) -> Result<u32> {
        latched_call!(self, self.inner.write_in_place_checksummed(offset, parts))
    }

    fn start_in_place(&mut self, offset: u64, parts: &[&[u8]], held: &Hold) -> Result<()> {
        latched_call!(self, self.inner.start_in_place(offset, parts, held))
    }

    fn wait_in_place(&mut self) -> Result<()> {
        // Not refused after a failure: writes already submitted are still waited for.
        match self.inner.wait_in_place() {
            Ok(()) => Ok(()),
            Err(e) => Err(self.record(e)),
        }
    }

    fn wait_in_place_within(&mut self, limit: Option<std::time::Instant>) -> Result<bool> {
        match self.inner.wait_in_place_within(limit) {
            Ok(done) => Ok(done),
            Err(e) => Err(self.record(e)),
        }
    }

    fn start_persist(&mut self) -> Result<()> {
        latched_call!(self, self.inner.start_persist())
    }

    fn finish_persist(&mut self) -> Result<()> {
        latched_call!(self, self.inner.finish_persist())
    }

    fn finish_persist_within(&mut self, limit: Option<std::time::Instant>) -> Result<bool> {
        latched_call!(self, self.inner.finish_persist_within(limit))
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        latched_call!(self, self.inner.read_at(offset, buf))
    }

    fn report(&self) -> &SinkReport {
        self.inner.report()
    }

    /// Refused once latched. A file that could not be grown for want of space, or by a method
    /// that cannot, is as it was, and what it holds stays good: that does not latch. Any other
    /// failure does (a mapped sink persists what it holds before mapping the file anew).
    fn grow(&mut self, region_bytes: u64) -> Result<()> {
        if self.failure.is_some() {
            return Err(self.latched_error());
        }
        match self.inner.grow(region_bytes) {
            // Nothing was written: no room for the longer file, or a method that cannot grow.
            Err(
                e @ (PersistError::NoSpace { op: "grow", .. } | PersistError::Unsupported { .. }),
            ) => Err(e),
            // Anything else (a persist before a mapping is redone failing) latches as usual.
            Err(e) => Err(self.record(e)),
            Ok(()) => {
                assert!(
                    self.inner.report().region_bytes >= region_bytes,
                    "a region grown to {region_bytes} B holds at least that"
                );
                Ok(())
            }
        }
    }

    fn drain_completion_latencies_ns(&mut self, record: &mut dyn FnMut(u64)) -> bool {
        self.inner.drain_completion_latencies_ns(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::Medium;
    use crate::sink::Durability;
    use crate::Method;

    /// A sink whose first persist fails like a failed fsync and whose later ones "succeed", the
    /// way a kernel that dropped the dirty pages would report.
    struct FailsOnce {
        persists: u32,
        report: SinkReport,
    }

    impl Sink for FailsOnce {
        fn write_at(&mut self, _: u64, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn persist(&mut self) -> Result<()> {
            self.persists += 1;
            if self.persists == 1 {
                Err(PersistError::io(
                    "fdatasync",
                    "/x",
                    std::io::Error::from_raw_os_error(libc::EIO),
                ))
            } else {
                Ok(())
            }
        }
        fn read_at(&mut self, _: u64, _: &mut [u8]) -> Result<()> {
            Ok(())
        }
        fn report(&self) -> &SinkReport {
            &self.report
        }
    }

    #[test]
    fn a_failed_fsync_is_never_retried_as_if_it_worked() {
        let report = SinkReport {
            method: Method::Buffered,
            path: "/x".into(),
            region_bytes: 1 << 20,
            medium: Medium {
                fs_type: "ext4".into(),
                dax: false,
                volatile: false,
                dio_offset_align_bytes: None,
                dio_mem_align_bytes: None,
            },
            durability: Durability::Fdatasync,
            alignment_bytes: 1,
            instruction_path: "pwrite".into(),
            pages: None,
            notes: vec![],
        };
        let mut s = Latched::new(FailsOnce {
            persists: 0,
            report,
        });
        s.write_at(0, b"a").unwrap();
        assert!(s.persist().is_err());
        let again = s.persist().unwrap_err();
        assert!(again.to_string().contains("fdatasync"), "{again}");
        assert!(matches!(again, PersistError::Latched { .. }));
        assert!(s.write_at(0, b"b").is_err());
        assert_eq!(s.inner.persists, 1, "the inner fsync was not called again");
        assert!(s.failure().unwrap().contains("Input/output error"));
    }
}
