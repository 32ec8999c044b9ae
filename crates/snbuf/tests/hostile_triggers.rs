//! Triggers a careless or hostile sender could give a unit, over its control socket and over
//! NATS: each is refused with its reason, nothing is written for it, a flood is counted and
//! logged at a bounded rate, and a real trigger after all of them is recorded whole.
//!
//! The NATS test skips without nats-server, unless SNBUF_REQUIRE_NATS is set (as in CI).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use std::time::{Duration, Instant};

use common::{free_port, snbuf, stderr, KillOnDrop, Served};
use serde_json::{json, Value};

/// One request to the control socket, as any local process could send it; the reply, or None
/// when the server closed the connection without one.
fn ask_raw(socket: &Path, line: &[u8]) -> Option<Value> {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    // A server that stops reading a huge request may reset the connection: no reply.
    let _ = s.write_all(line).and_then(|()| s.write_all(b"\n"));
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).ok()?;
    serde_json::from_str(reply.trim()).ok()
}

/// The unit's bursts (directories with a manifest) under `out`.
fn bursts(out: &Path) -> Vec<String> {
    let mut b: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            e.path()
                .join("manifest.json")
                .exists()
                .then(|| e.file_name().to_string_lossy().into_owned())
        })
        .collect();
    b.sort();
    b
}

/// The sample `name` of a Prometheus exposition.
fn sample(body: &str, name: &str) -> f64 {
    body.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} not in:\n{body}"))
        .trim()
        .parse()
        .unwrap()
}

