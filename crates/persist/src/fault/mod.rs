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
//!
//! Two faults act on the completion of a write started in place, as a device that reads the
//! memory it was given by DMA when it gets round to it: `SlowCompletion` carries the write out
//! only when its delay is over, from the memory as it is then (a latency buffer the link has
//! overwritten meanwhile, in the zero-copy guard's test), and `Stall` never completes it, so
//! the wait ends at the sink's completion deadline with `PersistError::Stalled`, as io_uring's
//! does (`backends::uring_wait`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{PersistError, Result};
use crate::latch::Latched;
use crate::sink::{held_in, HeldMemory, Hold, Sink, SinkReport};

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
    /// The burst's directory fsyncs are skipped (all its links, not one): its creation and its
    /// manifest's replacements are renames that a power cut can undo. Nothing else of the unit
    /// is touched. See `crate::replace` and `snbuf_burst::manifest::directory_syncs_lost`.
    LostDirSync,
    /// Writes started in place that take the file past `after_bytes` complete `delay` late,
    /// and the device reads their memory only then (see the module comment).
    SlowCompletion { delay: Duration, after_bytes: u64 },
    /// Writes started in place that take the file past `after_bytes` never complete: a device
    /// that stopped answering. The wait gives up at the completion deadline.
    Stall { after_bytes: u64 },
    /// The write that takes the file past `after_bytes` blocks in the call and never returns:
    /// a `pwrite` or `fdatasync` stuck in the kernel on a dead device, which no deadline of the
    /// sink's can cut short. Only the recorder's watchdog gets the link out.
    Hang { after_bytes: u64 },
}

/// How long a `Hang` blocks: longer than any trial waits.
const HANG_FOR: Duration = Duration::from_secs(24 * 3600);

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
    #[error("unknown fault kind {0:?} (write-eio, write-enospc, persist-eio, slow, slow-completion, stall, hang, lost-flush, late-flush, lost-dir-sync)")]
    UnknownKind(String),
    #[error("{0:?} is not key=value")]
    NotKeyValue(String),
    #[error("unknown key {0:?} (link, after, rate, delay)")]
    UnknownKey(String),
    #[error("link {0:?} is not a link number")]
    BadLink(String),
    #[error("after: {0}")]
    BadSize(snbuf_quantity::QuantityError),
    #[error("after must count persists")]
    AfterNotACount,
    #[error("slow needs rate=RATE")]
    SlowWithoutRate,
    #[error("rate: {0}")]
    BadRate(snbuf_quantity::QuantityError),
    #[error("rate must be more than 0")]
    ZeroRate,
    #[error("rate applies to slow only")]
    RateNotSlow,
    #[error("slow-completion needs delay=TIME")]
    SlowCompletionWithoutDelay,
    #[error("delay: {0}")]
    BadDelay(snbuf_quantity::QuantityError),
    #[error("delay applies to slow-completion only")]
    DelayNotSlowCompletion,
    #[error("{0} takes no keys: it applies to every link")]
    TakesNoKeys(&'static str),
}

impl FaultPlan {
    /// Parses `KIND[:key=value,...]`:
    /// `write-eio:link=1,after=4MiB`, `write-enospc:after=1MiB`, `persist-eio:link=0,after=3`,
    /// `slow:rate=50MB/s`, `slow-completion:delay=500ms,after=1MiB`, `stall:link=1,after=2MiB`,
    /// `hang:link=0,after=2MiB`.
    pub fn parse(s: &str) -> std::result::Result<FaultPlan, BadFault> {
        let bad = |problem: FaultProblem| BadFault {
            spec: s.to_string(),
            problem,
        };
        let (kind, rest) = s.split_once(':').unwrap_or((s, ""));
        let keys = FaultKeys::parse(rest).map_err(bad)?;
        let kind = keys.kind(kind).map_err(bad)?;
        if keys.rate.is_some() && !matches!(kind, FaultKind::Slow { .. }) {
            return Err(bad(FaultProblem::RateNotSlow));
        }
        if keys.delay.is_some() && !matches!(kind, FaultKind::SlowCompletion { .. }) {
            return Err(bad(FaultProblem::DelayNotSlowCompletion));
        }
        Ok(FaultPlan {
            kind,
            link: keys.link,
        })
    }

