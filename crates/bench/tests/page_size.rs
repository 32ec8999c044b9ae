//! Mason et al.: page size dominates persistent-memory results, so a run must record the page
//! size the kernel granted, not the one asked for. On a tmpfs mounted huge=always a 2 MiB run
//! gets 2 MiB pages; on one that cannot give them (this machine's /dev/shm: shmem_enabled=never)
//! the result says 4 KiB and carries a note.

use std::path::Path;
use std::time::Duration;

use snbuf_bench::throughput::run_point;
use snbuf_bench::{Direction, OpClock, Pattern, PersistEvery, TargetFiles, ThroughputConfig};
use snbuf_persist::{Method, PageSize, SyncMode};
use snbuf_platform::cpu;

fn config(target: &Path) -> ThroughputConfig {
    ThroughputConfig {
        direction: Direction::Write,
        methods: vec![Method::Nt],
        targets: vec![target.to_path_buf()],
        block_sizes_bytes: vec![4096],
        threads: vec![1],
        pattern: Pattern::Seq,
        duration: Duration::from_millis(30),
        warmup: Duration::from_millis(5),
        page_size: PageSize::Huge2M,
        cpus: cpu::allowed_cpus(),
        region_bytes_per_thread: 16 << 20,
        queue_depth: 4,
        sync_mode: SyncMode::Fdatasync,
        persist_every: PersistEvery::Op,
        latency_every: 1,
        overwrite: false,
    }
}

fn run(target: &Path) -> snbuf_bench::ThroughputResult {
    let config = config(target);
    let files = TargetFiles::prepare(&config).unwrap();
    run_point(
        &config,
        &files,
        config.points()[0],
        &OpClock::calibrate(Duration::from_millis(5)),
    )
    .unwrap()
}

#[test]
fn huge_pages_granted_are_recorded() {
    let Some(dir) = snbuf_testkit::Mount::tmpfs("size=64M,huge=always") else {
        snbuf_testkit::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a huge=always tmpfs cannot be mounted (needs root and shmem THP support)",
        );
        return;
    };
    let r = run(dir.path());
    drop(dir);
    assert_eq!(r.page_size_bytes, 2 << 20);
    assert_eq!(r.page_size_obtained_bytes, Some(2 << 20), "{r:?}");
    assert!(
        !r.notes.iter().any(|n| n.contains("got 4 KiB")),
        "{:?}",
        r.notes
    );
}

#[test]
fn huge_pages_refused_are_reported_not_hidden() {
    let shm = Path::new("/dev/shm");
    let policy = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
        .unwrap_or_default();
    if !shm.is_dir() || !policy.contains("[never]") {
        eprintln!(
            "skip: needs /dev/shm with shmem_enabled=never to see a refusal (policy: {})",
            policy.trim()
        );
        return;
    }
    let r = run(shm);
    assert_eq!(r.page_size_obtained_bytes, Some(4096), "{r:?}");
    assert!(
        r.notes
            .iter()
            .any(|n| n.contains("asked for 2 MiB pages for the target, got 4 KiB")),
        "{:?}",
        r.notes
    );
}