fn metrics(port: u16) -> String {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// A small unit writing to `root`/data: 2 links at 5 MB/s, a 2 s buffer, windows of at most
/// 5 s, and `extra` options.
fn serve(root: &Path, extra: &[&str]) -> Served {
    serve_into(root, &root.join("data"), "5s", extra)
}

/// As `serve`, writing to `out`, with windows of at most `max_window`.
fn serve_into(root: &Path, out: &Path, max_window: &str, extra: &[&str]) -> Served {
    let (out, socket, log) = (
        out.to_path_buf(),
        root.join("ctl.sock"),
        root.join("serve.log"),
    );
    let mut cmd = common::serve_command_into(&out, &socket, common::SMALL_UNIT);
    cmd.args(["--pre", "300ms", "--post", "300ms"])
        .args(["--max-window", max_window])
        .args(extra)
        .stderr(std::fs::File::create(&log).unwrap());
    common::started(&mut cmd, &out, &socket, Some(&log))
}

/// Asks for `request` and expects a refusal that mentions `needle`.
fn refused(socket: &Path, request: &Value, needle: &str) {
    let reply = ask_raw(socket, request.to_string().as_bytes())
        .unwrap_or_else(|| panic!("{request}: no reply"));
    assert_eq!(reply["ok"], false, "{request} was accepted: {reply}");
    let why = reply["error"].as_str().unwrap_or_default();
    assert!(why.contains(needle), "{request}: '{needle}' not in: {why}");
}

#[test]
fn hostile_triggers_over_the_socket_are_refused_and_the_unit_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    let u = serve(
        root.path(),
        &["--metrics", &format!("127.0.0.1:{metrics_port}")],
    );
    let s = u.socket.as_path();
    // Data in the buffers, so that every refusal below is the trigger's fault.
    let deadline = Instant::now() + Duration::from_secs(20);
    while ask_raw(s, br#"{"cmd":"status"}"#).unwrap()["live"][0]["buffer_fill_frames"]
        .as_u64()
        .unwrap_or(0)
        < 100
    {
        assert!(Instant::now() < deadline, "no data buffered within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    let newest = {
        let o = snbuf(&[
            "trigger",
            "--socket",
            s.to_str().unwrap(),
            "--burst-id",
            "first",
            "--wait",
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        let m: Value = serde_json::from_str(
            &std::fs::read_to_string(u.out.join("first/manifest.json")).unwrap(),
        )
        .unwrap();
        m["links"][0]["last_timestamp"].as_u64().unwrap()
    };
    let before = bursts(&u.out);

    // A day-long window: the one trigger that would take the unit out for a day.
    refused(
        s,
        &json!({"cmd": "trigger", "pre_s": 0.1, "post_s": 86400.0}),
        "--max-window",
    );
    refused(
        s,
        &json!({"cmd": "trigger", "pre_s": 1.0, "post_s": 4.5}),
        "--max-window",
    );
    // At tick 1, decades before the buffer: gone, not a burst of no frame.
    refused(s, &json!({"cmd": "trigger", "at": 1}), "gone");
    // Far ahead of the data: a clock mix-up.
    refused(s, &json!({"cmd": "trigger", "at": u64::MAX}), "ahead");
    refused(
        s,
        &json!({"cmd": "trigger", "at": newest + 1_000_000_000}),
        "ahead",
    );
    // Names that are not a safe directory name, or would forge a log line or a header.
    let long = "x".repeat(300);
    for id in [
        "../escape",
        "/tmp/x",
        "a/b",
        "..",
        "",
        ".hidden",
        "nl\nFORGED",
        "esc\u{1b}[31m",
        "a b",
        &long,
    ] {
        refused(
            s,
            &json!({"cmd": "trigger", "burst_id": id}),
            "not a plain name",
        );
    }
    // A window of nothing.
    refused(
        s,
        &json!({"cmd": "trigger", "pre_s": 0.0, "post_s": 0.0}),
        "empty window",
    );
    // Numbers that are not seconds.
    refused(s, &json!({"cmd": "trigger", "pre_s": -1.0}), "pre_s");
    refused(s, &json!({"cmd": "trigger", "post_s": 1e308}), "post_s");
    refused(s, &json!({"cmd": "trigger", "at": "yesterday"}), "at");
    refused(s, &json!({"cmd": "trigger", "at": -5}), "");
    refused(
        s,
        &json!({"cmd": "trigger", "burst_id": "first"}),
        "already exists",
    );
    refused(s, &json!({"cmd": "cancel-everything"}), "unknown command");
    // A request of 2 MB is cut off, answered or not, and the unit goes on.
    let big = format!(
        "{{\"cmd\":\"trigger\",\"burst_id\":\"{}\"}}",
        "x".repeat(2 << 20)
    );
    if let Some(reply) = ask_raw(s, big.as_bytes()) {
        assert_eq!(reply["ok"], false, "{reply}");
    }
    assert_eq!(
        bursts(&u.out),
        before,
        "nothing written for a refused trigger"
    );
    assert!(!root.path().join("escape").exists() && !u.out.join("escape").exists());

    // A flood of refused triggers from four clients at once...
    let flood: Vec<_> = (0..4)
        .map(|_| {
            let s = s.to_path_buf();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let r = ask_raw(
                        &s,
                        json!({"cmd": "trigger", "at": 1}).to_string().as_bytes(),
                    );
                    // Refused as gone, or told to retry when all clients are busy.
                    assert!(r.is_none_or(|r| r["ok"] == false));
                }
            })
        })
        .collect();
    // ...does not starve a real trigger sent in its middle.
    let o = snbuf(&[
        "trigger",
        "--socket",
        s.to_str().unwrap(),
        "--burst-id",
        "real",
        "--wait",
    ]);
    for t in flood {
        t.join().unwrap();
    }
    assert!(o.status.success(), "{}", stderr(&o));
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(u.out.join("real/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(m["state"], "sealed");
    for l in m["links"].as_array().unwrap() {
        assert_eq!(l["lost_frames"], 0, "{m}");
        assert!(l["frames"].as_u64().unwrap() > 0);
    }
    assert_eq!(bursts(&u.out), ["first", "real"]);

    // Every refusal counted; the log says at most 10 a period and how many more.
    let refusals = sample(&metrics(metrics_port), "snbuf_triggers_refused_total");
    assert!(refusals >= 400.0, "{refusals} refusals counted");
    let log = std::fs::read_to_string(u.log.as_ref().unwrap()).unwrap();
    let lines = log.matches("trigger refused").count();
    assert!(
        (10..=40).contains(&lines),
        "{lines} refusal lines for {refusals} refusals:\n{log}"
    );
}

#[test]
fn a_window_the_outputs_cannot_hold_is_recorded_cut_and_the_cut_said() {
    let Some(small) = common::Mount::tmpfs("size=96M") else {
        return common::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a small tmpfs cannot be mounted (needs root)",
        );
    };
    let root = tempfile::tempdir().unwrap();
    let out = small.path().join("data");
    let u = serve_into(root.path(), &out, "60s", &[]);
    std::thread::sleep(Duration::from_millis(1500));
    // 20 s at 2 x 5 MB/s is 200 MB: about a third fits.
    let o = snbuf(&[
        "trigger",
        "--socket",
        u.socket.to_str().unwrap(),
        "--post",
        "20s",
        "--burst-id",
        "cut",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("not all of the window fits"), "{said}");
    assert!(said.contains("s are not"), "{said}");
    let deadline = Instant::now() + Duration::from_secs(90);
    let m = loop {
        let m: Option<Value> = std::fs::read_to_string(out.join("cut/manifest.json"))
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
        if let Some(m) = m.filter(|m| m.get("verified").is_some()) {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "the cut burst was not sealed in 90 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // What was recorded is a whole, valid burst of the window's start, nothing reserved
    // beyond the output; the trigger's answer keeps the end it asked for.
    assert_eq!(m["state"], "sealed", "{m}");
    assert_eq!(m["verified"]["valid"], true, "{m}");
    for l in m["links"].as_array().unwrap() {
        assert!(l["frames"].as_u64().unwrap() > 0, "{m}");
        assert_eq!(l["lost_frames"], 0, "{m}");
    }
    let t = &m["triggers"][0];
    let (covered, asked) = (
        t["covered_end_timestamp"].as_u64().unwrap(),
        t["window_end_timestamp"].as_u64().unwrap(),
    );
    assert!(covered < asked, "{t}");
    assert_eq!(
        covered,
        m["trigger"]["window_end_timestamp"].as_u64().unwrap()
    );
    // 20.3 s asked at 50 MHz; what 96 MB holds is well short of it, and not nothing.
    let recorded_s = (covered - t["window_start_timestamp"].as_u64().unwrap()) as f64 / 50e6;
    assert!((1.0..15.0).contains(&recorded_s), "{recorded_s} s recorded");
    // The unit takes the next trigger.
    let o = snbuf(&["trigger", "--socket", u.socket.to_str().unwrap(), "--wait"]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// A nats-server with JetStream on a free port of 127.0.0.1, storing in `dir`; None (the test
/// skips, or fails where SNBUF_REQUIRE_NATS is set) without one.
fn nats_server(dir: &Path) -> Option<(KillOnDrop, String)> {
    let port = free_port();
    let server = common::nats_server_on(&common::nats_server_bin()?, port, dir);
    Some((server, format!("nats://127.0.0.1:{port}")))
}

/// The fleet's events for trigger `id`, once one is there (at most 20 s).
fn events_for(url: &str, id: &str) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = snbuf(&["fleet", "events", "--nats", url, "--json"]);
        assert!(o.status.success(), "{}", stderr(&o));
        let all: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        let mine: Vec<Value> = all.into_iter().filter(|e| e["trigger_id"] == id).collect();
        if !mine.is_empty() {
            return mine;
        }
        assert!(
            Instant::now() < deadline,
            "no event for trigger {id} in 20 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn hostile_triggers_over_nats_are_missed_with_the_reason_and_the_unit_goes_on() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_server(&root.path().join("js")) else {
        return;
    };
    let u = serve(root.path(), &["--nats", &url, "--unit", "h"]);
    // Heard by the fleet: its trigger consumer is in place.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let o = snbuf(&["fleet", "status", "--nats", &url, "--json"]);
        if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("\"h\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unit never reported to the fleet"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(1000));

    let send = |extra: &[&str]| {
        let mut args = vec!["trigger", "--nats", &url];
        args.extend_from_slice(extra);
        let o = snbuf(&args);
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    };
    for (id, extra, needle) in [
        ("day-long", &["--post", "86400s"][..], "--max-window"),
        (
            "too-long",
            &["--pre", "1s", "--post", "4500ms"][..],
            "--max-window",
        ),
        ("tick-one", &["--at", "1"][..], "window ends"),
        ("far-ahead", &["--at", "18000000000000000000"][..], "ahead"),
    ] {
        let mut args = vec!["--burst-id", id];
        args.extend_from_slice(extra);
        send(&args);
        let events = events_for(&url, id);
        assert!(
            events.iter().all(|e| e["event"] == "missed"),
            "{id}: {events:?}"
        );
        let detail = events[0]["detail"].to_string();
        assert!(detail.contains(needle), "{id}: '{needle}' not in {detail}");
    }
    // Ids that are no plain name, sent by a client that skips the command's own check: missed
    // (never "duplicate" because a file of that name exists), and a newline in one breaks
    // neither the event stream nor the log.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ids = [
        "../escape",
        "..",
        "",
        "/etc/hostname",
        "nl\n2026-01-01T00:00:00Z INFO forged",
    ];
    rt.block_on(async {
        let c = async_nats::connect(&url).await.unwrap();
        let js = async_nats::jetstream::new(c);
        for id in ids {
            let body = json!({"schema": 1, "trigger_id": id, "at_unix_ns": null, "at_ticks": null,
                "pre_s": null, "post_s": null, "issued_unix_ns": 1});
            js.publish("snbuf.trigger", body.to_string().into_bytes().into())
                .await
                .unwrap()
                .await
                .unwrap();
        }
    });
    for id in ids {
        let events = events_for(&url, id);
        assert_eq!(events[0]["event"], "missed", "{id:?}: {events:?}");
        assert!(
            events[0]["detail"].to_string().contains("not a plain name"),
            "{id:?}: {events:?}"
        );
    }
    assert!(!root.path().join("escape").exists());
    let log = std::fs::read_to_string(u.log.as_ref().unwrap()).unwrap();
    assert!(
        !log.contains("\n2026-01-01T00:00:00Z INFO forged"),
        "a forged log line"
    );
    assert_eq!(
        bursts(&u.out),
        Vec::<String>::new(),
        "nothing recorded for them"
    );

    // A trigger whose window begins after the end of the burst in progress joins it (the
    // burst's end moves out to hold it, the gap recorded too): recorded whole, never missed for
    // being early, and never refused.
    send(&["--burst-id", "wait-a", "--post", "1500ms"]);
    let b_at = format!(
        "unix:{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            + 1_800_000_000
    );
    send(&["--burst-id", "wait-b", "--at", &b_at]);
    let deadline = Instant::now() + Duration::from_secs(40);
    let manifest = loop {
        let events = events_for(&url, "wait-b");
        assert!(
            !events.iter().any(|e| e["event"] == "missed"),
            "a trigger after the burst in progress was missed: {events:?}"
        );
        let m: Option<serde_json::Value> = std::fs::read(u.out.join("wait-a/manifest.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(m) = m.filter(|m| m["state"] == "sealed") {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "wait-a not sealed in 40 s: {events:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    let b = manifest["triggers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["trigger_id"] == "wait-b")
        .unwrap_or_else(|| panic!("wait-b not answered by wait-a: {manifest}"))
        .clone();
    assert_eq!(b["covered_end_timestamp"], b["window_end_timestamp"], "{b}");
    for l in manifest["links"].as_array().unwrap() {
        assert_eq!(l["lost_frames"], 0, "{l}");
    }

    // The unit goes on: a real trigger is recorded whole.
    send(&["--burst-id", "real"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(u.out.join("real/manifest.json"))
        .is_ok_and(|m| m.contains("\"verified\""))
    {
        assert!(
            Instant::now() < deadline,
            "the real trigger was not recorded in 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(u.out.join("real/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(m["state"], "sealed", "{m}");
    assert!(m["links"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["lost_frames"] == 0));
}

#[test]
fn an_operator_cancels_a_burst_in_progress_and_it_is_sealed_with_what_was_written() {
    let root = tempfile::tempdir().unwrap();
    let u = serve_into(root.path(), &root.path().join("data"), "60s", &[]);
    let s = u.socket.to_str().unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let o = snbuf(&["trigger", "--socket", s, "--cancel", "nothing"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no burst is being recorded"),
        "{}",
        stderr(&o)
    );
    // A 40 s window, cancelled after about a second.
    let o = snbuf(&[
        "trigger",
        "--socket",
        s,
        "--post",
        "40s",
        "--burst-id",
        "long",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::thread::sleep(Duration::from_millis(1500));
    let o = snbuf(&["trigger", "--socket", s, "--cancel", "other"]);
    assert!(
        stderr(&o).contains("not the one being recorded"),
        "{}",
        stderr(&o)
    );
    let o = snbuf(&["trigger", "--socket", s, "--cancel", "long"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A cancel is final: a trigger whose window begins inside does not move the end out again.
    let o = snbuf(&["trigger", "--socket", s, "--post", "30s"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(stderr(&o).contains("cancelled"), "{}", stderr(&o));
    let o = snbuf(&["trigger", "--socket", s, "--cancel", "long", "--wait"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("cancelled: burst long"), "{said}");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(u.out.join("long/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(m["state"], "sealed", "{m}");
    assert_eq!(m["verified"]["valid"], true, "{m}");
    let (start, end) = (
        m["trigger"]["window_start_timestamp"].as_u64().unwrap(),
        m["trigger"]["window_end_timestamp"].as_u64().unwrap(),
    );
    // 50 MHz: the window as sealed is seconds long, not the 40 s asked for.
    let recorded_s = (end - start) as f64 / 50e6;
    assert!((0.5..15.0).contains(&recorded_s), "{recorded_s} s: {m}");
    let t = &m["triggers"][0];
    assert_eq!(t["covered_end_timestamp"].as_u64(), Some(end), "{t}");
    assert!(t["window_end_timestamp"].as_u64().unwrap() > end, "{t}");
    for l in m["links"].as_array().unwrap() {
        assert_eq!(l["lost_frames"], 0, "{m}");
        assert!(l["frames"].as_u64().unwrap() > 0, "{m}");
    }
    // The unit takes the next trigger.
    let o = snbuf(&["trigger", "--socket", s, "--wait"]);
    assert!(o.status.success(), "{}", stderr(&o));
}
