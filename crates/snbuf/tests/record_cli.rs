//! `snbuf record` and `snbuf plan` as a user runs them: a short recording that verifies and
//! writes its summary, and bad input refused with one line and exit 2, before anything runs.

mod common;

use common::{assert_refused, small_recording, snbuf, snbuf_owned};

#[test]
fn a_short_recording_verifies_and_reports() {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("summary.json");
    let a = small_recording(
        out.path(),
        "b1",
        &[
            ("--rate-per-link", "5MB/s"),
            ("--pre", "300ms"),
            ("--post", "400ms"),
            ("--trigger-after", "500ms"),
            ("--json", json.to_str().unwrap()),
        ],
    );
    let o = snbuf_owned(&a);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("verify      valid"), "{stdout}");
    // The summary is the unit's typed result, read back as that type.
    let r: snbuf_unit::RecordResult =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(r.valid, "{r:?}");
    assert_eq!(r.lost_frames, 0);
    assert!(r.frames_recorded > 0);
    assert_eq!(
        r.frames_recorded,
        r.links.iter().map(|l| l.data.frames).sum::<u64>()
    );
    assert_eq!(r.burst_dir, out.path().join("b1"));
    // How late the link emulation ran while recording: measured, so a number, and at this
    // gentle rate far below the window's length.
    assert!((0.0..0.7).contains(&r.source_max_lag_s), "{r:?}");
    assert_eq!(
        snbuf(&["verify", out.path().join("b1").to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    // The same id again is refused: a burst is never written over another.
    let o = snbuf_owned(&a);
    assert_eq!(o.status.code(), Some(1));
}

#[test]
fn bad_input_is_refused_before_anything_runs() {
    let out = tempfile::tempdir().unwrap();
    let d = out.path().to_str().unwrap();
    let r = |extra: &[&str]| {
        let mut a = vec!["record", "--output", d];
        a.extend_from_slice(extra);
        snbuf(&a)
    };
    assert_refused(&r(&["--frame", "wib9"]), 2, "unknown frame type 'wib9'");
    assert_refused(
        &r(&["--pre", "5s", "--buffer", "2s"]),
        2,
        "longer than --buffer",
    );
    assert_refused(&r(&["--rate-per-link", "0"]), 2, "more than 0");
    assert_refused(&r(&["--method", "warp"]), 2, "unknown method");
    assert_refused(&r(&["--profile", "lhc"]), 2, "unknown profile");
    assert_refused(&r(&["--burst-id", "../x"]), 2, "not a plain name");
    assert_refused(&r(&["--links", "2", "--writers", "3"]), 2, "--writers");
    assert_eq!(
        std::fs::read_dir(out.path()).unwrap().count(),
        0,
        "nothing was written"
    );
    let o = snbuf(&["record", "--output", "/proc/snbuf-cannot-be-here"]);
    assert_refused(&o, 2, "--output /proc/snbuf-cannot-be-here");
}

#[test]
fn plan_answers_fig_6() {
    let o = snbuf(&[
        "plan",
        "--input-rate",
        "10GB/s",
        "--time",
        "100s",
        "--output-rate",
        "5GB/s",
    ]);
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    // (10 - 5) GB/s x 100 s = 500 GB = 466 GiB
    assert!(s.contains("keeps up: no") && s.contains("466 GiB"), "{s}");
    let o = snbuf(&[
        "plan",
        "--input-rate",
        "1GB/s",
        "--time",
        "100s",
        "--output-rate",
        "2GB/s",
    ]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("keeps up: yes"));
    assert_refused(
        &snbuf(&["plan", "--input-rate", "1GB/s", "--time", "10s"]),
        2,
        "--output-rate",
    );
    assert_refused(
        &snbuf(&[
            "plan",
            "--input-rate",
            "fast",
            "--time",
            "10s",
            "--output-rate",
            "1GB/s",
        ]),
        2,
        "--input-rate",
    );
}

#[test]
fn plan_takes_the_output_rate_from_a_bench_file() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("w.json");
    let o = snbuf(&[
        "bench",
        "write",
        "--target",
        dir.path().to_str().unwrap(),
        "--method",
        "buffered",
        "--block-size",
        "4k,64k",
        "--threads",
        "1",
        "--duration",
        "50ms",
        "--warmup",
        "10ms",
        "--region",
        "4MiB",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j = json.to_str().unwrap();
    let o = snbuf(&[
        "plan",
        "--input-rate",
        "100TB/s",
        "--time",
        "10s",
        "--bench",
        j,
        "--block-size",
        "64KiB",
    ]);
    let s = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && s.contains("buffered at 65536 B") && s.contains("keeps up: no"),
        "{s}"
    );
    assert_refused(
        &snbuf(&[
            "plan",
            "--input-rate",
            "1GB/s",
            "--time",
            "10s",
            "--bench",
            j,
            "--method",
            "nt",
        ]),
        2,
        "no write result matches",
    );
}

#[test]
fn a_config_file_holds_the_options_and_unknown_keys_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("unit.toml");
    std::fs::write(
        &cfg,
        "links = 2\nrate_per_link = \"5MB/s\"\nbuffer = \"1s\"\npre = \"300ms\"\npost = \"400ms\"\ntrigger_after = \"500ms\"\nmethod = \"direct\"\noutput = \"data\"\nburst_id = \"from-file\"\n",
    )
    .unwrap();
    let o = snbuf(&["record", "--config", cfg.to_str().unwrap(), "--links", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = std::fs::read_to_string(dir.path().join("data/from-file/manifest.json")).unwrap();
    let m: serde_json::Value = serde_json::from_str(&m).unwrap();
    assert_eq!(
        m["links"].as_array().unwrap().len(),
        1,
        "the command line wins over the file"
    );
    assert_eq!(m["method"], "direct");

    std::fs::write(&cfg, "links = 2\nlinkz = 3\n").unwrap();
    assert_refused(
        &snbuf(&["record", "--config", cfg.to_str().unwrap()]),
        2,
        "unknown key `linkz`",
    );
    std::fs::write(&cfg, "pre = \"soon\"\n").unwrap();
    assert_refused(
        &snbuf(&["record", "--config", cfg.to_str().unwrap()]),
        2,
        "pre",
    );
    // A value the file gives is checked as the command line's is.
    std::fs::write(
        &cfg,
        "source = \"udp://127.0.0.1:0\"\nreceive_nap = \"1s\"\n",
    )
    .unwrap();
    assert_refused(
        &snbuf(&["record", "--config", cfg.to_str().unwrap()]),
        2,
        "receive_nap: invalid value '1s' for '--receive-nap <auto|off|TIME>': '1s' is more than 100ms",
    );
    assert_refused(
        &snbuf(&["record", "--config", "/nonexistent/unit.toml"]),
        2,
        "/nonexistent/unit.toml",
    );
}
