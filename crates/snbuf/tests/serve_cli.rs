//! `snbuf serve` + `snbuf trigger` + `snbuf status`, as processes: several triggers each make
//! their own verified burst, a trigger during a recording is refused, a malformed request gets an
//! error reply and the server lives on, the socket is 0600, and a trigger to no server fails with
//! one line.

mod common;

use common::{snbuf, wait_for_socket, KillOnDrop};

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

fn raw(socket: &Path, line: &str) -> String {
    let mut s = UnixStream::connect(socket).unwrap();
    // The server reads a request for at most 5 s; a reply that never comes fails the test.
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).unwrap();
    reply
}

/// The window "ticks A..B" that `snbuf trigger` printed.
fn ticks_of(said: &str) -> (u64, u64) {
    let after = said
        .split("ticks ")
        .nth(1)
        .unwrap_or_else(|| panic!("{said}"));
    let range = after.split_whitespace().next().unwrap();
    let (a, b) = range.split_once("..").unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn triggers_make_bursts_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let options = [common::SMALL_UNIT, &["--pre", "500ms", "--post", "500ms"]].concat();
    let (mut cmd, out, socket) = common::serve_command(dir.path(), &options);
    let child = cmd.spawn().unwrap();
    let s = socket.to_str().unwrap();
    let _server = KillOnDrop(child);
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(800)); // let the buffers hold the pre-trigger data
    assert_eq!(
        std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777,
        0o600
    );

    for id in ["first", "second"] {
        let o = snbuf(&["trigger", "--socket", s, "--burst-id", id, "--wait"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(String::from_utf8_lossy(&o.stdout).contains("valid"));
        assert_eq!(
            snbuf(&["verify", out.join(id).to_str().unwrap()])
                .status
                .code(),
            Some(0)
        );
    }

    // While a long burst records, a trigger whose window begins inside it joins it (the
    // burst's end moves out to hold it); one whose window begins before it is refused, with the
    // reason.
    let o = snbuf(&[
        "trigger",
        "--socket",
        s,
        "--burst-id",
        "long",
        "--post",
        "2s",
    ]);
    assert!(o.status.success());
    let (long_start, long_end) = ticks_of(&String::from_utf8_lossy(&o.stdout));
    let status: serde_json::Value =
        serde_json::from_slice(&snbuf(&["status", "--socket", s, "--json"]).stdout).unwrap();
    let hz = status["clock_hz"].as_u64().unwrap();
    let earlier = (long_start - hz / 5).to_string();
    let o = snbuf(&["trigger", "--socket", s, "--at", &earlier]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a burst is being recorded") && err.contains("begins before the burst"),
        "{err}"
    );
    std::thread::sleep(Duration::from_millis(300));
    // 6 s after it: more than the slack of the burst's files (24 chunks of 0.68 MiB per link,
    // 3.3 s at 5 MB/s), so they must grow to hold it.
    let joiner = [
        "trigger",
        "--socket",
        s,
        "--burst-id",
        "joiner",
        "--post",
        "6s",
    ];
    let o = snbuf(&joiner);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(said.contains("joined burst long"), "{said}");
    let (join_start, join_end) = ticks_of(&said);
    assert!(join_start >= long_start && join_start < long_end && join_end > long_end);
    // Delivered again (its answer lost): the same answer, nothing recorded twice.
    let o = snbuf(&joiner);
    let again = String::from_utf8_lossy(&o.stdout);
    assert!(again.contains("joined burst long"), "{again}");
    assert_eq!(ticks_of(&again).0, join_start, "{again}");

    // Bad requests get an error reply; the server lives on.
    assert!(raw(&socket, "{not json\n").contains("\"ok\":false"));
    assert!(raw(&socket, "{\"cmd\":\"launch\"}\n").contains("unknown command"));
    assert!(raw(&socket, "{\"cmd\":\"trigger\",\"pre_s\":-1}\n").contains("\"ok\":false"));
    assert!(raw(&socket, "{\"cmd\":\"trigger\",\"burst_id\":\"../x\"}\n").contains("\"ok\":false"));
    let big = format!(
        "{{\"cmd\":\"status\",\"pad\":\"{}\"}}\n",
        "x".repeat(70_000)
    );
    assert!(raw(&socket, &big).contains("larger than"));
    // Numbers that would overflow a window, and a trigger far ahead of the data.
    assert!(raw(&socket, "{\"cmd\":\"trigger\",\"post_s\":1e300}\n").contains("from 0 to"));
    assert!(raw(&socket, "{\"cmd\":\"trigger\",\"pre_s\":\"1\"}\n").contains("\"ok\":false"));
    assert!(raw(
        &socket,
        &format!("{{\"cmd\":\"trigger\",\"at\":{}}}\n", u64::MAX)
    )
    .contains("ahead of the newest frame"));
    assert!(raw(&socket, "[1,2,3]\n").contains("\"ok\":false"));
    assert!(raw(&socket, "\n").contains("\"ok\":false"));
    // Regression: the endpoint served one connection at a time, so a client that connected and
    // said nothing held every other client, a trigger included, until its read timed out (5 s).
    // Now a trigger and a status are answered while the silent client still waits: it has not
    // even been told off yet when they are.
    let silent = UnixStream::connect(&socket).unwrap();
    for request in [
        "{\"cmd\":\"trigger\"}\n".as_bytes(),
        b"{\"cmd\":\"status\"}\n",
    ] {
        let mut next = UnixStream::connect(&socket).unwrap();
        next.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        next.write_all(request).unwrap();
        let mut reply = String::new();
        BufReader::new(&next).read_line(&mut reply).unwrap();
        assert!(
            reply.contains("\"ok\":true") || reply.contains("a burst is being recorded"),
            "{reply}"
        );
        silent.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let early = std::io::Read::read(&mut &silent, &mut byte);
        assert!(
            matches!(&early, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "the silent client was answered before the others: {early:?}"
        );
    }
    drop(silent);

    let o = snbuf(&["status", "--socket", s, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["links"], 2);
    let bursts = v["bursts"].as_array().unwrap();
    assert!(bursts.len() >= 2);
    // The unit prepared each burst of its configured window before the trigger (at start, and
    // again after every burst).
    for b in &bursts[..2] {
        assert_eq!(b["prepared_ahead"], true, "{b}");
    }
    assert!(v["next_burst"].is_string());

    // Shutdown waits for the burst in progress, which is then sealed and valid.
    assert!(raw(&socket, "{\"cmd\":\"shutdown\"}\n").contains("\"ok\":true"));
    let deadline = Instant::now() + Duration::from_secs(15);
    while socket.exists() {
        assert!(Instant::now() < deadline, "the server did not stop");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        snbuf(&["verify", out.join("long").to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    // The burst answers both triggers, and records the joined one's window to its end.
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("long/manifest.json")).unwrap()).unwrap();
    let ids = common::answered_triggers(&m);
    assert_eq!(&ids[..2], ["long", "joiner"], "{}", m["triggers"]);
    assert!(m["trigger"]["window_end_timestamp"].as_u64().unwrap() >= join_end);
    assert_eq!(m["state"], "sealed");
    for l in m["links"].as_array().unwrap() {
        assert_eq!(l["lost_frames"], 0, "{l}");
    }
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["first", "long", "second"], "no preparation is left");
}

#[test]
fn a_trigger_to_no_server_fails_with_one_line() {
    let o = snbuf(&["trigger", "--socket", "/nonexistent/snbuf.sock"]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no snbuf server") && err.contains("snbuf serve"),
        "{err}"
    );
    let o = snbuf(&[
        "trigger",
        "--at",
        "yesterday",
        "--socket",
        "/nonexistent/snbuf.sock",
    ]);
    assert_eq!(o.status.code(), Some(2));
}

/// The unit's status, as JSON.
fn status(socket: &Path) -> serde_json::Value {
    serde_json::from_str(&raw(socket, "{\"cmd\":\"status\"}\n")).unwrap()
}

#[test]
fn a_unit_killed_mid_burst_recovers_it_at_its_next_start_and_exports_it() {
    let dir = tempfile::tempdir().unwrap();
    let export = dir.path().join("export");
    std::fs::create_dir(&export).unwrap();
    let to = format!("file://{}", export.display());
    let options = [
        common::SMALL_UNIT,
        &["--pre", "500ms", "--post", "20s", "--export-to", &to],
    ]
    .concat();
    let (mut cmd, out, socket) = common::serve_command(dir.path(), &options);
    let mut server = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(800));
    let s = socket.to_str().unwrap();
    let o = snbuf(&["trigger", "--socket", s, "--burst-id", "cut"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // What the unit has promised: chunks durable on each link, once some are.
    let until = Instant::now() + Duration::from_secs(20);
    let promised: Vec<u64> = loop {
        let st = status(&socket);
        let durable: Vec<u64> = st["recording"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| l["durable_chunks"].as_u64().unwrap_or(0))
            .collect();
        if durable.len() == 2 && durable.iter().all(|&c| c >= 3) {
            break durable;
        }
        assert!(Instant::now() < until, "no chunks durable in 20 s: {st}");
        std::thread::sleep(Duration::from_millis(100));
    };
    // Killed 2 s into a 20 s window: the burst is left unsealed.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let ls = snbuf(&["ls", out.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&ls.stdout).contains("interrupted"),
        "{}",
        String::from_utf8_lossy(&ls.stdout)
    );

    // Started again on the same output: nobody runs `snbuf recover`.
    let (mut cmd, _, _) = common::serve_command(dir.path(), &options);
    let mut server = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    // Recovered in the background: the unit answers (and takes triggers) meanwhile.
    let until = Instant::now() + Duration::from_secs(30);
    let b = loop {
        let st = status(&socket);
        if let Some(b) = st["bursts"]
            .as_array()
            .and_then(|v| v.iter().find(|b| b["burst_id"] == "cut"))
        {
            break b.clone();
        }
        assert!(
            Instant::now() < until,
            "the recovered burst is not among the unit's bursts in 30 s: {st}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(b["state"], "recovered", "{b}");
    assert_eq!(b["valid"], true, "{b}");
    assert!(
        b["lost_frames"].as_u64().unwrap() > 0,
        "the rest counted lost: {b}"
    );
    let m = snbuf_burst::Manifest::read(&out.join("cut")).unwrap();
    assert_eq!(m.state, snbuf_burst::BurstState::Recovered);
    for (l, promised) in m.links.iter().zip(&promised) {
        assert!(
            l.data.chunks >= *promised,
            "link {}: {} chunks kept, {promised} were acknowledged",
            l.link,
            l.data.chunks
        );
    }
    let v = snbuf(&["verify", out.join("cut").to_str().unwrap()]);
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
    // Handed to the exporter as any sealed burst is.
    let until = Instant::now() + Duration::from_secs(30);
    while !out.join("cut").join(snbuf_export::EXPORTED).exists() {
        assert!(
            Instant::now() < until,
            "the recovered burst was not exported in 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    server.0.kill().unwrap();
    server.0.wait().unwrap();

    // Idempotent: the next start finds nothing to recover.
    let (mut cmd, _, _) = common::serve_command(dir.path(), &options);
    let _server = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    let st = status(&socket);
    assert_eq!(st["bursts"].as_array().map(Vec::len), Some(0), "{st}");
}

/// A trigger whose window is far longer than the files prepared for the unit's own --pre and
/// --post starts on those files at once, and its writers grow them a step at a time ahead of
/// their writes, on memory (tmpfs) too, where growing zeroes pages: no new files are made at
/// the trigger while the window's oldest frames age in the buffer. Whole, 0 frames lost.
#[test]
fn a_window_longer_than_the_prepared_files_starts_on_them_and_grows_them() {
    let on_memory = tempfile::tempdir_in("/dev/shm");
    let dir = match &on_memory {
        Ok(d) => d.path().to_path_buf(),
        Err(_) => {
            eprintln!("no /dev/shm here: the test runs on the temporary directory's disk");
            std::env::temp_dir()
        }
    };
    let scratch = tempfile::tempdir_in(&dir).unwrap();
    let options = [
        "--links",
        "2",
        "--rate-per-link",
        "20MB/s",
        "--buffer",
        "3s",
        "--pre",
        "100ms",
        "--post",
        "100ms",
    ];
    let (mut cmd, out, socket) = common::serve_command(scratch.path(), &options);
    let _served = common::started(&mut cmd, &out, &socket, None);
    let s = socket.to_str().unwrap();
    // The next burst's files are prepared, and the buffers hold the window's start.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while status(&socket)["next_burst"] != "ready" {
        assert!(std::time::Instant::now() < deadline, "files never prepared");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let o = snbuf(&[
        "trigger",
        "--socket",
        s,
        "--burst-id",
        "long",
        "--pre",
        "1s",
        "--post",
        "4s",
        "--wait",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let st = status(&socket);
    let burst = st["bursts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["burst_id"] == "long")
        .expect("the burst's outcome");
    assert_eq!(burst["prepared_ahead"], true, "{burst}");
    assert_eq!(burst["lost_frames"], 0, "{burst}");
    assert_eq!(burst["valid"], true, "{burst}");
    assert!(burst["window_cut_to_bytes_per_link"].is_null(), "{burst}");
    // 5 s of a 20 MB/s link: about 100 MB each, in files prepared for 0.2 s.
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("long/manifest.json")).unwrap()).unwrap();
    for link in manifest["links"].as_array().unwrap() {
        let bytes = link["file_bytes"].as_u64().unwrap();
        assert!(bytes > 90_000_000, "link file holds {bytes} B: {link}");
    }
}

/// A burst grown by joins past --max-burst stops there, and the rest of the windows goes on at
/// once as the next burst: no frame between the two is lost or recorded twice, both manifests
/// say so, and the joining trigger's window is covered whole across them (`trigger --wait`
/// waits for both).
#[test]
fn a_burst_grown_past_max_burst_goes_on_as_the_next_without_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    let options = [common::SMALL_UNIT, common::CHAINING_UNIT].concat();
    let (mut cmd, out, socket) = common::serve_command(dir.path(), &options);
    let _served = common::started(&mut cmd, &out, &socket, None);
    let s = socket.to_str().unwrap();
    let trigger = |id: &str, more: &[&str]| {
        snbuf(&[&["trigger", "--socket", s, "--burst-id", id], more].concat())
    };
    std::thread::sleep(Duration::from_millis(1500));
    let o = trigger("first", &["--pre", "1s", "--post", "2s"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (first_start, _) = ticks_of(&String::from_utf8_lossy(&o.stdout));
    std::thread::sleep(Duration::from_millis(1500));
    // 0.5 s before to 3 s after: past the first burst's 4 s (it began 1 s before its trigger).
    let second = std::thread::spawn({
        let s = s.to_string();
        move || {
            snbuf(&[
                "trigger",
                "--socket",
                &s,
                "--burst-id",
                "second",
                "--pre",
                "500ms",
                "--post",
                "3s",
                "--wait",
            ])
        }
    });
    // A second one across the cap: the next burst carries both over.
    std::thread::sleep(Duration::from_millis(300));
    let o = trigger("second-b", &["--pre", "500ms", "--post", "3s"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("first-2"),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Once the next burst records, a trigger whose window begins before it (in the first)
    // joins it: its part before is in the first burst, which the next one continues.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while status(&socket)["recording_burst"]["burst_id"] != "first-2" {
        assert!(
            std::time::Instant::now() < deadline,
            "the next burst never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = trigger("third", &["--pre", "1s", "--post", "200ms"]);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(said.contains("joined burst first-2"), "{said}");
    assert!(said.contains("is recorded in burst first,"), "{said}");
    // One whose window lies wholly in the first (placed in the past) has no burst to answer it
    // now: refused with the reason, the unit unharmed.
    let hz = status(&socket)["clock_hz"].as_u64().unwrap();
    let at = (first_start + 4 * hz - 3 * hz / 10).to_string();
    let o = trigger(
        "fourth",
        &["--at", &at, "--pre", "100ms", "--post", "100ms"],
    );
    assert!(
        !o.status.success(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("begins before the burst"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = second.join().unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(said.contains("joined burst first"), "{said}");
    assert!(
        said.contains("reached --max-burst") && said.contains("first-2"),
        "{said}"
    );
    assert!(said.contains("burst first-2: sealed"), "{said}");

    let manifest = |b: &str| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(out.join(b).join("manifest.json")).unwrap()).unwrap()
    };
    let (first, next) = (manifest("first"), manifest("first-2"));
    assert_eq!(first["continued_in"], "first-2", "{first}");
    assert_eq!(next["continues"], "first", "{next}");
    let step = first["frame"]["frame_step_ticks"].as_u64().unwrap();
    let cap = first["trigger"]["window_end_timestamp"].as_u64().unwrap();
    let start = first["trigger"]["window_start_timestamp"].as_u64().unwrap();
    let hz = first["trigger"]["clock_hz"].as_u64().unwrap();
    assert!(cap - start <= 4 * hz, "the first burst is capped at 4 s");
    assert_eq!(next["trigger"]["window_start_timestamp"], cap, "{next}");
    for (a, b) in first["links"]
        .as_array()
        .unwrap()
        .iter()
        .zip(next["links"].as_array().unwrap())
    {
        assert_eq!(a["lost_frames"], 0, "{a}");
        assert_eq!(b["lost_frames"], 0, "{b}");
        // The next burst's first frame is the one after the first burst's last.
        let (last, following) = (a["last_timestamp"].as_u64(), b["first_timestamp"].as_u64());
        assert_eq!(following, last.map(|t| t + step), "link {}", a["link"]);
    }
    // The second trigger: covered up to the cap in one, from the cap to its end in the other.
    let answered = |m: &serde_json::Value, id: &str| -> serde_json::Value {
        let triggers = m["triggers"].as_array().unwrap();
        let t = triggers.iter().find(|t| t["trigger_id"] == id);
        t.cloned()
            .unwrap_or_else(|| panic!("{id} is not answered in {m}"))
    };
    let (here, rest) = (answered(&first, "second"), answered(&next, "second"));
    assert_eq!(here["covered_end_timestamp"], cap);
    assert_eq!(rest["covered_start_timestamp"], cap);
    assert_eq!(rest["covered_end_timestamp"], rest["window_end_timestamp"]);
    let third = answered(&next, "third");
    assert!(
        third["window_start_timestamp"].as_u64().unwrap() < cap,
        "{third}"
    );
    assert_eq!(third["covered_start_timestamp"], cap, "{third}");
    let mut ids = common::answered_triggers(&next);
    ids.sort();
    assert_eq!(ids, ["second", "second-b", "third"], "{next}");
    for b in ["first", "first-2"] {
        assert_eq!(
            snbuf(&["verify", out.join(b).to_str().unwrap()])
                .status
                .code(),
            Some(0),
            "{b}"
        );
    }
}
