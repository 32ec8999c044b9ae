//! Faults while recording, injected into the real binary over real files: a failed fsync, an
//! EIO on write, a full disk, a slow medium. Each stays inside the link it hit: the error is
//! latched and named, that link's burst is marked failed with the rest of its window counted
//! lost, the other links record their whole window, what was acknowledged stays valid, and the
//! process exits 1. A slow medium costs counted loss, never a hang or unbounded memory.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{small_recording, snbuf, snbuf_owned, stderr, Mount};
use serde_json::Value;

/// Three links of 20 MB/s, 0.5 s before to 1 s after a trigger at 0.6 s.
fn record(out: &Path, method: &str, extra: &[(&str, &str)]) -> (std::process::Output, Value) {
    let o = snbuf_owned(&record_args(out, method, extra));
    let v = std::fs::read_to_string(out.join("summary.json"))
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(Value::Null);
    (o, v)
}

fn record_args(out: &Path, method: &str, extra: &[(&str, &str)]) -> Vec<String> {
    let (json, status) = (out.join("summary.json"), out.join("status.json"));
    let mut options = vec![
        ("--links", "3"),
        ("--rate-per-link", "20MB/s"),
        ("--method", method),
        ("--json", json.to_str().unwrap()),
        ("--status-file", status.to_str().unwrap()),
    ];
    options.extend_from_slice(extra);
    small_recording(out, "b", &options)
}

fn manifest(burst: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(burst.join("manifest.json")).unwrap()).unwrap()
}

/// The burst's verify report (`snbuf verify --json`).
fn verify(burst: &Path) -> (i32, Value) {
    let o = snbuf(&["verify", "--json", burst.to_str().unwrap()]);
    (
        o.status.code().unwrap(),
        serde_json::from_slice(&o.stdout).unwrap(),
    )
}

/// Link `bad` failed with `needle` in its error; the others recorded every frame of the window;
/// the failed link's acknowledged chunks all verify and the rest of its window is counted lost.
fn assert_contained(out: &Path, o: &std::process::Output, bad: u64, needle: &str) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    assert!(!stderr(o).contains("panicked"), "{}", stderr(o));
    let burst = out.join("b");
    let m = manifest(&burst);
    assert_eq!(m["state"], "failed");
    let (code, v) = verify(&burst);
    assert_eq!(code, 1, "a failed burst does not pass verify");
    for (l, lv) in m["links"]
        .as_array()
        .unwrap()
        .iter()
        .zip(v["links"].as_array().unwrap())
    {
        let link = l["link"].as_u64().unwrap();
        let cov = &lv["coverage"];
        if link == bad {
            assert_eq!(l["state"], "failed");
            let err = l["error"].as_str().unwrap();
            assert!(err.contains(needle), "link {link}: {err}");
            assert!(err.contains("/b/link-"), "names the burst's file: {err}");
            // Every problem verify finds is the failure itself: no bad chunk, nothing
            // unaccounted (present + counted lost covers the window).
            for p in lv["problems"].as_array().unwrap() {
                assert!(
                    p.as_str().unwrap().contains("link failed while recording"),
                    "{p}"
                );
            }
            let present = cov["frames_present"].as_u64().unwrap_or(0);
            let lost = l["lost_frames"].as_u64().unwrap();
            assert!(lost > 0, "the rest of the window is counted lost");
            assert!(
                present + lost >= cov["frames_in_window"].as_u64().unwrap_or(0),
                "{lv}"
            );
        } else {
            assert_eq!(l["state"], "ok", "{l}");
            assert_eq!(l["lost_frames"], 0, "{l}");
            assert!(lv["problems"].as_array().unwrap().is_empty(), "{lv}");
            assert_eq!(cov["frames_present"], cov["frames_in_window"], "{lv}");
        }
    }
    // The status file's last word agrees with the manifest: what it called durable is there.
    let st: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("status.json")).unwrap()).unwrap();
    for (s, l) in st["links"]
        .as_array()
        .unwrap()
        .iter()
        .zip(m["links"].as_array().unwrap())
    {
        assert_eq!(s["durable_chunks"], l["chunks"], "{s} vs {l}");
        assert_eq!(s["failed"], l["link"].as_u64() == Some(bad));
    }
}