    pub fn applies_to(&self, link: u32) -> bool {
        self.link.is_none_or(|l| l == link)
    }
}

/// The `key=value` part of a fault's spec, each key at most once as written.
#[derive(Default)]
struct FaultKeys<'a> {
    given: bool,
    link: Option<u32>,
    after: Option<&'a str>,
    rate: Option<&'a str>,
    delay: Option<&'a str>,
}

impl<'a> FaultKeys<'a> {
    fn parse(rest: &'a str) -> std::result::Result<FaultKeys<'a>, FaultProblem> {
        let mut keys = FaultKeys {
            given: !rest.is_empty(),
            ..Default::default()
        };
        for kv in rest.split(',').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| FaultProblem::NotKeyValue(kv.to_string()))?;
            match k {
                "link" => {
                    keys.link = Some(
                        v.parse::<u32>()
                            .map_err(|_| FaultProblem::BadLink(v.to_string()))?,
                    )
                }
                "after" => keys.after = Some(v),
                "rate" => keys.rate = Some(v),
                "delay" => keys.delay = Some(v),
                _ => return Err(FaultProblem::UnknownKey(k.to_string())),
            }
        }
        Ok(keys)
    }

    /// `after=` as bytes (0 when not given).
    fn after_bytes(&self) -> std::result::Result<u64, FaultProblem> {
        self.after
            .map(|v| snbuf_quantity::parse_bytes(v).map_err(FaultProblem::BadSize))
            .unwrap_or(Ok(0))
    }

    /// The fault `kind` names, with these keys.
    fn kind(&self, kind: &str) -> std::result::Result<FaultKind, FaultProblem> {
        Ok(match kind {
            "write-eio" => FaultKind::Write {
                errno: libc::EIO,
                after_bytes: self.after_bytes()?,
            },
            "write-enospc" => FaultKind::Write {
                errno: libc::ENOSPC,
                after_bytes: self.after_bytes()?,
            },
            "persist-eio" => FaultKind::Persist {
                after_persists: self
                    .after
                    .map(|v| v.parse::<u64>())
                    .unwrap_or(Ok(0))
                    .map_err(|_| FaultProblem::AfterNotACount)?,
            },
            "slow" => {
                let r = self.rate.ok_or(FaultProblem::SlowWithoutRate)?;
                let bytes_per_s =
                    snbuf_quantity::parse_rate_bytes_per_s(r).map_err(FaultProblem::BadRate)?;
                if bytes_per_s == 0 {
                    return Err(FaultProblem::ZeroRate);
                }
                FaultKind::Slow { bytes_per_s }
            }
            "slow-completion" => {
                let d = self.delay.ok_or(FaultProblem::SlowCompletionWithoutDelay)?;
                FaultKind::SlowCompletion {
                    delay: snbuf_quantity::parse_duration(d).map_err(FaultProblem::BadDelay)?,
                    after_bytes: self.after_bytes()?,
                }
            }
            "stall" => FaultKind::Stall {
                after_bytes: self.after_bytes()?,
            },
            "hang" => FaultKind::Hang {
                after_bytes: self.after_bytes()?,
            },
            "lost-flush" | "late-flush" | "lost-dir-sync" => {
                let (name, k) = match kind {
                    "lost-flush" => ("lost-flush", FaultKind::LostFlush),
                    "late-flush" => ("late-flush", FaultKind::LateFlush),
                    _ => ("lost-dir-sync", FaultKind::LostDirSync),
                };
                if self.given {
                    return Err(FaultProblem::TakesNoKeys(name));
                }
                k
            }
            _ => return Err(FaultProblem::UnknownKind(kind.to_string())),
        })
    }
}

