//! Time is the detector's, end to end over real sockets and processes: a second of a trigger
//! window is a second of the frame type's clock (62.5 MHz for DUNE's timing system, 50 MHz for
//! ProtoDUNE's WIB) whatever the rate a link is configured or sent at; the window the client is
//! told is the window recorded; a sender whose clock is far from the wall clock is triggered in
//! its own time; and a stream the unit was not configured for is said, not hidden.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_udp_port, snbuf, stderr, wait_for_socket, KillOnDrop};
use serde_json::{json, Value};
use snbuf_burst::Manifest;
use snbuf_readout::FrameType;

/// `snbuf serve` on `port` with `options`, its stderr in `root/serve.log`.
fn serve(root: &Path, port: u16, options: &[&str]) -> (KillOnDrop, PathBuf, PathBuf) {
    let (out, socket) = (root.join("data"), root.join("ctl.sock"));
    let log = std::fs::File::create(root.join("serve.log")).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--source", &format!("udp://127.0.0.1:{port}")])
        .args(options)
        .arg("--output")
        .arg(&out)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    wait_for_socket(&socket);
    (KillOnDrop(child), out, socket)
}

/// `snbuf emit` of one link to `port` with `options`, for `seconds`.
fn emit(port: u16, seconds: u32, options: &[&str]) -> KillOnDrop {
    KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_snbuf"))
            .args(["emit", "--to", &format!("udp://127.0.0.1:{port}")])
            .args(["--duration", &format!("{seconds}s")])
            .args(options)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// One request on the control socket, its reply (within 10 s).
fn ask(socket: &Path, req: &Value) -> Value {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    writeln!(s, "{req}").unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap()
}

/// Waits (at most 60 s) until burst `id` is in the unit's past bursts; returns its outcome.
fn outcome(socket: &Path, id: &str) -> Value {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let s = ask(socket, &json!({"cmd": "status"}));
        if let Some(b) = s["bursts"]
            .as_array()
            .and_then(|v| v.iter().find(|b| b["burst_id"] == id))
        {
            return b.clone();
        }
        assert!(Instant::now() < until, "burst {id} not sealed in 60 s");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits (at most 20 s) until the unit holds at least `seconds` of data on every link.
fn wait_for_data(socket: &Path, seconds: f64) {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let s = ask(socket, &json!({"cmd": "status"}));
        let held = s["link_rates"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["buffer_span_s"].as_f64())
            .fold(f64::INFINITY, f64::min);
        if held.is_finite() && held >= seconds {
            return;
        }
        assert!(
            Instant::now() < until,
            "no {seconds} s of data in 20 s: {s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Triggers `socket` with `req`, waits for the burst, and checks that it holds `pre + post`
/// seconds of `clock_hz` in frames `step` apart (within 1%), none lost, and that the window
/// the client was told is the manifest's, byte for byte.
fn two_seconds_of_the_detectors_clock(
    socket: &Path,
    out: &Path,
    id: &str,
    clock_hz: u64,
    step: u64,
) {
    let reply = ask(
        socket,
        &json!({"cmd": "trigger", "pre_s": 1.0, "post_s": 1.0, "burst_id": id}),
    );
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["window"]["clock_hz"], clock_hz);
    let window_s = reply["window_s"].as_f64().unwrap();
    assert!(
        (window_s - 2.0).abs() <= 2.0 * step as f64 / clock_hz as f64,
        "{reply}"
    );
    let b = outcome(socket, id);
    assert_eq!(b["state"], "sealed", "{b}");
    assert_eq!(b["valid"], true, "{b}");
    assert_eq!(b["lost_frames"], 0, "{b}");
    let m = Manifest::read(&out.join(id)).unwrap();
    // The window replied is the window recorded, byte for byte.
    let manifest_text = std::fs::read_to_string(out.join(id).join("manifest.json")).unwrap();
    let manifest_json: Value = serde_json::from_str(&manifest_text).unwrap();
    assert_eq!(
        serde_json::to_string(&manifest_json["trigger"]).unwrap(),
        serde_json::to_string(&reply["window"]).unwrap()
    );
    assert_eq!(manifest_json["frame"]["clock_hz"], clock_hz);
    let l = &m.links[0];
    let want = 2.0 * clock_hz as f64 / step as f64;
    let frames = l.data.frames as f64;
    assert!(
        (frames / want - 1.0).abs() < 0.01,
        "{frames} frames, want {want:.0}"
    );
    let span_s = (l.data.last_timestamp.unwrap() + step - l.data.first_timestamp.unwrap()) as f64
        / clock_hz as f64;
    assert!((span_s - 2.0).abs() < 0.02, "the frames span {span_s} s");
}

#[test]
fn a_wibeth_link_at_its_own_rate_on_defaults_records_two_seconds_of_62_5_mhz() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    // Defaults: the rate is WIBEth's own on both sides.
    let (_server, out, socket) = serve(root.path(), port, &["--frame", "wibeth", "--links", "1"]);
    let _sender = emit(port, 12, &["--frame", "wibeth"]);
    wait_for_data(&socket, 2.2);
    let t = FrameType::WibEth;
    two_seconds_of_the_detectors_clock(&socket, &out, "wibeth", 62_500_000, t.ticks_per_frame());
    // 61 035 frames: 2 s of a real WIBEth link.
    let m = Manifest::read(&out.join("wibeth")).unwrap();
    assert!((m.links[0].data.frames as f64 / 61_035.0 - 1.0).abs() < 0.01);
    let s = ask(&socket, &json!({"cmd": "status"}));
    assert_eq!(s["link_rates"][0]["mismatch"], false, "{s}");
}

#[test]
fn a_sub_sampled_protodune_wib_link_keeps_the_50_mhz_clock() {
    // ProtoDUNE's WIB superchunks (12 frames each) on its 50 MHz clock, sent at 50 MB/s instead
    // of 928 MB/s: one superchunk in 18.6, the window still two seconds of the clock.
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let rate = ["--rate-per-link", "50MB/s"];
    let (_server, out, socket) = serve(
        root.path(),
        port,
        &["--frame", "protodune-wib", "--links", "1", rate[0], rate[1]],
    );
    let _sender = emit(port, 12, &["--frame", "protodune-wib", rate[0], rate[1]]);
    wait_for_data(&socket, 2.2);
    let t = FrameType::ProtoDuneWib;
    let step = snbuf_frames::DetectorClock::of(t).frame_step_ticks(50e6 / t.frame_bytes() as f64);
    assert!(step > t.ticks_per_frame());
    two_seconds_of_the_detectors_clock(&socket, &out, "pdwib", 50_000_000, step);
}

#[test]
fn a_sender_a_day_behind_the_wall_clock_is_triggered_in_its_own_time() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let (_server, out, socket) = serve(
        root.path(),
        port,
        &[
            "--frame",
            "wibeth",
            "--links",
            "1",
            "--rate-per-link",
            "20MB/s",
        ],
    );
    let _sender = emit(
        port,
        15,
        &[
            "--frame",
            "wibeth",
            "--rate-per-link",
            "20MB/s",
            "--clock-offset=-1d",
        ],
    );
    wait_for_data(&socket, 2.2);
    let hz = 62_500_000u64;
    let day_ago = |unix_ns: u128| ((unix_ns / 1_000_000_000) as u64 - 86_400) * hz;
    let now_ns = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    };
    // "now" is the sender's now, a day behind: its newest data.
    let before = day_ago(now_ns());
    let r = ask(
        &socket,
        &json!({"cmd": "trigger", "pre_s": 1.0, "post_s": 1.0, "burst_id": "now"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    let at = r["window"]["trigger_timestamp"].as_u64().unwrap();
    assert!(
        at.abs_diff(before) < 3 * hz,
        "trigger at {at}, a day ago was {before}"
    );
    assert!(r["window"].get("not_buffered_s").is_none(), "{r}");
    let b = outcome(&socket, "now");
    assert!(b["valid"] == true && b["lost_frames"] == 0, "{b}");
    // --at T in the sender's clock records around T: half a second before what it holds now.
    let newest = ask(&socket, &json!({"cmd": "status"}))["newest_timestamp"]
        .as_u64()
        .unwrap();
    let t = newest - hz / 2;
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--at",
        &t.to_string(),
        "--pre",
        "500ms",
        "--post",
        "200ms",
        "--burst-id",
        "at",
        "--wait",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("0.500 s before to 0.200 s after"), "{text}");
    let m = Manifest::read(&out.join("at")).unwrap();
    let w = m.trigger.unwrap();
    assert_eq!(w.trigger_timestamp, t);
    let l = &m.links[0].data;
    assert!(l.first_timestamp.unwrap() >= w.window_start_timestamp);
    assert!(l.last_timestamp.unwrap() < w.window_end_timestamp);
    assert_eq!(m.links[0].lost_frames, 0);
}

#[test]
fn a_stream_faster_than_configured_is_said_and_its_missing_seconds_counted() {
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let metrics = common::free_port();
    // Configured for 20 MB/s (a 3 s buffer of that), fed WIBEth's own 219.7 MB/s: the buffer
    // holds about 0.27 s.
    let (_server, _out, socket) = serve(
        root.path(),
        port,
        &[
            "--frame",
            "wibeth",
            "--links",
            "1",
            "--rate-per-link",
            "20MB/s",
            "--metrics",
            &format!("127.0.0.1:{metrics}"),
        ],
    );
    let sender = emit(port, 15, &["--frame", "wibeth"]);
    // The mismatch shows in status once a few seconds are measured.
    let until = Instant::now() + Duration::from_secs(20);
    let rates = loop {
        let s = ask(&socket, &json!({"cmd": "status"}));
        let r = s["link_rates"][0].clone();
        if r["mismatch"] == true {
            break r;
        }
        assert!(Instant::now() < until, "no mismatch seen in 20 s: {s}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let ratio = rates["rate_ratio"].as_f64().unwrap();
    assert!((8.0..14.0).contains(&ratio), "{rates}");
    assert!(
        (rates["clock_ratio"].as_f64().unwrap() - 1.0).abs() < 0.05,
        "{rates}"
    );
    let span = rates["buffer_span_s"].as_f64().unwrap();
    assert!(span < 0.5, "the buffer holds {span} s, not 3");
    // In the metrics.
    let body = http_get(metrics, "/metrics");
    let line = body
        .lines()
        .find(|l| l.starts_with("snbuf_link_rate_ratio{link=\"0\"}"))
        .unwrap_or_else(|| panic!("no rate ratio in {body}"));
    let v: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(v > 5.0, "{line}");
    assert!(body.contains("snbuf_link_clock_ratio{link=\"0\"}"));
    // In the log, once.
    let log = std::fs::read_to_string(root.path().join("serve.log")).unwrap();
    assert_eq!(
        log.matches("not what the unit was configured for").count(),
        1,
        "{log}"
    );
    // A --pre of 1 s reaches beyond the 0.27 s the buffer holds: what is there is recorded, the
    // rest reported in seconds and counted lost, never "0 lost".
    let r = ask(
        &socket,
        &json!({"cmd": "trigger", "pre_s": 1.0, "post_s": 0.2, "burst_id": "short"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    let missing = r["window"]["not_buffered_s"]
        .as_f64()
        .expect("said in the reply");
    assert!(missing > 0.5, "{r}");
    let b = outcome(&socket, "short");
    // Frames are counted on the configured frame step (11 of the stream's apart here): the
    // seconds are the measure that holds whatever the stream.
    assert!(b["lost_frames"].as_u64().unwrap() > 0, "{b}");
    assert!(b["lost_s"].as_f64().unwrap() > 0.5, "{b}");
    let body = http_get(metrics, "/metrics");
    let not_buffered = body
        .lines()
        .find(|l| l.starts_with("snbuf_window_not_buffered_seconds_total"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!(not_buffered > 0.5, "{body}");
    drop(sender);
}

/// GET `path` from 127.0.0.1:`port` (within 10 s).
fn http_get(port: u16, path: &str) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    body
}