#[test]
fn a_failed_fsync_fails_its_link_only() {
    let out = tempfile::tempdir().unwrap();
    let (o, _) = record(
        out.path(),
        "direct",
        &[("--inject-fault", "persist-eio:link=1,after=2")],
    );
    assert_contained(out.path(), &o, 1, "fdatasync (injected fault)");
    let m = manifest(&out.path().join("b"));
    // Said where the burst is read: its manifest, and verify (for a person and as JSON).
    assert_eq!(
        m["injected_faults"],
        serde_json::json!(["persist-eio on link 1"])
    );
    assert!(stderr(&o).contains("FAULTS INJECTED"), "{}", stderr(&o));
    let (_, v) = verify(&out.path().join("b"));
    assert_eq!(v["injected_faults"], m["injected_faults"]);
    let said = snbuf(&["verify", out.path().join("b").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&said.stdout).contains("recorded with injected faults"));
    // Two persists succeeded before the failed one: what they covered is acknowledged, nothing
    // after (the status file said the same, checked above).
    assert!(
        m["links"][1]["chunks"].as_u64().unwrap() > 0,
        "{}",
        m["links"][1]
    );
}

#[test]
fn an_eio_on_write_fails_its_link_only() {
    // io_uring: the write was in flight (from the ring, beside the other links' writes) when
    // the kernel reported the error; memory: the copy is refused before it starts.
    for (method, when) in [
        ("uring", "write completion (injected fault)"),
        ("nt", "write (injected fault)"),
    ] {
        let out = tempfile::tempdir().unwrap();
        let (o, _) = record(
            out.path(),
            method,
            &[("--inject-fault", "write-eio:link=2,after=6MiB")],
        );
        assert_contained(out.path(), &o, 2, "Input/output error");
        assert_contained(out.path(), &o, 2, when);
    }
}

#[test]
fn a_full_disk_stops_the_links_cleanly_and_keeps_what_fit() {
    let Some(small) = Mount::tmpfs("size=24M") else {
        common::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a small tmpfs to fill cannot be mounted (needs root)",
        );
        return;
    };
    let out = small.path();
    let (o, v) = record(out, "nt", &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("has room for"),
        "says the window does not fit: {err}"
    );
    let burst = out.join("b");
    let m = manifest(&burst);
    assert_eq!(m["state"], "failed");
    let (_, rep) = verify(&burst);
    for (l, lv) in m["links"]
        .as_array()
        .unwrap()
        .iter()
        .zip(rep["links"].as_array().unwrap())
    {
        assert!(
            l["error"].as_str().is_some_and(|e| e.contains("full")),
            "each link stopped full: {l}"
        );
        assert!(l["chunks"].as_u64().unwrap() > 0, "what fit was kept: {l}");
        for p in lv["problems"].as_array().unwrap() {
            assert!(
                p.as_str().unwrap().contains("link failed while recording"),
                "{p}"
            );
        }
    }
    assert!(v["lost_frames"].as_u64().unwrap() > 0, "{v}");
    let cut = v["window_cut_to_bytes_per_link"]
        .as_u64()
        .expect("the cut in --json");
    assert!(cut > 0 && cut < 24 << 20, "{v}");
}

#[test]
fn a_slow_medium_costs_counted_loss_and_bounded_memory() {
    let out = tempfile::tempdir().unwrap();
    let args = record_args(
        out.path(),
        "direct",
        &[("--inject-fault", "slow:rate=6MB/s")],
    );
    let (code, peak_rss_bytes) = run_measuring_peak_rss(&args);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap())
            .unwrap();
    // Loss is not a failure of the run: the burst is valid, its loss accounted per link.
    assert_eq!(code, 0);
    assert!(v["lost_frames"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["valid"], true);
    assert!(
        v["window_cut_to_bytes_per_link"].is_null(),
        "the window fitted: {v}"
    );
    let (code, rep) = verify(&out.path().join("b"));
    assert_eq!(code, 0, "{rep}");
    // Memory: the buffers are sized up front and never grow with the backlog.
    let buffers = v["buffer_memory_bytes"].as_u64().unwrap();
    assert!(
        peak_rss_bytes < buffers + (64 << 20),
        "peak RSS {peak_rss_bytes} B for {buffers} B of buffers"
    );
}

/// Runs snbuf with `args` (output discarded) and returns its exit code and peak resident set,
/// from wait4's accounting of that one child.
#[allow(clippy::zombie_processes)] // reaped by wait4, which std does not know about
fn run_measuring_peak_rss(args: &[String]) -> (i32, u64) {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    // SAFETY: rusage is plain integers, filled by wait4.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child by pid, with valid pointers; `child` is not waited on again.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    assert_eq!(pid, child.id() as i32);
    (libc::WEXITSTATUS(status), ru.ru_maxrss as u64 * 1024)
}

