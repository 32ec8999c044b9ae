//! The `snbuf` binary as a user meets it: a short run that writes JSON and CSV with the documented
//! fields, and bad input that gets one clear error line, the right exit code, no panic, and
//! nothing written.

mod common;

use common::{assert_refused, snbuf, stderr, Mount};

const TINY: &[&str] = &[
    "--duration",
    "50ms",
    "--warmup",
    "10ms",
    "--region",
    "4MiB",
    "--threads",
    "1",
];

#[test]
fn a_short_write_sweep_exports_the_documented_schema() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let csv = dir.path().join("r.csv");
    let target = dir.path().to_str().unwrap();
    let mut args = vec![
        "bench",
        "write",
        "--target",
        target,
        "--method",
        "buffered,direct",
        "--block-size",
        "4k,5568",
    ];
    args.extend_from_slice(TINY);
    args.extend_from_slice(&[
        "--json",
        json.to_str().unwrap(),
        "--csv",
        csv.to_str().unwrap(),
    ]);
    let o = snbuf(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("5568 B") && table.contains("direct"),
        "{table}"
    );

    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in [
        "cpu_model",
        "simd_path",
        "kernel",
        "page_size_bytes",
        "git_commit",
        "targets",
    ] {
        assert!(!doc["machine"][key].is_null(), "machine.{key} missing");
    }
    let t = &doc["machine"]["targets"][0];
    for key in ["filesystem", "dax", "volatile"] {
        assert!(!t[key].is_null(), "machine.targets[0].{key} missing");
    }
    let results = doc["results"].as_array().unwrap();
    assert_eq!(results.len(), 4);
    for r in results {
        for key in [
            "method",
            "target",
            "block_size_bytes",
            "threads",
            "pattern",
            "page_size_bytes",
            "bytes",
            "seconds",
            "gib_per_s",
            "mops_per_s",
        ] {
            assert!(!r[key].is_null(), "result.{key} missing in {r}");
        }
        for p in ["p50", "p99", "p999", "max"] {
            assert!(r["latency_ns"][p].as_u64().unwrap() > 0, "latency_ns.{p}");
        }
    }
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 5, "header + 4 rows");
    assert!(csv.starts_with("suite,method,target"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        2,
        "only the two result files remain"
    );
}

/// An operation longer than the whole timed window (a stalled medium, or a block the window is
/// too short for) still gives the point a figure: the window is held open until the thread has
/// completed one, and the result says so. Without the hold, the thread is still inside its
/// warm-up operation when the window closes and the point has no figure at all.
#[test]
fn an_operation_longer_than_the_window_still_gives_a_figure() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let o = snbuf(&[
        "bench",
        "write",
        "--target",
        dir.path().to_str().unwrap(),
        "--method",
        "buffered",
        "--block-size",
        "32MiB",
        "--region",
        "64MiB",
        "--threads",
        "1",
        "--warmup",
        "1ms",
        "--duration",
        "1ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let r = &doc["results"][0];
    assert!(r["ops"].as_u64().unwrap() >= 1, "{r}");
    let held = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().contains("held open"));
    // A coordinator descheduled past the operation closes the window late without holding it:
    // the window is then as long as the operation, which the figure must show either way.
    assert!(
        held || r["seconds"].as_f64().unwrap() > 0.005,
        "a window of 1 ms cannot hold a 32 MiB durable write: {r}"
    );
}

#[test]
fn a_short_read_sweep_runs() {
    let uring = snbuf_persist::backends::uring::available();
    if !common::available_or_skip("SNBUF_REQUIRE_URING", "io_uring", uring) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "bench",
        "read",
        "--target",
        dir.path().to_str().unwrap(),
        "--method",
        "uring",
        "--block-size",
        "4k",
        "--pattern",
        "rand",
    ];
    args.extend_from_slice(TINY);
    let o = snbuf(&args);
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn bad_input_gets_one_clear_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().to_str().unwrap();
    let w = |extra: &[&str]| {
        let mut a = vec!["bench", "write", "--target", target];
        a.extend_from_slice(TINY);
        a.extend_from_slice(extra);
        snbuf(&a)
    };
    assert_refused(
        &w(&["--method", "teleport"]),
        2,
        "unknown method 'teleport'",
    );
    assert_refused(&w(&["--block-size", "0"]), 2, "more than 0");
    assert_refused(&w(&["--block-size", "4XB"]), 2, "unknown unit");
    assert_refused(&w(&["--threads", "0"]), 2, "at least 1");
    assert_refused(&w(&["--page-size", "3KiB"]), 2, "4KiB or 2MiB");
    assert_refused(&w(&["--persist-every", "sometimes"]), 2, "--persist-every");
    assert_refused(&w(&["--cpus", "9999"]), 2, "CPU 9999");
    assert_refused(
        &snbuf(&["bench", "write", "--target", target, "--duration", "0s"]),
        2,
        "more than 0",
    );
    assert_refused(&w(&["--block-size", "1GiB"]), 2, "region");
    if !snbuf_persist::Method::Pmdk.compiled_in() {
        assert_refused(&w(&["--method", "pmdk"]), 2, "--features pmdk");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing was written"
    );

    let mut a = vec!["bench", "write", "--target", "/nonexistent/snbuf/dir/file"];
    a.extend_from_slice(TINY);
    assert_refused(&snbuf(&a), 2, "/nonexistent/snbuf/dir/file");
}

