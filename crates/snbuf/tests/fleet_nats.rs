//! A fleet of `snbuf serve` units over a real `nats-server` (Debian's, with JetStream) on
//! 127.0.0.1: one trigger reaches every unit and they all record the same timestamp window; a
//! duplicate delivery records nothing more; a killed unit shows as missing and, when it returns,
//! reports the trigger it missed; a malformed trigger is logged and ignored; with NATS
//! unreachable a unit still records locally, and it rejoins when NATS comes back.
//!
//! Without nats-server these tests skip and say so, unless SNBUF_REQUIRE_NATS is set (CI
//! installs nats-server and sets it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, snbuf, stderr, wait_for_socket, KillOnDrop};
use serde_json::Value;

/// A nats-server with JetStream on 127.0.0.1:`port`, storing in `dir`; None (test skips) when
/// nats-server is not installed.
fn nats_server(port: u16, dir: &Path) -> Option<KillOnDrop> {
    nats_server_from(&common::nats_server_bin()?, port, dir)
}

/// A NATS server of a test's own, its JetStream under `root`: the process and its URL (None:
/// no nats-server on this machine).
fn nats_in(root: &Path) -> Option<(KillOnDrop, String)> {
    let port = free_port();
    let nats = nats_server(port, &root.join("js"))?;
    Some((nats, format!("nats://127.0.0.1:{port}")))
}

fn nats_server_from(bin: &Path, port: u16, dir: &Path) -> Option<KillOnDrop> {
    Some(common::nats_server_on(bin, port, dir))
}