/// Regression: a recording onto tmpfs larger than memory was killed by the kernel while its files
/// were being prepared (the pages of a memory-backed file system are RAM). Now the window is
/// cut to what memory holds before anything is allocated: each link stops "full" when its share
/// is used, the rest is counted lost, and the process lives to seal a burst that verifies.
#[test]
fn a_memory_backed_output_larger_than_memory_cuts_the_window_instead_of_being_killed() {
    let Some(out) = Mount::tmpfs("size=2G") else {
        common::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a tmpfs cannot be mounted (needs root)",
        );
        return;
    };
    // 800 MiB for the process: 190 MiB of buffers, and a window of 2 x 350 MB that cannot fit.
    let Some(group) = common::MemoryCgroup::with_limit(800 << 20) else {
        common::skip_unless_required(
            "SNBUF_REQUIRE_CGROUP",
            "a memory cgroup cannot be made (needs root and a memory controller)",
        );
        return;
    };
    let json = out.path().join("summary.json");
    let args = small_recording(
        out.path(),
        "b",
        &[
            ("--rate-per-link", "100MB/s"),
            ("--post", "3s"),
            ("--trigger-after", "1s"),
            ("--method", "nt"),
            ("--json", json.to_str().unwrap()),
        ],
    );
    let o = common::output_within(group.command(&args), Duration::from_secs(120));
    let err = stderr(&o);
    assert_eq!(
        o.status.code(),
        Some(1),
        "not killed, the links stopped full: {err}"
    );
    assert!(err.contains("is memory (tmpfs)"), "says why: {err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        v["lost_frames"].as_u64().unwrap() > 0,
        "what did not fit is counted: {v}"
    );
    // A link stops full when its share is used. On a loaded machine (tests in parallel, CI) a
    // link may lose most of its window to a full buffer before it gets there (seen: 92 % lost,
    // counted); it then ends without error, and its file is within its share all the same.
    let m = manifest(&out.path().join("b"));
    let links = m["links"].as_array().unwrap();
    let full = |l: &Value| l["error"].as_str().is_some_and(|e| e.contains("full"));
    assert!(links.iter().any(full), "a link stopped full: {m}");
    let share = links.iter().find(|l| full(l)).unwrap()["file_bytes"]
        .as_u64()
        .unwrap();
    for l in links {
        assert!(full(l) || l["error"].is_null(), "full or whole: {l}");
        assert!(
            l["file_bytes"].as_u64().unwrap() <= share,
            "within its share: {l}"
        );
        assert!(l["chunks"].as_u64().unwrap() > 0, "what fit was kept: {l}");
    }
    let (_, rep) = verify(&out.path().join("b"));
    for lv in rep["links"].as_array().unwrap() {
        for p in lv["problems"].as_array().unwrap() {
            assert!(
                p.as_str().unwrap().contains("link failed while recording"),
                "{p}"
            );
        }
    }
}

#[test]
fn a_fault_that_voids_durability_is_taken_only_when_asked_for_by_name() {
    let out = tempfile::tempdir().unwrap();
    for fault in ["lost-flush", "late-flush", "lost-dir-sync"] {
        let (o, _) = record(out.path(), "direct", &[("--inject-fault", fault)]);
        assert_eq!(o.status.code(), Some(2), "{fault}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("--unsafe-faults-for-tests"),
            "{fault}: {}",
            stderr(&o)
        );
        assert!(!out.path().join("b").exists(), "{fault}: nothing recorded");
    }
    let (o, summary) = record(
        out.path(),
        "direct",
        &[
            ("--inject-fault", "lost-flush"),
            ("--unsafe-faults-for-tests", ""),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let m = manifest(&out.path().join("b"));
    assert_eq!(m["injected_faults"], serde_json::json!(["lost-flush"]));
    // The recording's own summary claims no durability it did not have.
    assert_eq!(summary["survives_power_loss"], false, "{summary}");
    let durability = summary["durability"].as_str().unwrap();
    assert!(
        durability.contains("voided by injected faults: lost-flush"),
        "{durability}"
    );
    // A burst recorded without a fault says nothing of faults.
    let clean = tempfile::tempdir().unwrap();
    let (o, _) = record(clean.path(), "direct", &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(manifest(&clean.path().join("b"))
        .get("injected_faults")
        .is_none());
}
