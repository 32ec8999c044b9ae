//! Fault injection around a real backend, for reliability tests of the whole recorder
//! (`snbuf record --inject-fault ...`): the data still goes to a real file through a real
//! method, and at a chosen point a write or a persist fails the way the kernel would report it,
//! or the medium is throttled to a set rate.
//!
//! An injected failed persist does not call the backend's persist, and later calls go through
//! to the backend again: exactly the kernel that reports a failed fsync once and succeeds on the
//! next, after dropping the dirty pages. Wrapped in `Latched` (as `inject` does), the sink must
//! never report success after it; the tests check that nothing written before the failure and
//! after the last good persist is ever acknowledged.
//!
//! A write the recorder starts in place (io_uring: from the latency buffer, left in flight)
//! goes to the backend's queue as without faults, and a `Write` fault it crosses is reported
//! when it completes, as the kernel reports an I/O error on a request already under way. Faults
//! that act per write (`Slow`, `LateFlush`) take the synchronous path instead.

use std::time::{Duration, Instant};

use crate::error::{PersistError, Result};
use crate::latch::Latched;
use crate::sink::{Sink, SinkReport};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// The write that would take the file past `after_bytes` written fails with `errno`.
    Write { errno: i32, after_bytes: u64 },
    /// Persist number `after_persists + 1` fails with EIO (the first `after_persists` succeed).
    Persist { after_persists: u64 },
    /// Writes go no faster than this (a slow or congested medium).
    Slow { bytes_per_s: u64 },
    /// Every persist reports success and does nothing: a drive or a stack that drops cache
    /// flushes, or a recorder that never calls fdatasync after its writes. Only a power cut
    /// shows it (bench/powercut.sh must catch it).
    LostFlush,
    /// Every persist reports success at once and makes the data durable only when the next
    /// write comes: acknowledged before it was durable. Again only a power cut shows it.
    LateFlush,
    /// Directory fsyncs are skipped (the whole unit, not a link): a burst's creation and its
    /// sealed manifest are renames that a power cut can undo. See `crate::replace`.
    LostDirSync,
}

/// One injected fault, and the link it applies to (all links when `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultPlan {
    pub kind: FaultKind,
    pub link: Option<u32>,
}

/// Why an `--inject-fault` specification does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("fault {spec:?}: {problem}")]
pub struct BadFault {
    pub spec: String,
    pub problem: FaultProblem,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FaultProblem {
    #[error("unknown fault kind {0:?} (write-eio, write-enospc, persist-eio, slow, lost-flush, late-flush, lost-dir-sync)")]
    UnknownKind(String),
    #[error("{0:?} is not key=value")]
    NotKeyValue(String),
    #[error("unknown key {0:?} (link, after, rate)")]
    UnknownKey(String),
    #[error("link {0:?} is not a link number")]
    BadLink(String),
    #[error("after: {0}")]
    BadSize(snbuf_units::UnitError),
    #[error("after must count persists")]
    AfterNotACount,
    #[error("slow needs rate=RATE")]
    SlowWithoutRate,
    #[error("rate: {0}")]
    BadRate(snbuf_units::UnitError),
    #[error("rate must be more than 0")]
    ZeroRate,
    #[error("rate applies to slow only")]
    RateNotSlow,
    #[error("{0} takes no keys: it applies to every link")]
    TakesNoKeys(&'static str),
}

impl FaultPlan {
    /// Parses `KIND[:key=value,...]`:
    /// `write-eio:link=1,after=4MiB`, `write-enospc:after=1MiB`, `persist-eio:link=0,after=3`,
    /// `slow:rate=50MB/s`.
    pub fn parse(s: &str) -> std::result::Result<FaultPlan, BadFault> {
        let bad = |problem: FaultProblem| BadFault {
            spec: s.to_string(),
            problem,
        };
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let mut link = None;
        let mut after: Option<&str> = None;
        let mut rate: Option<&str> = None;
        for kv in rest.split(',').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(FaultProblem::NotKeyValue(kv.to_string())))?;
            match k {
                "link" => {
                    link = Some(
                        v.parse::<u32>()
                            .map_err(|_| bad(FaultProblem::BadLink(v.to_string())))?,
                    )
                }
                "after" => after = Some(v),
                "rate" => rate = Some(v),
                _ => return Err(bad(FaultProblem::UnknownKey(k.to_string()))),
            }
        }
        let bytes = |v: Option<&str>| -> std::result::Result<u64, BadFault> {
            v.map(|v| snbuf_units::parse_bytes(v).map_err(|e| bad(FaultProblem::BadSize(e))))
                .unwrap_or(Ok(0))
        };
        let kind = match kind {
            "write-eio" => FaultKind::Write {
                errno: libc::EIO,
                after_bytes: bytes(after)?,
            },
            "write-enospc" => FaultKind::Write {
                errno: libc::ENOSPC,
                after_bytes: bytes(after)?,
            },
            "persist-eio" => FaultKind::Persist {
                after_persists: after
                    .map(|v| v.parse::<u64>())
                    .unwrap_or(Ok(0))
                    .map_err(|_| bad(FaultProblem::AfterNotACount))?,
            },
            "slow" => {
                let r = rate.ok_or_else(|| bad(FaultProblem::SlowWithoutRate))?;
                let bytes_per_s = snbuf_units::parse_rate_bytes_per_s(r)
                    .map_err(|e| bad(FaultProblem::BadRate(e)))?;
                if bytes_per_s == 0 {
                    return Err(bad(FaultProblem::ZeroRate));
                }
                FaultKind::Slow { bytes_per_s }
            }
            "lost-flush" | "late-flush" | "lost-dir-sync" => {
                let (name, k) = match kind {
                    "lost-flush" => ("lost-flush", FaultKind::LostFlush),
                    "late-flush" => ("late-flush", FaultKind::LateFlush),
                    _ => ("lost-dir-sync", FaultKind::LostDirSync),
                };
                if !rest.is_empty() {
                    return Err(bad(FaultProblem::TakesNoKeys(name)));
                }
                k
            }
            _ => return Err(bad(FaultProblem::UnknownKind(kind.to_string()))),
        };
        if rate.is_some() && !matches!(kind, FaultKind::Slow { .. }) {
            return Err(bad(FaultProblem::RateNotSlow));
        }
        Ok(FaultPlan { kind, link })
    }