#[test]
fn a_read_only_target_is_refused() {
    let Some(ro) = Mount::tmpfs("ro,size=16M") else {
        common::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a read-only tmpfs cannot be mounted (needs root)",
        );
        return;
    };
    let mut a = vec!["bench", "write", "--target", ro.path().to_str().unwrap()];
    a.extend_from_slice(TINY);
    assert_refused(&snbuf(&a), 2, "Read-only file system");
}

#[test]
fn a_file_system_too_small_for_the_sweep_is_refused_up_front() {
    let Some(small) = Mount::tmpfs("size=1M") else {
        common::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a small tmpfs cannot be mounted (needs root)",
        );
        return;
    };
    let mut a = vec![
        "bench",
        "write",
        "--target",
        small.path().to_str().unwrap(),
        "--method",
        "nt,direct",
    ];
    a.extend_from_slice(TINY);
    assert_refused(&snbuf(&a), 2, "lower --region");
    assert_eq!(
        std::fs::read_dir(small.path()).unwrap().count(),
        0,
        "nothing was written"
    );
}

#[test]
fn a_full_file_system_met_during_the_run_fails_cleanly() {
    let Some(small) = Mount::tmpfs("size=8M") else {
        common::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a small tmpfs cannot be mounted (needs root)",
        );
        return;
    };
    // Fill most of it behind snbuf's back, after its free-space check would have passed.
    let target = small.path().join("named.dat");
    std::fs::write(small.path().join("ballast"), vec![1u8; 6 << 20]).unwrap();
    let mut a = vec![
        "bench",
        "write",
        "--target",
        target.to_str().unwrap(),
        "--method",
        "direct",
    ];
    a.extend_from_slice(TINY);
    assert_refused(&snbuf(&a), 1, "no space left");
}

#[test]
fn a_file_that_holds_data_is_never_overwritten_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let precious = dir.path().join("link-0000.dat");
    std::fs::write(&precious, b"recorded data").unwrap();
    let p = precious.to_str().unwrap();
    let mut a = vec![
        "bench",
        "write",
        "--target",
        p,
        "--method",
        "buffered",
        "--block-size",
        "4k",
    ];
    a.extend_from_slice(TINY);
    assert_refused(&snbuf(&a), 2, "--overwrite");
    assert_eq!(
        std::fs::read(&precious).unwrap(),
        b"recorded data",
        "nothing was changed"
    );
    a.push("--overwrite");
    assert!(snbuf(&a).status.success());
}

#[test]
fn help_teaches_and_methods_lists_what_is_here() {
    let o = snbuf(&["bench", "write", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success());
    for s in [
        "--persist-every",
        "--method",
        "snbuf bench write --target",
        "5568",
    ] {
        assert!(help.contains(s), "help lacks {s}");
    }
    let o = snbuf(&["methods", "--target", "/dev/shm"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        out.contains("nt") && out.contains("uring") && out.contains("tmpfs"),
        "{out}"
    );
}

#[test]
fn the_codec_bench_checks_every_decode_and_judges_the_targets() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("codec.json");
    let scratch = dir.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::write(scratch.join("keep"), b"a user's file").unwrap();
    let o = snbuf(&[
        "bench",
        "codec",
        "--frames",
        "40",
        // Three chunks, the last short: each coded and decoded on its own.
        "--chunk-frames",
        "16",
        "--passes",
        "1",
        "--scratch",
        scratch.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("target: coded at most 40 % of raw"), "{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let rows = doc["results"].as_array().unwrap();
    let codec = rows.iter().find(|r| r["kind"] == "codec").unwrap();
    assert_eq!(codec["verified"], true);
    assert_eq!(codec["chunk_frames"], 16);
    assert!(codec["ratio"].as_f64().unwrap() < 0.40, "{codec}");
    let bound = rows.iter().find(|r| r["kind"] == "bound").unwrap();
    assert!(bound["ratio"].as_f64().unwrap() < codec["ratio"].as_f64().unwrap());
    for r in rows.iter().filter(|r| r["kind"] == "peer") {
        // Run and checked, or said not to have run.
        assert!(
            r["verified"] == true
                || (r["coded_bytes"].is_null() && !r["notes"].as_array().unwrap().is_empty()),
            "{r}"
        );
    }
    let left: Vec<_> = std::fs::read_dir(&scratch)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["keep"], "the run's own files removed, nothing else");
}

#[test]
fn the_codec_bench_refuses_a_file_of_no_whole_frame_and_an_unknown_type() {
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short.bin");
    std::fs::write(&short, [0u8; 100]).unwrap();
    for (args, needle) in [
        (
            vec!["bench", "codec", "--input", short.to_str().unwrap()],
            "not one whole wibeth frame",
        ),
        (
            vec!["bench", "codec", "--frame-type", "wibbly"],
            "--frame-type wibbly",
        ),
    ] {
        assert_refused(&snbuf(&args), 2, needle);
    }
}