impl FaultKind {
    /// Its name, as `--inject-fault` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::Write { errno, .. } if *errno == libc::ENOSPC => "write-enospc",
            FaultKind::Write { .. } => "write-eio",
            FaultKind::Persist { .. } => "persist-eio",
            FaultKind::Slow { .. } => "slow",
            FaultKind::LostFlush => "lost-flush",
            FaultKind::LateFlush => "late-flush",
            FaultKind::LostDirSync => "lost-dir-sync",
            FaultKind::SlowCompletion { .. } => "slow-completion",
            FaultKind::Stall { .. } => "stall",
            FaultKind::Hang { .. } => "hang",
        }
    }

    /// Whether it makes the unit acknowledge data that is not durable (a persist or a
    /// directory sync that reports success and does not do it): the faults only a power cut
    /// shows, which nothing but a test of that may ask for.
    pub fn voids_durability(&self) -> bool {
        matches!(
            self,
            FaultKind::LostFlush | FaultKind::LateFlush | FaultKind::LostDirSync
        )
    }
}

/// The fault in words, for logs and manifests: its kind, and its link where it has one (a
/// write-eio:link=1 says `write-eio on link 1`).
impl std::fmt::Display for FaultPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.link {
            Some(link) => write!(f, "{} on link {link}", self.kind.name()),
            None => write!(f, "{}", self.kind.name()),
        }
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
    /// Writes started in place whose completion is late (`SlowCompletion`, `Stall`).
    late: Vec<LateWrite>,
    /// How long a wait for a completion may last (`SinkConfig::completion_deadline`).
    completion_deadline: Duration,
}

/// A write started in place and not yet carried out: where its parts lie, and their owner.
struct LateWrite {
    offset: u64,
    parts: Vec<(usize, usize)>,
    _held: Arc<dyn HeldMemory>,
    /// When it was started, and how long after that it completes (None: never).
    started: Instant,
    completes_after: Option<Duration>,
}

/// Wraps `sink` with `faults` and latches its first failure, as `open` does for a backend; a
/// wait for a late completion gives up after `completion_deadline`.
pub fn inject<S: Sink>(
    sink: S,
    faults: Vec<FaultKind>,
    completion_deadline: Duration,
) -> Latched<Faulty<S>> {
    Latched::new(Faulty {
        inner: sink,
        faults,
        written_bytes: 0,
        persists: 0,
        since: None,
        flush_owed: false,
        failed_completion: None,
        late: Vec::new(),
        completion_deadline,
    })
}

impl<S: Sink> Faulty<S> {
    /// A write ending at `end` bytes that crosses a `Hang` blocks here, for good.
    fn hang_if_due(&self, end: u64) {
        let hangs = self
            .faults
            .iter()
            .any(|f| matches!(*f, FaultKind::Hang { after_bytes } if end > after_bytes));
        if hangs {
            std::thread::sleep(HANG_FOR);
        }
    }

    /// The errno of the first `Write` fault a write ending at `end` bytes crosses.
    fn write_fault(&self, end: u64) -> Option<i32> {
        self.faults.iter().find_map(|f| match *f {
            FaultKind::Write { errno, after_bytes } if end > after_bytes => Some(errno),
            _ => None,
        })
    }

    /// How late a write started in place and ending at `end` bytes completes (`Some(None)`:
    /// never), if a fault makes it late.
    fn late_completion(&self, end: u64) -> Option<Option<Duration>> {
        self.faults.iter().find_map(|f| match *f {
            FaultKind::SlowCompletion { delay, after_bytes } if end > after_bytes => {
                Some(Some(delay))
            }
            FaultKind::Stall { after_bytes } if end > after_bytes => Some(None),
            _ => None,
        })
    }

    /// When the late writes are over: all carried out, or given up at the completion deadline
    /// counted from the first one's start.
    fn late_writes_over_at(&self) -> Option<Instant> {
        let first = self.late.iter().map(|w| w.started).min()?;
        let gives_up = first + self.completion_deadline;
        let due = self
            .late
            .iter()
            .map(|w| w.completes_after.map(|d| w.started + d))
            .collect::<Option<Vec<_>>>()
            .and_then(|d| d.into_iter().max());
        Some(due.map_or(gives_up, |d| d.min(gives_up)))
    }

