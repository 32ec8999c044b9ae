//! The fault wrapper over real backends: each injected fault fails, delays or drops what it
//! says, and the latch keeps a failed sink failed.

use super::*;
use crate::sink::DEFAULT_COMPLETION_DEADLINE;
use crate::{open, Method, SinkConfig};

/// A real `method` sink on `path` (1 MiB), with `faults` injected.
fn faulty(
    method: Method,
    path: &std::path::Path,
    faults: Vec<FaultKind>,
    deadline: Duration,
) -> Latched<Faulty<Box<dyn Sink>>> {
    let sink = open(&SinkConfig::new(method, path, 1 << 20)).unwrap();
    inject(sink, faults, deadline)
}

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
    let mut s = faulty(
        Method::Buffered,
        &dir.path().join("f"),
        vec![FaultKind::Persist { after_persists: 1 }],
        DEFAULT_COMPLETION_DEADLINE,
    );
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
    let mut s = faulty(
        Method::Buffered,
        &path,
        vec![FaultKind::Write {
            errno: libc::EIO,
            after_bytes: 8192,
        }],
        DEFAULT_COMPLETION_DEADLINE,
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

/// Whether io_uring can be used here; without it the uring case skips, or fails under
/// SNBUF_REQUIRE_URING (CI).
fn uring_here() -> bool {
    snbuf_testkit::available_or_skip(
        "SNBUF_REQUIRE_URING",
        "io_uring",
        crate::backends::uring::available(),
    )
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
        .filter(|m| *m != Method::Uring || uring_here())
    {
        let dir = tempfile::tempdir().unwrap();
        let mut s = faulty(
            method,
            &dir.path().join("f"),
            vec![FaultKind::Write {
                errno: libc::EIO,
                after_bytes: 8192,
            }],
            DEFAULT_COMPLETION_DEADLINE,
        );
        let (held, start) = held_buffer(16384, 7);
        // SAFETY: the range is the held buffer's, alive as long as `held`, and nothing
        // writes it while these slices exist.
        let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, 16384) };
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
        (
            inject(
                Counting(real, n.clone()),
                vec![kind],
                DEFAULT_COMPLETION_DEADLINE,
            ),
            n,
        )
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

#[test]
fn late_completions_parse_and_bad_ones_say_why() {
    let p = FaultPlan::parse("slow-completion:delay=500ms,after=1MiB").unwrap();
    assert_eq!(
        p.kind,
        FaultKind::SlowCompletion {
            delay: Duration::from_millis(500),
            after_bytes: 1 << 20
        }
    );
    let p = FaultPlan::parse("stall:link=2,after=4KiB").unwrap();
    assert_eq!(
        (p.kind, p.link),
        (FaultKind::Stall { after_bytes: 4096 }, Some(2))
    );
    for (spec, problem) in [
        ("slow-completion", FaultProblem::SlowCompletionWithoutDelay),
        ("stall:delay=1s", FaultProblem::DelayNotSlowCompletion),
        ("stall:rate=1MB/s", FaultProblem::RateNotSlow),
    ] {
        assert_eq!(
            FaultPlan::parse(spec).unwrap_err().problem,
            problem,
            "{spec}"
        );
    }
    assert!(matches!(
        FaultPlan::parse("slow-completion:delay=soon")
            .unwrap_err()
            .problem,
        FaultProblem::BadDelay(_)
    ));
}

/// A held buffer of `len` bytes of `fill`, and a slice over it.
fn held_buffer(len: usize, fill: u8) -> (std::sync::Arc<dyn crate::sink::HeldMemory>, usize) {
    let mut buf = crate::AlignedBuf::new(len, crate::PageSize::Small4K).unwrap();
    buf.as_mut_slice().fill(fill);
    let held: std::sync::Arc<dyn crate::sink::HeldMemory> = std::sync::Arc::new(Held(buf));
    let start = held.address_range().start;
    (held, start)
}

#[test]
fn a_slow_completion_writes_the_memory_as_it_is_when_the_write_completes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let kind = FaultKind::SlowCompletion {
        delay: Duration::from_millis(20),
        after_bytes: 0,
    };
    let mut s = faulty(
        Method::Direct,
        &path,
        vec![kind],
        DEFAULT_COMPLETION_DEADLINE,
    );
    let (held, start) = held_buffer(8192, 7);
    // SAFETY: the range is the held buffer's, alive as long as `held`.
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, 8192) };
    s.start_in_place(0, &[bytes], &held).unwrap();
    // The "link" overwrites the memory while the write is in flight.
    // SAFETY: as above; nothing else uses the buffer now (the sink only holds its address).
    unsafe { std::ptr::write_bytes(start as *mut u8, 9, 8192) };
    s.wait_in_place().unwrap();
    s.persist().unwrap();
    let mut back = vec![0u8; 8192];
    std::fs::File::open(&path)
        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut back, 0))
        .unwrap();
    assert!(
        back.iter().all(|&b| b == 9),
        "the device read the memory when the write completed"
    );
}

#[test]
fn a_write_that_never_completes_fails_at_the_deadline_and_stays_failed() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = faulty(
        Method::Direct,
        &dir.path().join("f"),
        vec![FaultKind::Stall { after_bytes: 4096 }],
        Duration::from_millis(50),
    );
    let (held, start) = held_buffer(8192, 7);
    // SAFETY: the range is the held buffer's, alive as long as `held`.
    let bytes = unsafe { std::slice::from_raw_parts(start as *const u8, 8192) };
    s.start_in_place(0, &[&bytes[..4096]], &held).unwrap();
    s.wait_in_place().expect("below the stall: completes");
    s.start_in_place(4096, &[&bytes[4096..]], &held).unwrap();
    let e = s.wait_in_place().unwrap_err();
    assert!(matches!(e, PersistError::Stalled { .. }), "{e:?}");
    let again = s.persist().unwrap_err();
    assert!(matches!(again, PersistError::Latched { .. }), "{again:?}");
}
