//! Tiny sweeps of every method, writing and reading, sequential and random: the figures are
//! whatever this machine gives (never asserted), but every point must be real — bytes moved, ops
//! timed, reads verified against the prefill — and carry the fields the schema promises.

use std::path::{Path, PathBuf};
use std::time::Duration;

use snbuf_bench::throughput::run_point;
use snbuf_bench::{Direction, OpClock, Pattern, PersistEvery, TargetFiles, ThroughputConfig};
use snbuf_persist::{Method, PageSize, SyncMode};
use snbuf_platform::cpu;

fn dir_for(method: Method) -> PathBuf {
    let shm = Path::new("/dev/shm");
    if method.capabilities().mapped && shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

fn tiny(direction: Direction, method: Method, pattern: Pattern, target: &Path) -> ThroughputConfig {
    ThroughputConfig {
        direction,
        methods: vec![method],
        targets: vec![target.to_path_buf()],
        block_sizes_bytes: vec![256, 5568, 65536],
        threads: vec![1, 2],
        pattern,
        duration: Duration::from_millis(60),
        warmup: Duration::from_millis(10),
        page_size: PageSize::Small4K,
        cpus: cpu::allowed_cpus(),
        region_bytes_per_thread: 4 << 20,
        queue_depth: 4,
        sync_mode: SyncMode::Fdatasync,
        persist_every: PersistEvery::Op,
        latency_every: 1,
        overwrite: false,
    }
}

#[test]
fn every_method_produces_real_points_both_ways() {
    let clock = OpClock::calibrate(Duration::from_millis(10));
    for method in Method::all().filter(|m| m.compiled_in()) {
        let uring = || snbuf_persist::backends::uring::available();
        if method == Method::Uring
            && !snbuf_testkit::available_or_skip("SNBUF_REQUIRE_URING", "io_uring", uring())
        {
            continue;
        }
        for direction in [Direction::Write, Direction::Read] {
            for pattern in [Pattern::Seq, Pattern::Rand] {
                let dir = tempfile::tempdir_in(dir_for(method)).unwrap();
                let config = tiny(direction, method, pattern, dir.path());
                config.validate().unwrap();
                let files = TargetFiles::prepare(&config).unwrap();
                for point in config.points() {
                    let r = run_point(&config, &files, point, &clock).unwrap_or_else(|e| {
                        panic!("{method} {direction:?} {pattern:?} {point:?}: {e}")
                    });
                    assert_eq!(r.method, method.name());
                    assert_eq!(r.threads, point.threads);
                    assert_eq!(r.block_size_bytes, point.block_size_bytes);
                    assert!(r.slot_bytes >= r.block_size_bytes);
                    assert!(r.ops > 0 && r.bytes == r.ops * r.block_size_bytes, "{r:?}");
                    assert!(r.seconds > 0.0 && r.gib_per_s > 0.0 && r.mops_per_s > 0.0);
                    assert_eq!(r.latency_ns.samples, r.ops);
                    assert!(r.latency_ns.p50 > 0 && r.latency_ns.p50 <= r.latency_ns.p99);
                    assert!(
                        r.latency_ns.p99 <= r.latency_ns.p999
                            && r.latency_ns.p999 <= r.latency_ns.max
                    );
                    assert_eq!(r.per_thread_gib_per_s.len(), point.threads);
                    if direction == Direction::Read {
                        assert_eq!(r.verified_ops, r.ops, "every timed read is checked");
                    }
                    if method == Method::Uring && direction == Direction::Write {
                        assert!(
                            r.completion_latency_ns.is_some(),
                            "queued writes report completion latency"
                        );
                    }
                }
                drop(files);
                assert_eq!(
                    std::fs::read_dir(dir.path()).unwrap().count(),
                    0,
                    "temporary targets are removed"
                );
            }
        }
    }
}

#[test]
fn one_target_per_thread_and_persist_variants() {
    let clock = OpClock::calibrate(Duration::from_millis(10));
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    for persist_every in [PersistEvery::End, PersistEvery::Bytes(1 << 20)] {
        let mut config = tiny(Direction::Write, Method::Direct, Pattern::Seq, a.path());
        config.targets.push(b.path().to_path_buf());
        config.persist_every = persist_every;
        config.latency_every = 8;
        let files = TargetFiles::prepare(&config).unwrap();
        let r = run_point(&config, &files, config.points()[1], &clock).unwrap();
        assert_eq!(r.targets, 2);
        assert!(r.target.contains(','), "{}", r.target);
        assert!(
            r.latency_ns.samples > 0 && r.latency_ns.samples < r.ops,
            "sampled, not every op"
        );
    }
}

#[test]
fn a_file_target_is_used_as_is_and_kept() {
    let clock = OpClock::calibrate(Duration::from_millis(10));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("named.dat");
    let config = tiny(Direction::Write, Method::Buffered, Pattern::Seq, &file);
    let files = TargetFiles::prepare(&config).unwrap();
    run_point(&config, &files, config.points()[0], &clock).unwrap();
    drop(files);
    assert!(file.exists(), "a file the user named is not deleted");
}

#[test]
fn impossible_configurations_are_refused_before_any_io() {
    let dir = tempfile::tempdir().unwrap();
    let base = tiny(Direction::Write, Method::Nt, Pattern::Seq, dir.path());
    let cases: Vec<(&str, ThroughputConfig)> = vec![
        (
            "zero block",
            ThroughputConfig {
                block_sizes_bytes: vec![0],
                ..base.clone()
            },
        ),
        (
            "zero threads",
            ThroughputConfig {
                threads: vec![0],
                ..base.clone()
            },
        ),
        (
            "no method",
            ThroughputConfig {
                methods: vec![],
                ..base.clone()
            },
        ),
        (
            "zero duration",
            ThroughputConfig {
                duration: Duration::ZERO,
                ..base.clone()
            },
        ),
        (
            "block larger than region",
            ThroughputConfig {
                block_sizes_bytes: vec![64 << 20],
                ..base.clone()
            },
        ),
        (
            "missing directory",
            ThroughputConfig {
                targets: vec!["/nonexistent/snbuf/x".into()],
                ..base.clone()
            },
        ),
        (
            "zero persist interval",
            ThroughputConfig {
                persist_every: PersistEvery::Bytes(0),
                ..base.clone()
            },
        ),
    ];
    for (what, config) in cases {
        assert!(config.validate().is_err(), "{what} must be refused");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was written"
    );
}