    /// Carries out the late writes once they are due (`late_writes_over_at` has passed), or
    /// reports the stall of those the deadline came first for.
    fn finish_late_writes(&mut self) -> Result<()> {
        let stalled = self.late.iter().any(|w| {
            w.completes_after
                .is_none_or(|d| d > self.completion_deadline)
        });
        if stalled {
            self.late.clear();
            return Err(PersistError::Stalled {
                op: "write completion (injected fault)",
                path: self.inner.report().path.clone(),
                waited: self.completion_deadline,
            });
        }
        for w in std::mem::take(&mut self.late) {
            assert!(
                w.parts.iter().all(|&(addr, _)| addr != 0),
                "a late write's parts point at memory"
            );
            // SAFETY: each part lies inside the memory `_held` keeps allocated (checked by
            // `held_in` when the write started). The link may have overwritten it since: the
            // device reads whatever is there now, as a DMA would; only the kernel (a block
            // method's write) or a copy reads it, never as a typed value.
            let parts: Vec<&[u8]> = w
                .parts
                .iter()
                .map(|&(addr, len)| unsafe { std::slice::from_raw_parts(addr as *const u8, len) })
                .collect();
            self.inner.write_in_place(w.offset, &parts)?;
        }
        Ok(())
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
        self.hang_if_due(end);
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
    fn start_in_place(&mut self, offset: u64, parts: &[&[u8]], held: &Hold) -> Result<()> {
        let end = self.written_bytes + parts.iter().map(|p| p.len() as u64).sum::<u64>();
        self.hang_if_due(end);
        if let Some(completes_after) = self.late_completion(end) {
            if held_in(held.as_ref(), parts) {
                self.late.push(LateWrite {
                    offset,
                    parts: parts
                        .iter()
                        .map(|p| (p.as_ptr() as usize, p.len()))
                        .collect(),
                    _held: held.clone(),
                    started: Instant::now(),
                    completes_after,
                });
                self.written_bytes = end;
                return Ok(());
            }
        }
        if !self.queues_in_place() {
            return self.write_in_place(offset, parts);
        }
        self.inner.start_in_place(offset, parts, held)?;
        self.written_bytes = end;
        if let Some(errno) = self.write_fault(end) {
            self.failed_completion.get_or_insert(errno);
        }
        Ok(())
    }

    fn wait_in_place(&mut self) -> Result<()> {
        self.wait_in_place_within(None).map(drop)
    }

    fn wait_in_place_within(&mut self, limit: Option<Instant>) -> Result<bool> {
        // Waited for whatever happens: the caller may reuse the memory once this says so.
        let late = match self.late_writes_over_at() {
            None => Ok(()),
            Some(over) => {
                let wake = limit.map_or(over, |l| l.min(over));
                std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                if Instant::now() < over {
                    return Ok(false);
                }
                self.finish_late_writes()
            }
        };
        debug_assert!(
            self.late.is_empty(),
            "every late write was carried out or given up"
        );
        let waited = match self.inner.wait_in_place_within(limit) {
            Ok(false) if late.is_ok() => return Ok(false),
            Ok(_) => late,
            Err(e) => Err(e),
        };
        if let Some(errno) = self.failed_completion.take() {
            return Err(self.injected("write completion (injected fault)", errno));
        }
        waited.map(|()| true)
    }

    fn persist(&mut self) -> Result<()> {
        debug_assert!(
            !self.flush_owed || self.faults.contains(&FaultKind::LateFlush),
            "a flush is owed only under late-flush"
        );
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

    fn grow(&mut self, region_bytes: u64) -> Result<()> {
        self.inner.grow(region_bytes)
    }

    fn drain_completion_latencies_ns(&mut self, record: &mut dyn FnMut(u64)) -> bool {
        self.inner.drain_completion_latencies_ns(record)
    }
}

#[cfg(test)]
mod tests;