    pub fn applies_to(&self, link: u32) -> bool {
        self.link.is_none_or(|l| l == link)
    }
}

/// A sink with faults injected (see the module comment).
pub struct Faulty<S> {
    inner: S,
    faults: Vec<FaultKind>,
    written_bytes: u64,
    persists: u64,
    /// When the first write came, for throttling.
    since: Option<Instant>,
    /// `LateFlush`: a persist was acknowledged and not yet done (it is, before the next write).
    flush_owed: bool,
    /// A write started in place crossed a `Write` fault: its completion reports this errno.
    failed_completion: Option<i32>,
}

/// Wraps `sink` with `faults` and latches its first failure, as `open` does for a backend.
pub fn inject<S: Sink>(sink: S, faults: Vec<FaultKind>) -> Latched<Faulty<S>> {
    Latched::new(Faulty {
        inner: sink,
        faults,
        written_bytes: 0,
        persists: 0,
        since: None,
        flush_owed: false,
        failed_completion: None,
    })
}

impl<S: Sink> Faulty<S> {
    /// The errno of the first `Write` fault a write ending at `end` bytes crosses.
    fn write_fault(&self, end: u64) -> Option<i32> {
        self.faults.iter().find_map(|f| match *f {
            FaultKind::Write { errno, after_bytes } if end > after_bytes => Some(errno),
            _ => None,
        })
    }

    /// Whether writes started in place go to the backend's own queue (io_uring keeps them in
    /// flight): yes, unless a fault acts per write (pacing, a flush owed before the next
    /// write), which `write_at` applies.
    fn queues_in_place(&self) -> bool {
        !self
            .faults
            .iter()
            .any(|f| matches!(f, FaultKind::Slow { .. } | FaultKind::LateFlush))
    }

    fn injected(&self, op: &'static str, errno: i32) -> PersistError {
        PersistError::io(
            op,
            self.inner.report().path.clone(),
            std::io::Error::from_raw_os_error(errno),
        )
    }
}

