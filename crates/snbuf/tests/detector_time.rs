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

/// Sends `links` WIBEth links to `port` at `frames_per_s` each, their timestamps contiguous
/// (the frame type's own step: a detector replayed slowly, or a test stand) from `first_ts`,
/// until `stop` or 60 s.
fn send_contiguous(
    port: u16,
    links: u32,
    frames_per_s: f64,
    first_ts: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.connect(("127.0.0.1", port)).unwrap();
        let step = FrameType::WibEth.ticks_per_frame();
        let mut gens: Vec<_> = (0..links)
            .map(|l| {
                let mut g = snbuf_readout::FrameGen::new(
                    FrameType::WibEth,
                    l,
                    &snbuf_readout::Payload::Emulated,
                )
                .unwrap();
                g.set_stream(l as u8);
                g
            })
            .collect();
        let started = Instant::now();
        for k in 0u64.. {
            if stop.load(std::sync::atomic::Ordering::Relaxed)
                || started.elapsed() > Duration::from_secs(60)
            {
                return;
            }
            let due = started + Duration::from_secs_f64(k as f64 / frames_per_s);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            for g in &mut gens {
                let _ = socket.send(g.frame_at(first_ts + k * step));
            }
        }
    })
}

#[test]
fn a_stream_slower_than_the_detector_keeps_its_own_spacing() {
    // Two WIBEth links at 1000 frames/s each, timestamps contiguous: 7.2 MB/s per link, as the
    // unit is configured, but the detector's clock advances 0.033 s a second. The frames are
    // 2048 ticks apart (WIBEth's own step), not the 62,500 a sub-sampled 7.2 MB/s link would
    // have: the burst files are sized for that, and the window is counted in it.
    let root = tempfile::tempdir().unwrap();
    let port = free_udp_port();
    let (_server, out, socket) = serve(
        root.path(),
        port,
        &[
            "--frame",
            "wibeth",
            "--links",
            "2",
            "--rate-per-link",
            "7.2MB/s",
            "--buffer",
            "4s",
            "--pre",
            "1s",
            "--post",
            "1s",
            "--method",
            "direct",
        ],
    );
    let clock = snbuf_frames::DetectorClock::of(FrameType::WibEth);
    let step = FrameType::WibEth.ticks_per_frame();
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let first_ts = clock.ticks_at_unix_ns(now_ns) / step * step;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = send_contiguous(port, 2, 1000.0, first_ts, stop.clone());
    // Long enough for the unit to measure the stream's clock (it gives a link that long to
    // bring its window by the wall clock).
    std::thread::sleep(Duration::from_secs(3));
    let newest = ask(&socket, &json!({"cmd": "status"}))["newest_timestamp"]
        .as_u64()
        .unwrap();
    // 50 ms of the detector's clock each side: 1,526 frames, 1.5 s of this stream after the
    // trigger. The part before is in the 4,000 frames the buffer holds.
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--at",
        &newest.to_string(),
        "--pre",
        "50ms",
        "--post",
        "50ms",
        "--burst-id",
        "slow",
        "--wait",
    ]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    sender.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let m = Manifest::read(&out.join("slow")).unwrap();
    assert_eq!(
        m.frame.as_ref().and_then(|f| f.frame_step_ticks),
        Some(step),
        "the stream's own step"
    );
    let w = m.trigger.clone().unwrap();
    let window = (w.window_end_timestamp - w.window_start_timestamp) / step;
    assert!((3000..3100).contains(&window), "{window} frames");
    let v = snbuf(&["verify", out.join("slow").to_str().unwrap()]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stdout));
    for (l, rec) in m.links.iter().enumerate() {
        assert_eq!(
            (rec.data.frames, rec.lost_frames),
            (window, 0),
            "link {l}: the whole window, none lost: {rec:?}"
        );
        // Byte for byte the frames sent.
        let bytes = std::fs::read(out.join("slow").join(&rec.file)).unwrap();
        let report = snbuf_burst::scan(&bytes[..], snbuf_burst::Expect::default()).unwrap();
        let mut sent = snbuf_readout::FrameGen::new(
            FrameType::WibEth,
            l as u32,
            &snbuf_readout::Payload::Emulated,
        )
        .unwrap();
        sent.set_stream(l as u8);
        let fb = FrameType::WibEth.frame_bytes() as usize;
        let layout = FrameType::WibEth.layout();
        let mut n = 0;
        for c in &report.chunks {
            let start = (c.offset + c.payload_offset) as usize;
            for f in bytes[start..start + c.payload_bytes as usize].chunks(fb) {
                assert_eq!(sent.frame_at(layout.timestamp(f)), f, "link {l}");
                n += 1;
            }
        }
        assert_eq!(n, window);
    }
}
