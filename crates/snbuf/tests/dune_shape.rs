//! A unit at DUNE's shape, scaled in rate only: a 10 s buffer, windows from 9 s before to 100 s
//! after an alert, default options otherwise. A second alert 50 s into the first joins it and
//! is recorded whole (a burst grown by joins is not cut at `--max-window`, which bounds one
//! trigger's own window); a third right as the grown window ends is accepted at once and
//! recorded whole while the first burst is sealed, read back and exported at full speed to a
//! real object store (Garage, when installed; CI requires it); a trigger whose id names one of
//! the unit's own files is recorded, its burst named apart. Every window whole, 0 frames lost.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    burst_outcome as sealed, snbuf, status_when, stderr, unit_status as status, KillOnDrop,
};
use serde_json::{json, Value};

/// The shape: 2 links (DUNE has 10 a socket) at 2 MB/s each (DUNE's are ~1 GB/s), a 10 s
/// buffer; the method and every other option the unit's defaults.
const SHAPE: &[&str] = &[
    "--links",
    "2",
    "--rate-per-link",
    "2MB/s",
    "--buffer",
    "10s",
];

/// A trigger on the control socket (`{"cmd":"trigger",...}` plus `fields`), as `snbuf trigger`
/// sends it: its reply, which must accept it.
fn trigger(socket: &Path, fields: Value) -> Value {
    let mut request = json!({"cmd": "trigger"});
    for (k, v) in fields.as_object().unwrap() {
        request[k] = v.clone();
    }
    let mut s = UnixStream::connect(socket).unwrap();
    // The server answers within its own bounds (a trigger waits at most 20 s for a burst that
    // is ending); a reply that never comes fails the test.
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    writeln!(s, "{request}").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let reply: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["ok"], true, "{request} refused: {reply}");
    reply
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// Burst `dir` is valid and holds `[start, end)` whole: sealed, verified, 0 frames lost, its
/// window from `start` to at least `end`, and every trigger it answers covered to its asked end.
fn assert_whole(dir: &Path, start: u64, end: u64) {
    let o = snbuf(&["verify", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let m = manifest(dir);
    assert_eq!(m["state"], "sealed", "{m}");
    for l in m["links"].as_array().unwrap() {
        assert_eq!(l["lost_frames"], 0, "{l}");
        assert!(l["frames"].as_u64().unwrap() > 0, "{l}");
    }
    let w = &m["trigger"];
    assert_eq!(w["window_start_timestamp"].as_u64(), Some(start), "{w}");
    assert!(w["window_end_timestamp"].as_u64().unwrap() >= end, "{w}");
    for t in m["triggers"].as_array().unwrap() {
        assert_eq!(
            t["covered_end_timestamp"], t["window_end_timestamp"],
            "a trigger cut: {t}"
        );
    }
}

fn window_of(reply: &Value) -> (u64, u64) {
    let w = &reply["window"];
    (
        w["window_start_timestamp"].as_u64().unwrap(),
        w["window_end_timestamp"].as_u64().unwrap(),
    )
}

#[test]
fn alerts_that_join_outgrow_or_follow_a_burst_are_recorded_whole() {
    let root = tempfile::tempdir().unwrap();
    let (mut cmd, out, socket) = common::serve_command(root.path(), SHAPE);
    // Every sealed burst exported at full speed (no --export-rate), beside the next recording.
    let store = common::garage::garage(&root.path().join("garage"));
    if let Some((_, env)) = &store {
        cmd.args(["--export-to", "s3://snbuf/shape"])
            .envs(env.clone());
    } else {
        eprintln!("no garage: the bursts are not exported beside the recording");
    }
    let _unit = KillOnDrop(cmd.spawn().unwrap());
    common::wait_for_socket(&socket);
    // The buffer full: the first alert's 9 s before it are there.
    std::thread::sleep(Duration::from_secs(10));

    let first = trigger(
        &socket,
        json!({"burst_id": "first", "pre_s": 9.0, "post_s": 100.0}),
    );
    let (first_start, first_end) = window_of(&first);
    std::thread::sleep(Duration::from_secs(50));
    // Its window ends 159 s after the first's start: past the default --max-window (120 s),
    // which bounds one trigger's own window, not a burst that joins grow.
    let second = trigger(
        &socket,
        json!({"burst_id": "second", "pre_s": 9.0, "post_s": 100.0}),
    );
    assert_eq!(second["burst_id"], "first", "it joins: {second}");
    let joined = &second["joined"];
    assert!(joined["not_covered_s"].is_null(), "cut: {second}");
    let (second_start, second_end) = window_of(&second);
    assert!(second_start > first_start && second_end > first_end);
    assert_eq!(joined["covered_end"].as_u64(), Some(second_end));

    // A third as soon as the grown window's end is in the buffers: the first burst's writers are
    // finishing, then it is sealed and read back, and the third opens its own burst meanwhile.
    let hz = status(&socket)["clock_hz"].as_u64().unwrap();
    status_when(&socket, Duration::from_secs(150), |s| {
        s["newest_timestamp"].as_u64().unwrap_or(0) >= second_end
    });
    let asked = Instant::now();
    let third = trigger(
        &socket,
        json!({"burst_id": "third", "pre_s": 9.0, "post_s": 10.0}),
    );
    eprintln!(
        "third alert accepted in {:.3} s, {:.3} s after the grown window's end",
        asked.elapsed().as_secs_f64(),
        (third["window"]["trigger_timestamp"].as_u64().unwrap() - second_end) as f64 / hz as f64
    );
    assert_eq!(third["burst_id"], "third", "{third}");
    assert!(third["joined"].is_null(), "{third}");
    let (third_start, third_end) = window_of(&third);
    assert!(
        third_start < second_end,
        "its window overlaps the first burst's"
    );

    let first_outcome = sealed(&socket, "first", Duration::from_secs(60));
    let third_outcome = sealed(&socket, "third", Duration::from_secs(60));
    for o in [&first_outcome, &third_outcome] {
        assert_eq!(o["state"], "sealed", "{o}");
        assert_eq!(o["valid"], true, "{o}");
        assert_eq!(o["lost_frames"], 0, "{o}");
    }
    assert_whole(&out.join("first"), first_start, second_end);
    if store.is_some() {
        // Exported and read back (it starts once the first is sealed, seconds into the third).
        let exported = out.join("first/export.json");
        let deadline = Instant::now() + Duration::from_secs(120);
        while !exported.exists() {
            assert!(
                Instant::now() < deadline,
                "the first burst was not exported"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    assert_whole(&out.join("third"), third_start, third_end);
    let first_manifest = manifest(&out.join("first"));
    assert_eq!(
        common::answered_triggers(&first_manifest),
        ["first", "second"]
    );
}

#[test]
fn a_trigger_whose_id_names_the_units_own_file_is_recorded_apart() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("data");
    // The socket in the output, as `serve` puts it by default.
    let socket = out.join("snbuf.sock");
    std::fs::create_dir_all(&out).unwrap();
    let options = [common::SMALL_UNIT, &["--pre", "500ms", "--post", "500ms"]].concat();
    let mut cmd = common::serve_command_into(&out, &socket, &options);
    let _unit = KillOnDrop(cmd.spawn().unwrap());
    common::wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(800));

    let reply = trigger(&socket, json!({"burst_id": "snbuf.sock"}));
    let burst = reply["burst_id"].as_str().unwrap().to_string();
    assert_eq!(burst, "snbuf.sock-2", "{reply}");
    let outcome = sealed(&socket, &burst, Duration::from_secs(30));
    assert_eq!(outcome["valid"], true, "{outcome}");
    assert_eq!(outcome["lost_frames"], 0, "{outcome}");
    let (start, end) = window_of(&reply);
    assert_whole(&out.join(&burst), start, end);
    let m = manifest(&out.join(&burst));
    assert_eq!(common::answered_triggers(&m), ["snbuf.sock"]);
    // The same trigger again is the one already recorded, not a third burst.
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "snbuf.sock",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("already"), "{}", stderr(&o));
    assert!(!out.join("snbuf.sock-3").exists());
}

/// The seconds of data every link of the unit holds now (0 before each has measured its span).
fn held_s(status: &Value) -> f64 {
    let spans = status["link_rates"].as_array().cloned().unwrap_or_default();
    let held = spans
        .iter()
        .map(|r| r["buffer_span_s"].as_f64().unwrap_or(0.0));
    if spans.is_empty() {
        0.0
    } else {
        held.fold(f64::INFINITY, f64::min)
    }
}

/// A unit of 2 WIBEth links at 2 MB/s from the network (`snbuf emit`), its buffer `buffer`,
/// other options the defaults: the unit, its output, its socket and where it listens.
fn udp_unit(
    root: &Path,
    buffer: &str,
) -> (KillOnDrop, std::path::PathBuf, std::path::PathBuf, String) {
    let source = format!("udp://127.0.0.1:{}", common::free_udp_port());
    let (mut cmd, out, socket) = common::serve_command(
        root,
        &[
            "--source",
            &source,
            "--frame",
            "wibeth",
            "--links",
            "2",
            "--rate-per-link",
            "2MB/s",
            "--buffer",
            buffer,
        ],
    );
    let unit = KillOnDrop(cmd.spawn().unwrap());
    common::wait_for_socket(&socket);
    (unit, out, socket, source)
}

/// One link of a detector to `source`: stream `stream`, its clock `offset` from the wall
/// clock (behind: a link whose frames come late), for at most a minute.
fn emit(source: &str, stream: &str, offset: &str) -> KillOnDrop {
    emit_at(source, stream, offset, "2MB/s")
}

/// `emit` at `rate`: a sub-sampled detector below the unit's 2 MB/s, its frames further apart.
fn emit_at(source: &str, stream: &str, offset: &str, rate: &str) -> KillOnDrop {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_snbuf"));
    c.args(["emit", "--to", source, "--streams", stream])
        .args(["--rate-per-link", rate, "--duration", "60s"])
        .arg(format!("--clock-offset={offset}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    KillOnDrop(c.spawn().unwrap())
}

/// A link that dies during a burst must not cost the next alert its window. The alert comes
/// just after the burst's end, its window reaching back over most of the buffer, while the
/// burst's writers still wait for the dead link (a buffer and more, on their own): it waits
/// for them (it is not refused as busy), they give the dead link up in time, and it opens a
/// burst of its own whose window starts where it asked, whole on the live link.
#[test]
fn an_alert_after_a_burst_whose_link_died_keeps_its_window() {
    let root = tempfile::tempdir().unwrap();
    let (_unit, out, socket, source) = udp_unit(root.path(), "4s");
    let _live = emit(&source, "0", "0s");
    let dying = emit(&source, "1", "0s");
    status_when(&socket, Duration::from_secs(20), |s| held_s(s) >= 3.5);

    let first = trigger(
        &socket,
        json!({"burst_id": "first", "pre_s": 1.0, "post_s": 1.0}),
    );
    drop(dying);
    let (_, first_end) = window_of(&first);
    // The live link's writer is done with the first window (it closes the burst to joins);
    // the dead link's waits.
    status_when(&socket, Duration::from_secs(10), |s| {
        s["newest_timestamp"].as_u64().unwrap_or(0) >= first_end
    });
    std::thread::sleep(Duration::from_millis(500));
    // 2.5 s before it, of a 4 s buffer: left alone, the first burst would hold the unit until
    // 6 s after its end is due, and this window's start would be gone.
    let second = trigger(
        &socket,
        json!({"burst_id": "second", "pre_s": 2.5, "post_s": 1.0}),
    );
    assert_eq!(second["burst_id"], "second", "{second}");
    assert!(second["joined"].is_null(), "{second}");
    let (second_start, _) = window_of(&second);
    assert!(second_start < first_end, "its window overlaps the first's");

    for id in ["first", "second"] {
        let o = sealed(&socket, id, Duration::from_secs(30));
        assert_eq!(o["valid"], true, "{o}");
        let m = manifest(&out.join(id));
        let links = m["links"].as_array().unwrap();
        // The live link whole, the dead one's rest counted lost (nothing could have sent it).
        assert_eq!(links[0]["lost_frames"], 0, "{id}: {}", links[0]);
        assert!(links[0]["frames"].as_u64().unwrap() > 0, "{id}");
        assert!(links[1]["lost_frames"].as_u64().unwrap() > 0, "{id}");
    }
    let m = manifest(&out.join("second"));
    assert_eq!(
        m["trigger"]["window_start_timestamp"].as_u64(),
        Some(second_start),
        "the window starts where it was asked to"
    );
}

/// A link sparser than the unit was told (a frame every ~0.7 s against the 2 MB/s it was
/// configured for: 0.5 s of silence would be 140 of those frames) and late is not a dead one
/// either: between two of its frames, an alert waiting for the burst to end does not cut it.
#[test]
fn an_alert_as_a_burst_ends_does_not_cut_a_sparse_link() {
    // The late link's frames of the first window come over 3 s, 0.7 s apart.
    alert_as_a_burst_ends_with_a_late_link("8s", "10kB/s", "-3s", 2.0, 4.0);
}

/// A link whose frames come late (its sender's clock 2 s behind) is not a dead one: an alert
/// that comes as the burst ends, the other link done, waits for it to bring the burst's end,
/// and neither burst loses a frame.
#[test]
fn an_alert_as_a_burst_ends_does_not_cut_a_link_that_is_late() {
    // The late link brings the first window's end 1.7 s after the alert; its window's start
    // is then 4.7 s old, in the 6 s buffer.
    alert_as_a_burst_ends_with_a_late_link("6s", "2MB/s", "-2s", 1.0, 3.0);
}

/// Two links at `rate` into a unit of `buffer`, the second `late_by` behind: an alert
/// (`first_pre` s before, 1 s after), then, once the on-time link has brought its end and
/// closed the burst to joins, a second (`second_pre` s before, 0.5 s after) that waits for the
/// late link. Both bursts sealed, valid, 0 frames lost.
fn alert_as_a_burst_ends_with_a_late_link(
    buffer: &str,
    rate: &str,
    late_by: &str,
    first_pre: f64,
    second_pre: f64,
) {
    let root = tempfile::tempdir().unwrap();
    let (_unit, out, socket, source) = udp_unit(root.path(), buffer);
    let _on_time = emit_at(&source, "0", "0s", rate);
    let _late = emit_at(&source, "1", late_by, rate);
    // Within a second of full ("8s" → 7 s held): the second window's start is still held.
    let full_s = buffer.trim_end_matches('s').parse::<f64>().unwrap() - 1.0;
    status_when(&socket, Duration::from_secs(20), |s| held_s(s) >= full_s);
    let first = trigger(
        &socket,
        json!({"burst_id": "first", "pre_s": first_pre, "post_s": 1.0}),
    );
    let (_, first_end) = window_of(&first);
    status_when(&socket, Duration::from_secs(10), |s| {
        s["newest_timestamp"].as_u64().unwrap_or(0) >= first_end
    });
    // The on-time link's writer reads that frame and closes the burst to joins (milliseconds).
    std::thread::sleep(Duration::from_millis(300));
    let second = trigger(
        &socket,
        json!({"burst_id": "second", "pre_s": second_pre, "post_s": 0.5}),
    );
    assert_eq!(second["burst_id"], "second", "{second}");
    for id in ["first", "second"] {
        let o = sealed(&socket, id, Duration::from_secs(30));
        assert_eq!(o["valid"], true, "{o}");
        assert_eq!(o["lost_frames"], 0, "{id}: {o}");
        let v = snbuf(&["verify", out.join(id).to_str().unwrap()]);
        assert_eq!(v.status.code(), Some(0), "{id}: {}", stderr(&v));
    }
}
