//! `snbuf serve` as a systemd service: sd_notify messages (READY once it can serve a trigger,
//! STATUS lines, WATCHDOG pings, STOPPING), a SIGTERM that drains (the burst in progress sealed,
//! exit 0), a second SIGTERM that stops at once (exit 1, the burst recoverable), and the unit
//! file in deploy/ checked by `systemd-analyze verify`.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{snbuf, wait_for_socket, KillOnDrop};

/// A serve with a fake systemd listening at `notify`.
fn serve(dir: &Path, notify: &Path) -> (KillOnDrop, PathBuf, PathBuf) {
    let (mut cmd, out, socket) = common::serve_command(
        dir,
        &[
            "--links",
            "2",
            "--rate-per-link",
            "4MB/s",
            "--buffer",
            "1s",
            "--pre",
            "500ms",
            "--post",
            "2s",
            "--method",
            "direct",
        ],
    );
    let child = cmd
        .env("NOTIFY_SOCKET", notify)
        .env("WATCHDOG_USEC", "400000")
        .spawn()
        .unwrap();
    let server = KillOnDrop(child);
    wait_for_socket(&socket);
    (server, out, socket)
}

/// Every message systemd would have received, up to `until` or the first containing `want`.
fn messages_until(rx: &UnixDatagram, want: &str, within: Duration) -> Vec<String> {
    let until = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < until {
        rx.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if let Ok(n) = rx.recv(&mut buf) {
            let m = String::from_utf8_lossy(&buf[..n]).into_owned();
            let done = m.contains(want);
            got.push(m);
            if done {
                break;
            }
        }
    }
    got
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling our own child by pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

#[test]
fn systemd_hears_ready_status_and_watchdog_and_sigterm_drains_a_burst() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify.sock");
    let rx = UnixDatagram::bind(&notify).unwrap();
    let (mut server, out, socket) = serve(dir.path(), &notify);
    let got = messages_until(&rx, "READY=1", Duration::from_secs(30));
    assert!(got.iter().any(|m| m == "READY=1"), "{got:?}");
    assert!(
        got.iter().any(|m| m.starts_with("STATUS=filling buffers")),
        "{got:?}"
    );
    let got = messages_until(&rx, "WATCHDOG=1", Duration::from_secs(10));
    assert!(got.iter().any(|m| m == "WATCHDOG=1"), "{got:?}");
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "drained",
    ]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let got = messages_until(
        &rx,
        "STATUS=recording burst drained",
        Duration::from_secs(10),
    );
    assert!(
        got.iter()
            .any(|m| m.starts_with("STATUS=recording burst drained")),
        "{got:?}"
    );
    // SIGTERM mid-burst: the burst is finished and sealed, then the unit exits 0.
    signal(&server.0, libc::SIGTERM);
    let got = messages_until(&rx, "STOPPING=1", Duration::from_secs(10));
    assert!(got.iter().any(|m| m == "STOPPING=1"), "{got:?}");
    let refused = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "late",
    ]);
    assert!(!refused.status.success(), "no trigger while draining");
    let status = wait_exit(&mut server.0, Duration::from_secs(60)).expect("it exits");
    assert_eq!(status.code(), Some(0));
    let m = snbuf_burst::Manifest::read(&out.join("drained")).unwrap();
    assert_eq!(m.state, snbuf_burst::BurstState::Sealed);
    assert_eq!(
        snbuf(&["verify", out.join("drained").to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    assert!(!out.join("late").exists());
}

/// The watchdog says "alive" only while data arrives: a unit whose links went quiet (a sender
/// that stopped, a dead network) stops pinging, so that systemd restarts it, and pings again
/// when the data returns.
#[test]
fn the_watchdog_goes_quiet_when_the_data_stops_and_wakes_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify.sock");
    let rx = UnixDatagram::bind(&notify).unwrap();
    let port = common::free_udp_port();
    let source = format!("udp://127.0.0.1:{port}");
    let (mut cmd, _out, _socket) = common::serve_command(
        dir.path(),
        &[
            "--source",
            &source,
            "--frame",
            "wibeth",
            "--links",
            "1",
            "--rate-per-link",
            "5MB/s",
            "--buffer",
            "1s",
            "--pre",
            "200ms",
            "--method",
            "direct",
        ],
    );
    let child = cmd
        .env("NOTIFY_SOCKET", &notify)
        .env("WATCHDOG_USEC", "400000")
        .spawn()
        .unwrap();
    let _server = KillOnDrop(child);
    let emit = |seconds: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_snbuf"));
        c.args(["emit", "--to", &source, "--frame", "wibeth", "--links", "1"])
            .args(["--rate-per-link", "5MB/s", "--duration", seconds])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        KillOnDrop(c.spawn().unwrap())
    };
    let sender = emit("60s");
    let got = messages_until(&rx, "WATCHDOG=1", Duration::from_secs(30));
    assert!(got.iter().any(|m| m == "WATCHDOG=1"), "alive: {got:?}");
    drop(sender);
    // Pings already on their way may still come; then none for 3 s (15 ping intervals).
    let _ = messages_until(&rx, "never", Duration::from_secs(1));
    let quiet = messages_until(&rx, "WATCHDOG=1", Duration::from_secs(3));
    assert!(
        !quiet.iter().any(|m| m == "WATCHDOG=1"),
        "no ping while no data arrives: {quiet:?}"
    );
    let _sender = emit("60s");
    let got = messages_until(&rx, "WATCHDOG=1", Duration::from_secs(30));
    assert!(
        got.iter().any(|m| m == "WATCHDOG=1"),
        "alive again: {got:?}"
    );
}

