//! Over NATS as over the socket: a trigger that reaches a unit before its first frame (a unit
//! just started, a sender not yet flowing) waits for it and is recorded, not missed at once; a
//! trigger whose id names the unit's own journal is recorded, its burst named apart, not taken
//! for a duplicate.
//!
//! Without nats-server these tests skip and say so, unless SNBUF_REQUIRE_NATS is set.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, free_udp_port, snbuf, stderr, wait_for_socket, KillOnDrop};
use serde_json::Value;

/// A NATS server of the test's own (None: no nats-server here, the test skips).
fn nats_in(root: &Path) -> Option<(KillOnDrop, String)> {
    let port = free_port();
    let nats = common::nats_server_on(&common::nats_server_bin()?, port, &root.join("js"));
    Some((nats, format!("nats://127.0.0.1:{port}")))
}

/// Polls `snbuf fleet status` (at most 20 s) until unit `id` is heartbeating.
fn wait_heartbeat(url: &str, id: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = snbuf(&["fleet", "status", "--nats", url, "--json"]);
        if o.status.success() {
            let v: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
            if v.iter()
                .any(|u| u["status"]["unit"] == id && u["missing"] == false)
            {
                return;
            }
        }
        assert!(Instant::now() < deadline, "unit {id} never heartbeat");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (at most `within`) until `dir` holds a sealed burst; its manifest.
fn wait_sealed(dir: &Path, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(dir.join("manifest.json")) {
            let m: Value = serde_json::from_str(&text).unwrap();
            if m["state"] == "sealed" {
                return m;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} not sealed in {within:?}",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn events(url: &str) -> Vec<Value> {
    let o = snbuf(&["fleet", "events", "--nats", url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn a_nats_trigger_before_the_first_frame_waits_for_it_and_is_recorded() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let port = free_udp_port();
    let (out, socket) = (root.path().join("data"), root.path().join("ctl.sock"));
    let log = root.path().join("serve.log");
    let unit = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--source", &format!("udp://127.0.0.1:{port}")])
        .args([
            "--frame",
            "wibeth",
            "--links",
            "1",
            "--rate-per-link",
            "5MB/s",
            "--buffer",
            "2s",
        ])
        .args(["--nats", &url, "--unit", "early"])
        .arg("--output")
        .arg(&out)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _unit = KillOnDrop(unit);
    wait_for_socket(&socket);
    wait_heartbeat(&url, "early");

    // Issued before the sender starts: the unit has no frame, so no data clock, yet.
    let o = snbuf(&[
        "trigger",
        "--nats",
        &url,
        "--burst-id",
        "early",
        "--pre",
        "200ms",
        "--post",
        "3s",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::thread::sleep(Duration::from_millis(500));
    let _sender = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_snbuf"))
            .args(["emit", "--to", &format!("udp://127.0.0.1:{port}")])
            .args([
                "--links",
                "1",
                "--rate-per-link",
                "5MB/s",
                "--duration",
                "20s",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let m = wait_sealed(&out.join("early"), Duration::from_secs(30));
    let o = snbuf(&["verify", out.join("early").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(common::answered_triggers(&m), ["early"]);
    // The data from the sender's first frame on is all there: only the part of the window
    // before the detector sent anything is missing, and that is said.
    let frames: u64 = m["links"][0]["frames"].as_u64().unwrap();
    assert!(frames > 0, "{m}");
    let missed = events(&url)
        .into_iter()
        .filter(|e| e["event"] == "missed" && e["trigger_id"] == "early")
        .count();
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        missed, 0,
        "a missed event for a trigger it recorded: {text}"
    );
}

#[test]
fn a_nats_trigger_named_as_the_units_journal_is_recorded_apart() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let (out, socket) = (root.path().join("data"), root.path().join("ctl.sock"));
    let unit = common::serve_command_into(&out, &socket, common::SMALL_UNIT)
        .args(["--pre", "300ms", "--post", "300ms"])
        .args(["--nats", &url, "--unit", "j"])
        .spawn()
        .unwrap();
    let _unit = KillOnDrop(unit);
    wait_for_socket(&socket);
    wait_heartbeat(&url, "j");
    std::thread::sleep(Duration::from_millis(500));
    assert!(out.join("fleet-triggers.jsonl").is_file());

    let o = snbuf(&[
        "trigger",
        "--nats",
        &url,
        "--burst-id",
        "fleet-triggers.jsonl",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let m = wait_sealed(&out.join("fleet-triggers.jsonl-2"), Duration::from_secs(30));
    assert_eq!(common::answered_triggers(&m), ["fleet-triggers.jsonl"]);
    for l in m["links"].as_array().unwrap() {
        assert_eq!(l["lost_frames"], 0, "{l}");
    }
    assert!(
        out.join("fleet-triggers.jsonl").is_file(),
        "the journal kept"
    );
    let duplicates = events(&url)
        .into_iter()
        .filter(|e| e["event"] == "duplicate")
        .count();
    assert_eq!(duplicates, 0);
}