struct Unit {
    _proc: KillOnDrop,
    out: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

fn start_unit(root: &Path, id: &str, url: &str) -> Unit {
    start_unit_with(root, id, url, &[])
}

fn start_unit_with(root: &Path, id: &str, url: &str, extra: &[&str]) -> Unit {
    let out = root.join(id);
    let socket = root.join(format!("{id}.sock"));
    let log = root.join(format!("{id}.log"));
    let child = common::serve_command_into(&out, &socket, common::SMALL_UNIT)
        .args(["--pre", "300ms", "--post", "300ms"])
        .args(["--nats", url, "--unit", id])
        .args(extra)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    wait_for_socket(&socket);
    Unit {
        _proc: KillOnDrop(child),
        out,
        socket,
        log,
    }
}

/// `fleet status --json` once every unit in `ids` satisfies `ok`, or panics after 15 s.
fn wait_fleet(url: &str, ids: &[&str], ok: impl Fn(&Value) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let o = snbuf(&["fleet", "status", "--nats", url, "--json"]);
        if o.status.success() {
            let v: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
            let all = ids.iter().all(|id| {
                v.iter()
                    .find(|u| u["status"]["unit"] == *id)
                    .is_some_and(&ok)
            });
            if all {
                return v;
            }
            assert!(
                Instant::now() < deadline,
                "fleet never reached the state: {v:?}"
            );
        } else {
            assert!(Instant::now() < deadline, "{}", stderr(&o));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

/// Waits until `dir` holds a sealed burst (at most 15 s).
fn wait_sealed(dir: &Path) -> Value {
    wait_sealed_within(dir, Duration::from_secs(15))
}

/// A runtime for the test's own NATS client.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// JetStream on the server at `url`, as any NATS client reaches it.
async fn jetstream(url: &str) -> async_nats::jetstream::Context {
    async_nats::jetstream::new(async_nats::connect(url).await.expect("NATS is up"))
}

/// Publishes raw bytes on a subject, as any NATS client could.
fn publish_raw(url: &str, subject: &str, body: &[u8]) {
    let rt = runtime();
    rt.block_on(async {
        let js = jetstream(url).await;
        js.publish(subject.to_string(), body.to_vec().into())
            .await
            .unwrap()
            .await
            .unwrap();
    });
}

fn events(url: &str) -> Vec<Value> {
    let o = snbuf(&["fleet", "events", "--nats", url, "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

#[test]
fn one_trigger_reaches_three_units_which_record_the_same_window() {
    if let Some(bin) = common::nats_server_bin() {
        three_units_record_one_trigger_once(&bin);
    }
}

/// The same on Debian's nats-server 2.9.10, which snbuf still supports.
#[test]
fn the_fleet_works_on_debians_nats_server_too() {
    if let Some(bin) = common::debian_nats_server_bin() {
        let version = common::version_of(&bin);
        assert!(version.contains("v2."), "{version}");
        three_units_record_one_trigger_once(&bin);
    }
}

fn three_units_record_one_trigger_once(bin: &Path) {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let Some(_nats) = nats_server_from(bin, port, &root.path().join("js")) else {
        return;
    };
    let url = format!("nats://127.0.0.1:{port}");
    let units: Vec<Unit> = ["u1", "u2", "u3"]
        .iter()
        .map(|id| start_unit(root.path(), id, &url))
        .collect();
    wait_fleet(&url, &["u1", "u2", "u3"], |u| u["missing"] == false);
    std::thread::sleep(Duration::from_millis(800)); // the buffers hold the pre-trigger data

    let o = snbuf(&["trigger", "--nats", &url, "--burst-id", "sn-1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let windows: Vec<Value> = units
        .iter()
        .map(|u| wait_sealed(&u.out.join("sn-1"))["trigger"].clone())
        .collect();
    assert!(windows.iter().all(|w| *w == windows[0]), "{windows:?}");
    for u in &units {
        assert_eq!(
            snbuf(&["verify", u.out.join("sn-1").to_str().unwrap()])
                .status
                .code(),
            Some(0)
        );
    }

    // The same trigger delivered again (a retry, a second sender): nothing more is recorded.
    let again = serde_json::json!({"schema": 1, "trigger_id": "sn-1", "at_unix_ns": null, "at_ticks": null,
        "pre_s": null, "post_s": null, "issued_unix_ns": 1});
    publish_raw(&url, "snbuf.trigger", again.to_string().as_bytes());
    let fleet = wait_fleet(&url, &["u1", "u2", "u3"], |u| {
        u["status"]["bursts_total"] == 1 && u["status"]["last_burst"]["state"] == "sealed"
    });
    assert_eq!(fleet.len(), 3);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ev = events(&url);
        let dups = ev.iter().filter(|e| e["event"] == "duplicate").count();
        let sealed = ev.iter().filter(|e| e["event"] == "sealed").count();
        if dups == 3 {
            assert_eq!(sealed, 3, "{ev:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{ev:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    for u in &units {
        let bursts = std::fs::read_dir(&u.out)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().path().join("manifest.json").exists())
            .count();
        assert_eq!(bursts, 1, "{}", u.out.display());
        let _ = manifest(&u.out.join("sn-1"));
    }
}

#[test]
fn a_killed_unit_shows_as_missing_and_says_what_it_missed_when_it_returns() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let _a = start_unit(root.path(), "a", &url);
    let b = start_unit(root.path(), "b", &url);
    wait_fleet(&url, &["a", "b"], |u| u["missing"] == false);
    drop(b);
    wait_fleet(&url, &["b"], |u| u["missing"] == true);
    let o = snbuf(&["fleet", "status", "--nats", &url]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("MISSING"));

    // A trigger while b is down, then b comes back.
    std::thread::sleep(Duration::from_millis(500));
    let b = returns_having_missed(root.path(), &url, "b", "while-down");
    wait_fleet(&url, &["a", "b"], |u| u["missing"] == false);
    assert!(std::fs::read_to_string(&b.log).unwrap().contains("missed"));

    // Killed again, and the same trigger delivered again (a second sender, a redelivery): the
    // unit's journal, not its memory, says it was handled, so it is not reported a second time.
    drop(b);
    let again = serde_json::json!({"schema": 1, "trigger_id": "while-down", "at_unix_ns": null,
        "at_ticks": 1, "pre_s": null, "post_s": null, "issued_unix_ns": 1});
    publish_raw(&url, "snbuf.trigger", again.to_string().as_bytes());
    let b = start_unit(root.path(), "b", &url);
    let deadline = Instant::now() + Duration::from_secs(15);
    let log = loop {
        let log = std::fs::read_to_string(&b.log).unwrap();
        if log.contains("while-down: already handled") {
            break log;
        }
        assert!(Instant::now() < deadline, "never redelivered: {log}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(log.matches("while-down: missed").count(), 0, "{log}");
    wait_fleet(&url, &["b"], |u| u["status"]["missed_triggers"] == 1);
}

/// A unit JetStream never delivered to, killed, whose durable consumer is gone when it returns
/// (it was killed before the consumer was made, or the cluster lost it): the trigger sent while
/// it was down still reaches it from the stream, and it reports it missed. Made anew from the
/// next trigger on, the consumer would skip it, and the unit would neither record it nor say so.
#[test]
fn a_unit_whose_consumer_is_gone_still_hears_of_the_trigger_sent_while_it_was_down() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let b = start_unit(root.path(), "b", &url);
    wait_fleet(&url, &["b"], |u| u["missing"] == false);
    drop(b);
    runtime().block_on(async {
        let js = jetstream(&url).await;
        let stream = js.get_stream("SNBUF_TRIGGERS").await.unwrap();
        // Not there yet (killed before it made it) is the same case.
        let _ = stream.delete_consumer("unit-b").await;
    });
    let b = returns_having_missed(root.path(), &url, "b", "while-gone");
    let log = std::fs::read_to_string(&b.log).unwrap();
    assert!(log.contains("while-gone"), "{log}");
}

/// Sends trigger `id` while unit `unit` is down, starts the unit again once the trigger's whole
/// window has passed (nothing of it can be recorded), and returns it once it has reported the
/// trigger missed, as the fleet's `missed` event says (its first miss).
fn returns_having_missed(root: &Path, url: &str, unit: &str, id: &str) -> Unit {
    let o = snbuf(&["trigger", "--nats", url, "--burst-id", id]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::thread::sleep(Duration::from_millis(2500));
    let u = start_unit(root, unit, url);
    wait_fleet(url, &[unit], |u| u["status"]["missed_triggers"] == 1);
    let ev = events(url);
    let missed = ev
        .iter()
        .find(|e| e["unit"] == unit && e["event"] == "missed")
        .unwrap_or_else(|| panic!("{ev:?}"));
    assert_eq!(missed["trigger_id"], id);
    u
}

/// `fleet status --watch` as the shift crew sees it, in a real terminal (tmux): every unit
/// shows, a unit that dies is shown missing within seconds, `q` quits.
#[test]
fn the_fleet_view_shows_every_unit_and_one_that_dies() {
    let Some(tmux) = common::tmux::installed() else {
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let _a = start_unit(root.path(), "watched-a", &url);
    let b = start_unit(root.path(), "watched-b", &url);
    wait_fleet(&url, &["watched-a", "watched-b"], |u| u["missing"] == false);
    let t = common::Tmux::start(
        tmux,
        "fleet",
        &format!(
            "{} fleet status --watch --nats {url}",
            env!("CARGO_BIN_EXE_snbuf")
        ),
    );
    t.wait_for(Duration::from_secs(20), "both units", |s| {
        s.contains("watched-a") && s.contains("watched-b") && s.contains("2 units, 0 MISSING")
    });
    drop(b);
    let s = t.wait_for(Duration::from_secs(20), "the dead unit missing", |s| {
        s.contains("2 units, 1 MISSING")
    });
    assert!(s.contains("watched-b"), "{s}");
    t.quit_with_q();
}

#[test]
fn a_malformed_trigger_is_logged_and_ignored() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let u = start_unit(root.path(), "m", &url);
    wait_fleet(&url, &["m"], |u| u["missing"] == false);
    for garbage in [
        &b"{not json"[..],
        b"[]",
        b"{\"trigger_id\": 5}",
        b"",
        &[0xff; 300],
    ] {
        publish_raw(&url, "snbuf.trigger", garbage);
    }
    // And one with an id that would escape the output directory.
    publish_raw(
        &url,
        "snbuf.trigger",
        br#"{"schema":1,"trigger_id":"../escape","at_unix_ns":null,"at_ticks":null,"pre_s":null,"post_s":null,"issued_unix_ns":1}"#,
    );
    std::thread::sleep(Duration::from_millis(1500));
    let log = std::fs::read_to_string(&u.log).unwrap();
    assert!(
        log.matches("malformed trigger ignored").count() >= 5,
        "{log}"
    );
    assert!(!root.path().join("escape").exists());
    // Still a working unit.
    std::thread::sleep(Duration::from_millis(500));
    let o = snbuf(&["trigger", "--nats", &url, "--burst-id", "after"]);
    assert!(o.status.success());
    wait_sealed(&u.out.join("after"));
}

#[test]
fn without_nats_a_unit_records_locally_and_rejoins_when_nats_returns() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    // Nothing listens on the port yet.
    let u = start_unit(root.path(), "solo", &url);
    std::thread::sleep(Duration::from_millis(800));
    let log = std::fs::read_to_string(&u.log).unwrap();
    assert!(
        log.contains("unreachable") && log.contains("recording locally"),
        "{log}"
    );
    let o = common::trigger_and_wait(&u.socket, "local");
    assert!(o.status.success(), "{}", stderr(&o));

    // NATS arrives: the unit connects and reports.
    let Some(nats) = nats_server(port, &root.path().join("js")) else {
        return;
    };
    wait_fleet(&url, &["solo"], |u| u["missing"] == false);
    // NATS goes away mid-run: recording goes on; NATS returns: the unit reports again.
    drop(nats);
    let o = common::trigger_and_wait(&u.socket, "during-outage");
    assert!(o.status.success(), "{}", stderr(&o));
    let _nats = nats_server(port, &root.path().join("js")).unwrap();
    wait_fleet(&url, &["solo"], |u| {
        u["missing"] == false && u["status"]["bursts_total"] == 2
    });
}

/// The operator's bound, and how long a command took: run to its end (killed at 30 s, to say
/// how long it would have taken).
const OPERATOR_ANSWER_WITHIN: Duration = snbuf_fleet::client::OPERATOR_ANSWER_WITHIN;

fn timed(args: &[&str]) -> (std::process::Output, Duration) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snbuf"));
    c.args(args);
    let start = Instant::now();
    let o = common::output_within(c, Duration::from_secs(30));
    (o, start.elapsed())
}

/// The worst a cluster can do to an operator: every server stopped (SIGSTOP: connections open,
/// nothing answers) and one URL whose handshake never comes. Each command tries for as long as
/// its deadline allows (more than 5 s) and still fails with one line within the 8 s promised.
#[test]
fn fleet_commands_answer_within_8_s_when_no_server_answers() {
    let root = tempfile::tempdir().unwrap();
    let Some((nats, url)) = nats_in(root.path()) else {
        return;
    };
    // A listener never accepted: TCP connects, the NATS handshake never comes.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let urls = format!("{url},nats://{}", silent.local_addr().unwrap());
    let o = snbuf(&["fleet", "setup", "--nats", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let stopped = Command::new("kill")
        .args(["-STOP", &nats.0.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    for args in [
        vec!["trigger", "--nats", &urls, "--burst-id", "sn-stopped"],
        vec!["fleet", "status", "--nats", &urls],
        vec!["fleet", "events", "--nats", &urls],
    ] {
        let (o, took) = timed(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
        assert!(
            took > Duration::from_secs(5) && took <= OPERATOR_ANSWER_WITHIN,
            "{args:?} took {took:?}: {}",
            stderr(&o)
        );
    }
    let _ = Command::new("kill")
        .args(["-CONT", &nats.0.id().to_string()])
        .status();
}

#[test]
fn fleet_commands_fail_with_one_line_when_nats_is_not_there() {
    let (_refusing, port) = common::refusing_port();
    let url = format!("nats://127.0.0.1:{port}");
    for args in [
        vec!["fleet", "status", "--nats", &url],
        vec!["fleet", "events", "--nats", &url],
        vec!["trigger", "--nats", &url],
    ] {
        let o = snbuf(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("cannot connect"), "{err}");
    }
    let o = snbuf(&["fleet", "status", "--nats", "http://x"]);
    assert_eq!(o.status.code(), Some(2));
    let o = snbuf(&["trigger", "--nats", &url, "--wait"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_delivery_bench_reaches_every_unit() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let json = root.path().join("bench.json");
    let o = snbuf(&[
        "fleet",
        "bench",
        "--nats",
        &url,
        "--units",
        "5",
        "--triggers",
        "4",
        "--interval",
        "10ms",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["delivered"], 20);
    assert!(r["p50_ms"].as_f64().unwrap() > 0.0);
    assert!(r["max_ms"].as_f64().unwrap() >= r["p99_ms"].as_f64().unwrap());
}

#[test]
fn a_unit_that_exports_reports_its_progress_and_an_exported_event() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let store = root.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let to = format!("file://{}", store.display());
    let u = start_unit_with(root.path(), "x", &url, &["--export-to", &to]);
    wait_fleet(&url, &["x"], |u| {
        u["missing"] == false && u["status"]["export"].is_object()
    });
    std::thread::sleep(Duration::from_millis(600));
    let o = snbuf(&["trigger", "--nats", &url, "--burst-id", "e1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_sealed(&u.out.join("e1"));
    // Idle again, the unit still says how far each link was made durable over its run.
    wait_fleet(&url, &["x"], |u| {
        u["status"]["export"]["exported_total"] == 1
            && u["status"]["state"] == "idle"
            && u["status"]["durable_watermark"]
                .as_array()
                .is_some_and(|w| !w.is_empty() && w.iter().all(|t| t.is_u64()))
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !events(&url)
        .iter()
        .any(|e| e["event"] == "exported" && e["burst_id"] == "e1")
    {
        assert!(Instant::now() < deadline, "no exported event");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(store.join("e1/manifest.json").is_file());
    let o = snbuf(&["fleet", "status", "--nats", &url]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("1 exported"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Regression: `fleet status` read the status stream until the consumer reported nothing
/// pending, which never happens while units heartbeat faster than it waited: a test run hung
/// for 15 minutes on one unit's 900 heartbeats. Now every fleet command reads the stream as it
/// stood when the call began, and returns within a bounded time whatever the fleet publishes,
/// with each unit once.
#[test]
fn fleet_commands_return_in_bounded_time_with_150_units_heartbeating() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const UNITS: usize = 150;
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    // The fleet's streams, as any command makes them.
    assert!(snbuf(&["fleet", "status", "--nats", &url]).status.success());
    // 150 units heartbeating 20 times a second each, 3000 statuses a second, and an event
    // every round: faster than any reader could catch up by waiting for quiet.
    let stop = Arc::new(AtomicBool::new(false));
    let (stop2, url2) = (stop.clone(), url.clone());
    let publisher = std::thread::spawn(move || {
        let rt = runtime();
        rt.block_on(async {
            let c = async_nats::connect(&url2).await.unwrap();
            let mut round = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                for i in 0..UNITS {
                    let unit = format!("u{i:03}");
                    let status = serde_json::json!({
                        "schema": 1, "unit": unit, "sent_unix_ns": snbuf_quantity::now_unix_ns(),
                        "state": "idle", "uptime_s": round as f64 / 20.0, "links": 10,
                        "buffer_fill": 1.0, "durable_watermark": [], "bursts_total": round,
                        "last_burst": null, "missed_triggers": 0,
                    });
                    c.publish(
                        format!("snbuf.unit.{unit}.status"),
                        status.to_string().into(),
                    )
                    .await
                    .unwrap();
                }
                let event = serde_json::json!({
                    "schema": 1, "unit": "u000", "sent_unix_ns": snbuf_quantity::now_unix_ns(),
                    "event": "sealed", "burst_id": format!("b{round}"), "trigger_id": null,
                    "detail": {},
                });
                c.publish("snbuf.unit.u000.event", event.to_string().into())
                    .await
                    .unwrap();
                c.flush().await.unwrap();
                round += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    });
    // Every unit has reported once.
    wait_fleet(&url, &["u000", "u149"], |u| u["missing"] == false);
    // The target: every fleet command answers within the operator's 8 s (killed at 30, to say
    // how long).
    let within_bound = |args: &[&str]| {
        let (o, took) = timed(args);
        assert!(took <= OPERATOR_ANSWER_WITHIN, "{args:?} took {took:?}");
        assert!(o.status.success(), "{}", stderr(&o));
        o
    };
    for _ in 0..3 {
        let o = within_bound(&["fleet", "status", "--nats", &url, "--json"]);
        let v: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
        let mut ids: Vec<&str> = v
            .iter()
            .map(|u| u["status"]["unit"].as_str().unwrap())
            .collect();
        ids.sort();
        let n = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), n, "each unit once");
        assert_eq!(n, UNITS, "every unit");
        within_bound(&["fleet", "events", "--nats", &url, "--json"]);
    }
    stop.store(true, Ordering::Relaxed);
    publisher.join().unwrap();
}

/// A stream an operator made with other settings is used as it is, and said so; `fleet setup`
/// changes it to the fleet's, and asks for no more replicas than the servers can hold.
#[test]
fn a_stream_with_other_settings_is_used_said_and_changed_by_setup() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let js = jetstream(&url).await;
        js.create_stream(async_nats::jetstream::stream::Config {
            name: "SNBUF_TRIGGERS".into(),
            subjects: vec!["snbuf.trigger".into()],
            max_age: Duration::from_secs(3600),
            ..Default::default()
        })
        .await
        .unwrap();
    });
    let u = start_unit(root.path(), "odd", &url);
    wait_fleet(&url, &["odd"], |u| u["missing"] == false);
    let log = std::fs::read_to_string(&u.log).unwrap();
    assert!(
        log.contains("stream SNBUF_TRIGGERS has max age 3600 s, not 86400 s")
            && log.contains("used as it is"),
        "{log}"
    );
    std::thread::sleep(Duration::from_millis(800));
    let o = snbuf(&["trigger", "--nats", &url, "--burst-id", "odd-1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_sealed(&u.out.join("odd-1"));

    let o = snbuf(&["fleet", "setup", "--nats", &url]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        said.contains("SNBUF_TRIGGERS: changed (it had max age 3600 s"),
        "{said}"
    );
    assert!(
        said.contains("SNBUF_UNITS: as wanted (1 replica(s))"),
        "{said}"
    );
    let again = snbuf(&["fleet", "setup", "--nats", &url]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("SNBUF_TRIGGERS: as wanted"));
    // One server cannot hold three copies: a clear error within the deadline, nothing changed.
    let three = snbuf(&["fleet", "setup", "--nats", &url, "--nats-replicas", "3"]);
    assert_eq!(
        three.status.code(),
        Some(1),
        "{}{}",
        stderr(&three),
        String::from_utf8_lossy(&three.stdout)
    );
    assert!(
        stderr(&three).contains("SNBUF_TRIGGERS"),
        "{}",
        stderr(&three)
    );
}

/// The fleet's servers from the config file, a dead one among them: the unit joins through the
/// live one, and `trigger --nats` with the same list is stored and names the trigger.
#[test]
fn servers_from_the_config_file_with_one_dead_still_make_a_fleet() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let Some(_nats) = nats_server(port, &root.path().join("js")) else {
        return;
    };
    let (_dead_socket, dead) = common::refusing_port();
    let servers = format!("nats://127.0.0.1:{dead},nats://127.0.0.1:{port}");
    let config = root.path().join("unit.toml");
    std::fs::write(
        &config,
        format!("nats = \"{servers}\"\nnats_replicas = 1\nlinks = 1\n"),
    )
    .unwrap();
    let out = root.path().join("cfg");
    let socket = root.path().join("cfg.sock");
    let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--config"])
        .arg(&config)
        .arg("--output")
        .arg(&out)
        .arg("--socket")
        .arg(&socket)
        .args([
            "--rate-per-link",
            "5MB/s",
            "--buffer",
            "2s",
            "--unit",
            "cfg",
        ])
        .args(["--pre", "300ms", "--post", "300ms", "--method", "direct"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _unit = KillOnDrop(child);
    wait_for_socket(&socket);
    wait_fleet(&servers, &["cfg"], |u| u["missing"] == false);
    std::thread::sleep(Duration::from_millis(800));
    let o = snbuf(&["trigger", "--nats", &servers, "--burst-id", "cfg-1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.starts_with("accepted: trigger cfg-1 stored"), "{said}");
    wait_sealed(&out.join("cfg-1"));
}

/// `trigger --nats` that gets no acknowledgement says whether the stream holds its trigger, and
/// prints the command that sends it again safely; that command, once NATS is back, stores it
/// with the same id and window. The look-up finds a stored trigger and says when one is not.
#[test]
fn a_trigger_without_an_answer_is_looked_up_and_its_retry_is_printed() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("nats://127.0.0.1:{port}");
    // No server yet: unknown, and the exact retry (same id, the same instant, the same window).
    let started = Instant::now();
    let o = snbuf(&[
        "trigger",
        "--nats",
        &url,
        "--burst-id",
        "sn-9",
        "--pre",
        "1.5s",
    ]);
    assert!(
        started.elapsed() <= OPERATOR_ANSWER_WITHIN,
        "within the 8 s promised"
    );
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("UNKNOWN whether it was stored"), "{err}");
    let retry = err
        .split("safely (the same id is recorded once): ")
        .nth(1)
        .unwrap();
    let words: Vec<&str> = retry.split_whitespace().collect();
    assert_eq!(&words[..3], ["snbuf", "trigger", "--nats"], "{retry}");
    assert!(
        retry.contains("--burst-id sn-9") && retry.contains("--at unix:"),
        "{retry}"
    );
    assert!(retry.contains("--pre 1.5s"), "{retry}");

    let Some(_nats) = nats_server(port, &root.path().join("js")) else {
        return;
    };
    let o = snbuf(&words[1..]);
    assert!(o.status.success(), "{}", stderr(&o));
    let at_ns: u64 = retry
        .split("--at unix:")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();

    let opts = snbuf_fleet::NatsOptions::parse(&url).unwrap();
    let rt = runtime();
    let stored = |id: &str| snbuf_fleet::TriggerMessage {
        schema: 1,
        trigger_id: id.into(),
        at_unix_ns: Some(at_ns),
        at_ticks: None,
        pre_s: Some(1.5),
        post_s: None,
        issued_unix_ns: snbuf_quantity::now_unix_ns(),
    };
    match rt.block_on(snbuf_fleet::client::look_up(&opts, &stored("sn-9"))) {
        snbuf_fleet::TriggerLookup::Stored {
            stream_sequence, ..
        } => assert_eq!(stream_sequence, 1),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        rt.block_on(snbuf_fleet::client::look_up(&opts, &stored("sn-10"))),
        snbuf_fleet::TriggerLookup::NotStored
    );
    // The stored copy is the retried trigger: same id, same instant, same window.
    let stream = trigger_stream_message(&url, 1);
    assert_eq!(stream["trigger_id"], "sn-9");
    assert_eq!(stream["at_unix_ns"], at_ns);
    assert_eq!(stream["pre_s"], 1.5);
}

/// Message `seq` of the trigger stream, as JSON.
fn trigger_stream_message(url: &str, seq: u64) -> Value {
    let rt = runtime();
    rt.block_on(async {
        let js = jetstream(url).await;
        let stream = js.get_stream("SNBUF_TRIGGERS").await.unwrap();
        let m = stream.get_raw_message(seq).await.unwrap();
        serde_json::from_slice(&m.payload).unwrap()
    })
}

/// A second alert for the same event, sent over NATS while the first one's burst records: it
/// joins that burst on every unit (its end moved out), each unit's journal notes the burst that
/// records it, the fleet hears a `joined` event, and the sealed burst names both triggers and
/// holds the later one's window to its end, nothing lost.
#[test]
fn an_overlapping_trigger_over_nats_joins_the_burst_on_every_unit() {
    let root = tempfile::tempdir().unwrap();
    let Some((_nats, url)) = nats_in(root.path()) else {
        return;
    };
    let units: Vec<Unit> = ["j1", "j2"]
        .iter()
        .map(|id| start_unit(root.path(), id, &url))
        .collect();
    wait_fleet(&url, &["j1", "j2"], |u| u["missing"] == false);
    std::thread::sleep(Duration::from_millis(800));
    let o = snbuf(&[
        "trigger",
        "--nats",
        &url,
        "--burst-id",
        "sn-a",
        "--post",
        "3s",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::thread::sleep(Duration::from_millis(1000));
    let o = snbuf(&[
        "trigger",
        "--nats",
        &url,
        "--burst-id",
        "snews-a",
        "--post",
        "4s",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for u in &units {
        let m = wait_sealed_within(&u.out.join("sn-a"), Duration::from_secs(30));
        let ids = common::answered_triggers(&m);
        assert_eq!(ids, ["sn-a", "snews-a"], "{}", u.out.display());
        let joined = &m["triggers"][1];
        assert_eq!(
            m["trigger"]["window_end_timestamp"], joined["window_end_timestamp"],
            "the burst's end moved to the joined trigger's"
        );
        for l in m["links"].as_array().unwrap() {
            assert_eq!(l["lost_frames"], 0, "{l}");
        }
        assert!(!u.out.join("snews-a").exists(), "no burst of its own");
        let journal = std::fs::read_to_string(u.out.join("fleet-triggers.jsonl")).unwrap();
        assert!(
            journal
                .lines()
                .any(|l| l.contains("\"snews-a\"") && l.contains("\"burst_id\":\"sn-a\"")),
            "{journal}"
        );
        assert_eq!(
            snbuf(&["verify", u.out.join("sn-a").to_str().unwrap()])
                .status
                .code(),
            Some(0)
        );
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ev = events(&url);
        let joined = ev
            .iter()
            .filter(|e| e["event"] == "joined" && e["trigger_id"] == "snews-a")
            .count();
        let sealed: Vec<&Value> = ev
            .iter()
            .filter(|e| e["event"] == "sealed" && e["burst_id"] == "sn-a")
            .collect();
        if joined == 2 && sealed.len() == 2 {
            assert!(sealed
                .iter()
                .all(|e| e["detail"]["triggers"] == serde_json::json!(["sn-a", "snews-a"])));
            break;
        }
        assert!(Instant::now() < deadline, "{ev:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits until `dir` holds a sealed burst, for at most `limit`.
fn wait_sealed_within(dir: &Path, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(t) = std::fs::read_to_string(dir.join("manifest.json")) {
            let m: Value = serde_json::from_str(&t).unwrap();
            if m["state"] == "sealed" {
                return m;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} was never sealed",
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