#[test]
fn a_second_sigterm_stops_at_once_and_leaves_the_burst_recoverable() {
    let dir = tempfile::tempdir().unwrap();
    let notify = dir.path().join("notify.sock");
    let rx = UnixDatagram::bind(&notify).unwrap();
    let (mut server, out, socket) = serve(dir.path(), &notify);
    messages_until(&rx, "READY=1", Duration::from_secs(30));
    let s = socket.to_str().unwrap();
    let o = snbuf(&[
        "trigger",
        "--socket",
        s,
        "--burst-id",
        "cut",
        "--post",
        "20s",
    ]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    std::thread::sleep(Duration::from_millis(700));
    signal(&server.0, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    signal(&server.0, libc::SIGTERM);
    let status = wait_exit(&mut server.0, Duration::from_secs(10)).expect("it stops at once");
    assert_eq!(status.code(), Some(1));
    let burst = out.join("cut");
    assert_eq!(
        snbuf_burst::Manifest::read(&burst).unwrap().state,
        snbuf_burst::BurstState::Recording
    );
    let o = snbuf(&["recover", burst.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    assert_eq!(
        snbuf(&["verify", burst.to_str().unwrap()]).status.code(),
        Some(0)
    );
}

#[test]
fn the_unit_file_passes_systemd_analyze() {
    let Some(analyze) = common::installed_tool(
        [PathBuf::from("/usr/bin/systemd-analyze")],
        "SNBUF_REQUIRE_SYSTEMD",
        "apt-get install systemd",
    ) else {
        return;
    };
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/snbuf.service");
    let text = std::fs::read_to_string(&unit).unwrap();
    assert!(text.contains("Type=notify") && text.contains("WatchdogSec="));
    // Checked as installed: with this binary where the unit expects snbuf.
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("snbuf.service");
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/snbuf", env!("CARGO_BIN_EXE_snbuf")),
    )
    .unwrap();
    let mut c = Command::new(analyze);
    // The man page the unit names is installed by `snbuf man` (deploy/README.md), not here.
    c.args(["verify", "--man=no"]).arg(&copy);
    let o = common::output_within(c, Duration::from_secs(60));
    assert!(
        o.status.success(),
        "systemd-analyze verify: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        common::stderr(&o)
    );
}

/// `--log-format json`: every line a JSON object; the burst's events carry the unit and the
/// burst as fields. RUST_LOG filters levels.
#[test]
fn json_logs_are_one_object_per_line_with_unit_and_burst() {
    let dir = tempfile::tempdir().unwrap();
    let (mut cmd, _, socket) = common::serve_command(
        dir.path(),
        &[
            "--links",
            "2",
            "--rate-per-link",
            "8MB/s",
            "--buffer",
            "1s",
            "--pre",
            "200ms",
            "--post",
            "300ms",
            "--unit",
            "apa3",
            "--log-format",
            "json",
        ],
    );
    let child = cmd
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut server = KillOnDrop(child);
    let stderr = server.0.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(500));
    let s = socket.to_str().unwrap();
    let o = snbuf(&["trigger", "--socket", s, "--burst-id", "logged", "--wait"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    signal(&server.0, libc::SIGTERM);
    assert_eq!(
        wait_exit(&mut server.0, Duration::from_secs(30))
            .unwrap()
            .code(),
        Some(0)
    );
    let lines = lines.join().unwrap();
    let events: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(events
        .iter()
        .all(|e| e["level"].is_string() && e["timestamp"].is_string()));
    let accepted = events
        .iter()
        .find(|e| e["message"] == "trigger accepted")
        .expect("the trigger is logged");
    assert_eq!(
        (accepted["unit"].as_str(), accepted["burst"].as_str()),
        (Some("apa3"), Some("logged"))
    );
    let sealed = events
        .iter()
        .find(|e| e["message"] == "burst sealed and verified")
        .expect("the burst's end is logged");
    assert_eq!(sealed["span"]["burst"], "logged");
    assert_eq!(sealed["span"]["unit"], "apa3");
    assert!(sealed["frames"].as_u64().unwrap() > 0);
}
