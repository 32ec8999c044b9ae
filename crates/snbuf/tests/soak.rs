//! Soak: back-to-back triggers in one `snbuf serve` process. Every burst must verify, and the
//! server's open file descriptors and resident memory must stay flat: a leak of one descriptor
//! or one staging buffer per burst shows within a few bursts.
//!
//! CI runs 5 triggers; `bench/soak.sh` runs 20 (`SNBUF_SOAK_TRIGGERS=N`) and prints the figures
//! for RELIABILITY.md.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{snbuf, wait_for_socket, KillOnDrop};

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// VmRSS of `pid`, in bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

#[test]
fn back_to_back_triggers_keep_descriptors_and_memory_flat() {
    let triggers: usize = std::env::var("SNBUF_SOAK_TRIGGERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    let socket = dir.path().join("ctl.sock");
    let (o, s) = (out.to_str().unwrap(), socket.to_str().unwrap());
    let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--output", o, "--socket", s])
        .args([
            "--links",
            "4",
            "--rate-per-link",
            "10MB/s",
            "--buffer",
            "1s",
        ])
        .args(["--pre", "300ms", "--post", "500ms", "--method", "direct"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let _server = KillOnDrop(child);
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(500));

    let mut fds = Vec::new();
    let mut rss = Vec::new();
    for i in 0..triggers {
        let id = format!("soak-{i:03}");
        let o = snbuf(&["trigger", "--socket", s, "--burst-id", &id, "--wait"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            snbuf(&["verify", out.join(&id).to_str().unwrap()])
                .status
                .code(),
            Some(0),
            "burst {id} verifies"
        );
        // The next burst's preparation runs after each burst: measure once it is ready, so
        // that every sample sees the same state (one burst prepared, none recording).
        wait_until_prepared(&socket);
        fds.push(open_fds(pid));
        rss.push(rss_bytes(pid));
    }
    let mib = |b: &u64| format!("{:.1}", *b as f64 / (1 << 20) as f64);
    println!(
        "soak: {triggers} bursts, all verified; open files after each: {:?}; RSS MiB after each: {:?}",
        fds,
        rss.iter().map(mib).collect::<Vec<_>>()
    );
    common::keep_result_line(
        "SNBUF_SOAK_RESULT",
        &serde_json::json!({
            "triggers": triggers,
            "bursts_verified": triggers,
            "open_files_after_each": fds,
            "rss_bytes_after_each": rss,
        }),
    );
    assert!(
        fds.iter().all(|&n| n == fds[0]),
        "open descriptors drift: {fds:?}"
    );
    // Memory: after the first burst (which faults in what every burst uses), RSS may move by
    // allocator noise, never by a burst's worth (4 links x 0.8 s x 10 MB/s = 32 MB) per burst.
    let settled = &rss[1.min(rss.len() - 1)..];
    let (lo, hi) = (settled.iter().min().unwrap(), settled.iter().max().unwrap());
    assert!(hi - lo < 8 << 20, "RSS drifts: {rss:?}");
}

fn wait_until_prepared(socket: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let o = snbuf(&["status", "--socket", socket.to_str().unwrap(), "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if v["next_burst"] == "ready" && v["recording"].is_null() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the next burst was never prepared: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