impl<S: Sink> Sink for Faulty<S> {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
        let end = self.written_bytes + data.len() as u64;
        if let Some(errno) = self.write_fault(end) {
            return Err(self.injected("write (injected fault)", errno));
        }
        if std::mem::take(&mut self.flush_owed) {
            self.inner.persist()?;
        }
        self.inner.write_at(offset, data)?;
        self.written_bytes = end;
        for f in &self.faults {
            if let FaultKind::Slow { bytes_per_s } = *f {
                // Sleep until the bytes written so far are due at the set rate: an average over
                // the whole run, so the medium never runs ahead of it.
                let since = *self.since.get_or_insert_with(Instant::now);
                let due = Duration::from_secs_f64(end as f64 / bytes_per_s as f64);
                if let Some(wait) = due.checked_sub(since.elapsed()) {
                    std::thread::sleep(wait);
                }
            }
        }
        Ok(())
    }

    /// Started on the backend's own queue, and a `Write` fault it crosses reported when it
    /// completes (`wait_in_place`), as the kernel reports an I/O error: the request was in
    /// flight, and what it left on the medium is unknown.
    fn start_in_place(
        &mut self,
        offset: u64,
        parts: &[&[u8]],
        held: &std::sync::Arc<dyn crate::sink::HeldMemory>,
    ) -> Result<()> {
        if !self.queues_in_place() {
            return self.write_in_place(offset, parts);
        }
        let end = self.written_bytes + parts.iter().map(|p| p.len() as u64).sum::<u64>();
        self.inner.start_in_place(offset, parts, held)?;
        self.written_bytes = end;
        if let Some(errno) = self.write_fault(end) {
            self.failed_completion.get_or_insert(errno);
        }
        Ok(())
    }

    fn wait_in_place(&mut self) -> Result<()> {
        // Waited for whatever happens: the caller may reuse the memory once this returns.
        let waited = self.inner.wait_in_place();
        if let Some(errno) = self.failed_completion.take() {
            return Err(self.injected("write completion (injected fault)", errno));
        }
        waited
    }

    fn persist(&mut self) -> Result<()> {
        // A failed write is never made durable as if it had worked.
        if let Some(errno) = self.failed_completion.take() {
            return Err(self.injected("write completion (injected fault)", errno));
        }
        for f in &self.faults {
            if let FaultKind::Persist { after_persists } = *f {
                if self.persists == after_persists {
                    self.persists += 1;
                    return Err(self.injected("fdatasync (injected fault)", libc::EIO));
                }
            }
        }
        self.persists += 1;
        if self.faults.contains(&FaultKind::LostFlush) {
            return Ok(());
        }
        if self.faults.contains(&FaultKind::LateFlush) {
            self.flush_owed = true;
            return Ok(());
        }
        self.inner.persist()
    }

    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(offset, buf)
    }

    fn report(&self) -> &SinkReport {
        self.inner.report()
    }

    fn drain_completion_latencies_ns(&mut self, record: &mut dyn FnMut(u64)) -> bool {
        self.inner.drain_completion_latencies_ns(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{open, Method, SinkConfig};

    #[test]
    fn plans_parse_and_bad_ones_say_why() {
        let p = FaultPlan::parse("write-eio:link=1,after=4KiB").unwrap();
        assert_eq!(p.link, Some(1));
        assert_eq!(
            p.kind,
            FaultKind::Write {
                errno: libc::EIO,
                after_bytes: 4096
            }
        );
        assert!(p.applies_to(1) && !p.applies_to(0));
        let p = FaultPlan::parse("persist-eio:after=3").unwrap();
        assert_eq!(p.kind, FaultKind::Persist { after_persists: 3 });
        assert!(p.applies_to(7));
        assert_eq!(
            FaultPlan::parse("lost-flush").unwrap().kind,
            FaultKind::LostFlush
        );
        assert_eq!(
            FaultPlan::parse("late-flush").unwrap().kind,
            FaultKind::LateFlush
        );
        assert_eq!(
            FaultPlan::parse("lost-dir-sync").unwrap().kind,
            FaultKind::LostDirSync
        );
        let p = FaultPlan::parse("slow:rate=1MB/s").unwrap();
        assert_eq!(
            p.kind,
            FaultKind::Slow {
                bytes_per_s: 1_000_000
            }
        );
        for bad in [
            "boom",
            "slow",
            "slow:rate=0B/s",
            "write-eio:link=x",
            "write-eio:after=lots",
            "persist-eio:after=1MiB",
            "write-eio:when=1",
            "write-eio:rate=1MB/s",
            "write-eio:link",
            "lost-flush:link=1",
            "lost-dir-sync:after=2",
        ] {
            let e = FaultPlan::parse(bad).unwrap_err().to_string();
            assert!(!e.contains('\n') && e.contains("fault"), "{bad}: {e}");
        }
    }

    #[test]
    fn an_injected_fsync_failure_is_latched_over_a_real_backend() {
        let dir = tempfile::tempdir().unwrap();
        let sink = open(&SinkConfig::new(
            Method::Buffered,
            dir.path().join("f"),
            1 << 20,
        ))
        .unwrap();
        let mut s = inject(sink, vec![FaultKind::Persist { after_persists: 1 }]);
        s.write_at(0, &[1; 4096]).unwrap();
        s.persist().unwrap();
        s.write_at(4096, &[2; 4096]).unwrap();
        let e = s.persist().unwrap_err();
        assert!(e.to_string().contains("injected"), "{e}");
        // The backend would succeed now; the latch must not let it.
        let again = s.persist().unwrap_err();
        assert!(matches!(again, PersistError::Latched { .. }), "{again:?}");
        assert!(s.write_at(8192, &[3; 4096]).is_err());
    }

    #[test]
    fn an_injected_write_failure_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let sink = open(&SinkConfig::new(Method::Buffered, &path, 1 << 20)).unwrap();
        let mut s = inject(
            sink,
            vec![FaultKind::Write {
                errno: libc::EIO,
                after_bytes: 8192,
            }],
        );
        s.write_at(0, &[1; 4096]).unwrap();
        s.write_at(4096, &[1; 4096]).unwrap();
        let e = s.write_at(8192, &[9; 4096]).unwrap_err();
        assert!(matches!(e, PersistError::Io { .. }), "{e:?}");
        s.persist().unwrap_err();
        let mut back = vec![0u8; 4096];
        let mut r = open(&SinkConfig::new(Method::Buffered, &path, 1 << 20)).unwrap();
        r.read_at(8192, &mut back).unwrap();
        assert!(
            back.iter().all(|&b| b != 9),
            "the failed write left no data"
        );
    }

    /// Memory a queued write may go on reading: kept by the sink until the write is over.
    struct Held(crate::AlignedBuf);

    impl crate::sink::HeldMemory for Held {
        fn address_range(&self) -> std::ops::Range<usize> {
            let start = self.0.as_slice().as_ptr() as usize;
            start..start + self.0.len()
        }
    }

    #[test]
    fn a_write_started_in_place_fails_when_it_completes_and_stays_failed() {
        let methods = [Method::Uring, Method::Direct, Method::Buffered];
        for method in methods
            .into_iter()
            .filter(|m| *m != Method::Uring || crate::backends::uring::available().is_ok())
        {
            let dir = tempfile::tempdir().unwrap();
            let sink = open(&SinkConfig::new(method, dir.path().join("f"), 1 << 20)).unwrap();
            let mut s = inject(
                sink,
                vec![FaultKind::Write {
                    errno: libc::EIO,
                    after_bytes: 8192,
                }],
            );
            let mut buf = crate::AlignedBuf::new(16384, crate::PageSize::Small4K).unwrap();
            buf.as_mut_slice().fill(7);
            let held: std::sync::Arc<dyn crate::sink::HeldMemory> = std::sync::Arc::new(Held(buf));
            let range = held.address_range();
            // SAFETY: the range is the held buffer's, alive as long as `held`, and nothing
            // writes it while these slices exist.
            let bytes = unsafe { std::slice::from_raw_parts(range.start as *const u8, 16384) };
            s.start_in_place(0, &[&bytes[..8192]], &held).unwrap();
            s.wait_in_place().unwrap();
            // Crossing the fault: accepted at submission, failed at completion.
            s.start_in_place(8192, &[&bytes[8192..]], &held)
                .unwrap_or_else(|e| panic!("{method}: refused at submission: {e}"));
            let e = s.wait_in_place().unwrap_err();
            assert!(e.to_string().contains("write completion"), "{method}: {e}");
            // Never made durable, never written again as if it had worked.
            s.persist().unwrap_err();
            s.start_in_place(0, &[&bytes[..4096]], &held).unwrap_err();
        }
    }

    /// A real sink that counts the persists reaching it.
    struct Counting<S>(S, std::sync::Arc<std::sync::atomic::AtomicU32>);

    impl<S: Sink> Sink for Counting<S> {
        fn write_at(&mut self, offset: u64, data: &[u8]) -> Result<()> {
            self.0.write_at(offset, data)
        }
        fn persist(&mut self) -> Result<()> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.0.persist()
        }
        fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> Result<()> {
            self.0.read_at(offset, buf)
        }
        fn report(&self) -> &SinkReport {
            self.0.report()
        }
    }

    #[test]
    fn lost_and_late_flushes_say_they_persisted_when_they_did_not() {
        let dir = tempfile::tempdir().unwrap();
        let counted = |kind: FaultKind, name: &str| {
            let real = open(&SinkConfig::new(
                Method::Buffered,
                dir.path().join(name),
                1 << 20,
            ))
            .unwrap();
            let n = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
            (inject(Counting(real, n.clone()), vec![kind]), n)
        };
        let (mut lost, n) = counted(FaultKind::LostFlush, "lost");
        for k in 0..3 {
            lost.write_at(k * 4096, &[1; 4096]).unwrap();
            lost.persist().unwrap();
        }
        assert_eq!(
            n.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "a lost flush never reaches the medium"
        );
        let (mut late, n) = counted(FaultKind::LateFlush, "late");
        late.write_at(0, &[1; 4096]).unwrap();
        late.persist().unwrap();
        assert_eq!(
            n.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "acknowledged, not yet persisted"
        );
        late.write_at(4096, &[2; 4096]).unwrap();
        assert_eq!(
            n.load(std::sync::atomic::Ordering::Relaxed),
            1,
            "persisted when the next write came"
        );
        late.persist().unwrap();
        assert_eq!(n.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
