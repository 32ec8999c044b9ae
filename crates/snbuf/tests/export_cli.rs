//! `snbuf export` against a directory (`file://`, always) and a real S3-compatible object store
//! (Garage, started here when its binary is installed; CI installs it and sets
//! SNBUF_REQUIRE_GARAGE): objects match the burst and are read back before the burst is marked
//! exported; an export killed mid-file resumes without sending completed parts again; an object
//! corrupted after upload is detected; an unverified burst is never deleted.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::garage::garage;
use common::{small_recording, snbuf, snbuf_owned, stderr, wait_for_socket, KillOnDrop};

/// A burst of 2 links x ~12 MiB, recorded by the real binary.
fn burst(root: &Path) -> PathBuf {
    let out = root.join("rec");
    let o = snbuf_owned(&small_recording(&out, "b", &[]));
    assert!(o.status.success(), "{}", stderr(&o));
    out.join("b")
}

fn export_cmd(dir: &Path, to: &str, extra: &[&str], env: &[(String, String)]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_snbuf"));
    c.args([
        "export",
        dir.to_str().unwrap(),
        "--to",
        to,
        "--part-size",
        "5MiB",
    ])
    .args(extra)
    .envs(env.iter().map(|(k, v)| (k, v)))
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

/// Starts an export at a low rate and kills it once its journal holds a part sent (however
/// slowly a loaded machine starts it; within a deadline).
fn interrupted(dir: &Path, to: &str, env: &[(String, String)]) {
    // (Killed however the test ends.)
    let mut child = common::KillOnDrop(
        export_cmd(dir, to, &["--rate", "4MB/s"], env)
            .spawn()
            .unwrap(),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !journal_holds_a_part(dir) {
        if let Some(status) = child.0.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.0.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).unwrap();
            }
            panic!("the slow export ended too soon ({status}): {err}");
        }
        assert!(std::time::Instant::now() < deadline, "no part sent in 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(child);
    assert!(!dir.join("export.json").exists(), "not marked exported");
}

/// Whether the burst's export journal records a part of an object as sent.
fn journal_holds_a_part(dir: &Path) -> bool {
    let Ok(bytes) = std::fs::read(dir.join(".export-journal.json")) else {
        return false;
    };
    let journal: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    journal["objects"].as_object().is_some_and(|objects| {
        objects
            .values()
            .any(|o| o["parts"].as_object().is_some_and(|p| !p.is_empty()))
    })
}

fn run(c: &mut Command) -> std::process::Output {
    common::output_within(c, common::COMMAND_DEADLINE)
}

/// The common scenario on any destination: interrupted, resumed, verified, corrupted, refused.
fn scenario(dir: &Path, to: &str, env: &[(String, String)], corrupt: impl Fn(&str)) {
    interrupted(dir, to, env);
    let o = run(&mut export_cmd(dir, to, &["--json"], env));
    assert!(o.status.success(), "{}", stderr(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(r["parts_resumed"].as_u64().unwrap() >= 1, "{r}");
    let total: u64 = r["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["size_bytes"].as_u64().unwrap())
        .sum();
    assert!(
        r["bytes_sent"].as_u64().unwrap() < total,
        "completed parts were sent again: {r}"
    );
    assert!(dir.join("export.json").exists());

    // An object changed after upload: found, the burst no longer counts as exported, and it is
    // not deleted even when asked.
    corrupt(r["objects"][0]["key"].as_str().unwrap());
    let o = run(&mut export_cmd(dir, to, &["--delete-after-verify"], env));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("CRC-32C") || err.contains("expected"), "{err}");
    assert!(dir.is_dir(), "an unverified burst was deleted");
    assert!(!dir.join("export.json").exists());

    // The next run sends that object again; now it verifies, and the burst may go.
    let o = run(&mut export_cmd(dir, to, &["--delete-after-verify"], env));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        !dir.exists(),
        "verified and asked to: the local copy is removed"
    );
}

#[test]
fn export_to_a_directory_resumes_verifies_and_deletes_only_what_it_verified() {
    let root = tempfile::tempdir().unwrap();
    let dir = burst(root.path());
    let dest = root.path().join("store");
    std::fs::create_dir(&dest).unwrap();
    let to = format!("file://{}", dest.display());
    let local: Vec<(String, Vec<u8>)> = ["link-0000.dat", "link-0001.dat", "manifest.json"]
        .iter()
        .map(|f| (f.to_string(), std::fs::read(dir.join(f)).unwrap()))
        .collect();
    let dest2 = dest.clone();
    scenario(&dir, &to, &[], move |key| {
        let p = dest2.join(key);
        let mut b = std::fs::read(&p).unwrap();
        b[1000] ^= 0xff;
        std::fs::write(&p, b).unwrap();
    });
    for (f, bytes) in local {
        assert_eq!(
            std::fs::read(dest.join("b").join(&f)).unwrap(),
            bytes,
            "{f}"
        );
    }
}

#[test]
fn bad_destinations_are_refused_before_anything_is_sent() {
    let root = tempfile::tempdir().unwrap();
    let dir = burst(root.path());
    for (to, needle) in [
        ("ftp://x", "expected s3://"),
        ("file://relative/dir", "absolute"),
        ("s3://", "no bucket"),
    ] {
        let o = snbuf(&["export", dir.to_str().unwrap(), "--to", to]);
        assert_eq!(o.status.code(), Some(2), "{to}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{to}: {}", stderr(&o));
    }
    let o = run(Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["export", dir.to_str().unwrap(), "--to", "s3://b/p"])
        .env_remove("SNBUF_S3_ENDPOINT")
        .env_remove("AWS_ENDPOINT_URL"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("SNBUF_S3_ENDPOINT"));
    // An object store that is not there: one line, exit 1, nothing marked.
    let o = run(Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["export", dir.to_str().unwrap(), "--to", "s3://b/p"])
        .env("SNBUF_S3_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ACCESS_KEY_ID", "GKnothing")
        .env("AWS_SECRET_ACCESS_KEY", "secret-that-must-not-be-printed"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(!stderr(&o).contains("secret-that-must-not-be-printed"));
    assert!(!dir.join("export.json").exists());
}

/// Puts `body` at `key` of bucket `snbuf`, as any S3 client could (here: a corruption).
fn s3_put(env: &[(String, String)], key: &str, body: &[u8]) {
    common::s3_client::S3Client::of(env).put(key, body).unwrap();
}

#[test]
fn export_to_garage_resumes_verifies_and_deletes_only_what_it_verified() {
    let root = tempfile::tempdir().unwrap();
    let Some((_garage, env)) = garage(&root.path().join("garage")) else {
        return;
    };
    let dir = burst(root.path());
    let env2 = env.clone();
    scenario(&dir, "s3://snbuf/apa-01", &env, move |key| {
        s3_put(&env2, key, b"not what was uploaded");
    });

    // Settings and credentials from a config file's [s3] table instead of the environment;
    // the secret is never printed.
    let get = |k: &str| env.iter().find(|(n, _)| n == k).unwrap().1.clone();
    let cfg = root.path().join("unit.toml");
    std::fs::write(
        &cfg,
        format!(
            "links = 2\n[s3]\nendpoint = \"{}\"\nregion = \"garage\"\naccess_key_id = \"{}\"\nsecret_access_key = \"{}\"\n",
            get("SNBUF_S3_ENDPOINT"),
            get("AWS_ACCESS_KEY_ID"),
            get("AWS_SECRET_ACCESS_KEY")
        ),
    )
    .unwrap();
    let again = burst(&root.path().join("second"));
    let o = run(Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args([
            "export",
            again.to_str().unwrap(),
            "--to",
            "s3://snbuf/from-config",
            "--config",
        ])
        .arg(&cfg)
        .env_remove("SNBUF_S3_ENDPOINT")
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY"));
    assert!(o.status.success(), "{}", stderr(&o));
    let all = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    assert!(!all.contains(&get("AWS_SECRET_ACCESS_KEY")), "{all}");
    assert!(again.join("export.json").exists());
}

/// A store that dropped a multipart upload (Garage did, after an error of its own) answers
/// every part of it with an error: the export starts the object over after three runs in a row
/// fail on it, rather than resume the lost upload for ever, and then verifies.
#[test]
fn an_upload_the_store_dropped_is_started_over() {
    let root = tempfile::tempdir().unwrap();
    let Some((_garage, env)) = garage(&root.path().join("garage")) else {
        return;
    };
    let dir = burst(root.path());
    let to = "s3://snbuf/dropped";
    interrupted(&dir, to, &env);
    // The store forgets the uploads the journal resumes.
    let journal = dir.join(".export-journal.json");
    let mut j: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&journal).unwrap()).unwrap();
    let mut lost = 0;
    for o in j["objects"].as_object_mut().unwrap().values_mut() {
        if o["upload_id"].is_string() {
            o["upload_id"] = serde_json::json!("0".repeat(64));
            lost += 1;
        }
    }
    assert!(
        lost > 0,
        "the interrupted export had an upload to resume: {j}"
    );
    std::fs::write(&journal, serde_json::to_vec(&j).unwrap()).unwrap();
    for run_number in 1..=3 {
        let o = run(&mut export_cmd(&dir, to, &[], &env));
        assert_eq!(o.status.code(), Some(1), "run {run_number}: {}", stderr(&o));
        assert!(!dir.join("export.json").exists());
    }
    let o = run(&mut export_cmd(&dir, to, &[], &env));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(dir.join("export.json").exists());
}

/// A run that adds parts to an upload before it fails (the store went away) was not stuck on it:
/// the count of failed runs starts again, and the upload is kept, however many runs failed
/// before. Counting every failed run started a good upload over (its parts sent again) after
/// any three outages.
#[test]
fn a_run_that_added_parts_keeps_its_upload() {
    let root = tempfile::tempdir().unwrap();
    let Some((garage_server, env)) = garage(&root.path().join("garage")) else {
        return;
    };
    let dir = burst(root.path());
    let to = "s3://snbuf/outage";
    interrupted(&dir, to, &env);
    let journal = dir.join(".export-journal.json");
    let read_journal = || -> Option<serde_json::Value> {
        serde_json::from_slice(&std::fs::read(&journal).ok()?).ok()
    };
    // Two runs failed on each upload before this one, and it has at most its first part (the
    // store may have more: they are sent again), so that this run adds one that is not its last.
    let mut j = read_journal().unwrap();
    let mut before = std::collections::BTreeMap::new();
    for (file, o) in j["objects"].as_object_mut().unwrap() {
        if let Some(id) = o["upload_id"].as_str().map(str::to_string) {
            let of = o["size_bytes"].as_u64().unwrap().div_ceil(5 << 20) as usize;
            let parts = o["parts"].as_object_mut().unwrap();
            parts.retain(|n, _| n == "1");
            before.insert(file.clone(), (id, parts.len(), of));
            o["failed_runs"] = serde_json::json!(2);
        }
    }
    assert!(
        before.values().any(|(_, had, of)| had + 1 < *of),
        "an upload to resume with two parts to go: {j}"
    );
    std::fs::write(&journal, serde_json::to_vec(&j).unwrap()).unwrap();
    // Slow enough (a 5 MiB part every 5 s) that the store is gone long before the next part.
    let mut child = export_cmd(&dir, to, &["--rate", "1MB/s"], &env)
        .spawn()
        .unwrap();
    // Once a part short of the last is added to one of them, the store goes away.
    let deadline = Instant::now() + Duration::from_secs(30);
    let grown = loop {
        assert!(Instant::now() < deadline, "no part was added within 30 s");
        let now = read_journal();
        let grown = now.as_ref().and_then(|j| {
            before.iter().find(|(file, (_, had, of))| {
                j["objects"][file.as_str()]["parts"]
                    .as_object()
                    .is_some_and(|p| p.len() > *had && p.len() < *of)
            })
        });
        if let Some((file, (id, _, _))) = grown {
            break (file.clone(), id.clone());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(garage_server);
    let deadline = Instant::now() + common::COMMAND_DEADLINE;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the export did not end without its store"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(1), "the run failed");
    let j = read_journal().unwrap();
    let o = &j["objects"][grown.0.as_str()];
    assert_eq!(o["upload_id"], grown.1.as_str(), "the upload kept: {o}");
    assert_eq!(o["failed_runs"], 1, "this run's failure counted alone: {o}");
}

/// `serve --export-to`: every sealed burst is exported and verified in the background, a burst
/// an earlier run left unexported is picked up at start, and the exporter shows in the metrics.
#[test]
fn serve_exports_each_sealed_burst() {
    use std::io::{Read, Write};
    let root = tempfile::tempdir().unwrap();
    let earlier = burst(root.path()); // root/rec/b, never exported
    let dest = root.path().join("store");
    std::fs::create_dir(&dest).unwrap();
    let socket = root.path().join("ctl.sock");
    let mut child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--output"])
        .arg(root.path().join("rec"))
        .arg("--socket")
        .arg(&socket)
        .args(["--links", "2", "--rate-per-link", "5MB/s", "--buffer", "2s"])
        .args(["--pre", "300ms", "--post", "300ms", "--method", "direct"])
        .args([
            "--export-to",
            &format!("file://{}", dest.display()),
            "--export-rate",
            "200MB/s",
        ])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr_pipe = child.stderr.take().unwrap();
    let _server = KillOnDrop(child);
    let addr = common::metrics_address(stderr_pipe);
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(600));
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "new",
        "--wait",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let deadline = Instant::now() + Duration::from_secs(20);
    for id in ["b", "new"] {
        while !root
            .path()
            .join("rec")
            .join(id)
            .join("export.json")
            .exists()
        {
            assert!(Instant::now() < deadline, "burst {id} was not exported");
            std::thread::sleep(Duration::from_millis(100));
        }
        for f in ["link-0000.dat", "link-0001.dat", "manifest.json"] {
            assert_eq!(
                std::fs::read(dest.join(id).join(f)).unwrap(),
                std::fs::read(root.path().join("rec").join(id).join(f)).unwrap(),
                "{id}/{f}"
            );
        }
    }
    let _ = earlier;
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    let mut m = String::new();
    s.read_to_string(&mut m).unwrap();
    assert!(
        m.contains("snbuf_export_bursts_total{state=\"exported\"} 2"),
        "{m}"
    );
    assert!(m.contains("snbuf_export_queue_bursts 0"), "{m}");
    let bytes: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("snbuf_export_bytes_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(bytes > 1e6, "{m}");
}

/// An object store that is not there when a unit starts: said plainly, and the unit records.
#[test]
fn serve_records_when_the_object_store_is_unreachable() {
    let root = tempfile::tempdir().unwrap();
    let socket = root.path().join("ctl.sock");
    let log = root.path().join("serve.log");
    let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--output"])
        .arg(root.path().join("rec"))
        .arg("--socket")
        .arg(&socket)
        .args(["--links", "2", "--rate-per-link", "5MB/s", "--buffer", "2s"])
        .args(["--pre", "300ms", "--post", "300ms", "--method", "direct"])
        .args(["--export-to", "s3://nowhere/unit"])
        .env("SNBUF_S3_ENDPOINT", "http://127.0.0.1:9")
        .env("AWS_ACCESS_KEY_ID", "GKx")
        .env("AWS_SECRET_ACCESS_KEY", "never-printed-secret")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _server = KillOnDrop(child);
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(600));
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "local",
        "--wait",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    // The export is queued once the burst is sealed and fails on its first try: wait for its
    // report (bounded), rather than for a fixed time a loaded machine may overrun.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut text = std::fs::read_to_string(&log).unwrap();
    while !text.contains("export of") && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        text = std::fs::read_to_string(&log).unwrap();
    }
    assert!(
        text.contains("unreachable") && text.contains("recording locally"),
        "{text}"
    );
    assert!(
        text.contains("export of"),
        "the failed export is reported: {text}"
    );
    assert!(!text.contains("never-printed-secret"));
    assert!(!root.path().join("rec/local/export.json").exists());
}

/// Waits (at most `limit`) until `done` holds; panics saying `what` past it.
fn wait_until(limit: Duration, what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + limit;
    while !done() {
        assert!(Instant::now() < deadline, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `serve`'s exporter into directory `store`, deleting local copies at a second read-back
/// `second_read_back_after` the first.
fn deleting_queue(
    store: &Path,
    second_read_back_after: Duration,
) -> snbuf_export::queue::ExportQueue {
    let opts = snbuf_export::ExportOptions {
        rate_bytes_per_s: None,
        part_bytes: 5 << 20,
        delete_after_verify: true,
        codec: snbuf_export::ExportCodec::None,
    };
    let dest = snbuf_export::Destination::dir(store).unwrap();
    snbuf_export::queue::ExportQueue::start(dest, opts, second_read_back_after).unwrap()
}

/// `serve`'s exporter with `--delete-after-verify`: a local copy goes only at a second read-back
/// of the store, `second_read_back_after` the first. An object the store lost in between (a
/// power cut that took the store's last writes) is found missing there and sent again, and the
/// copy goes only once that is read back twice too.
#[test]
fn a_local_copy_goes_only_after_a_second_read_back_and_what_the_store_lost_is_sent_again() {
    let root = tempfile::tempdir().unwrap();
    let b = burst(root.path());
    let local = std::fs::read(b.join("link-0000.dat")).unwrap();
    let store = root.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let queue = deleting_queue(&store, Duration::from_secs(5));
    queue.push(b.clone());
    wait_until(Duration::from_secs(30), "exported", || {
        b.join("export.json").exists()
    });
    assert!(
        b.join("link-0000.dat").exists(),
        "kept until read back twice"
    );
    // The store loses an object before the second read-back.
    std::fs::remove_file(store.join("b/link-0000.dat")).unwrap();
    // Found missing at the second read-back and sent again, from the local copy still here...
    let lost = store.join("b/link-0000.dat");
    wait_until(
        Duration::from_secs(60),
        "the lost object sent again",
        || lost.exists(),
    );
    assert_eq!(std::fs::read(&lost).unwrap(), local);
    // ...which stays until this export too is read back a second time.
    assert!(
        b.join("link-0000.dat").exists(),
        "kept until read back twice"
    );
    wait_until(Duration::from_secs(60), "the local copy removed", || {
        !b.exists()
    });
    assert_eq!(std::fs::read(&lost).unwrap(), local);
}

/// A unit that starts reads back again what it exported in the last minutes (the store may have
/// lost it with the same power cut), and sends again what is missing.
#[test]
fn serve_reads_recent_exports_back_at_start_and_sends_what_the_store_lost() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("rec");
    let store = root.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let socket = root.path().join("ctl.sock");
    let start = || {
        // The socket a killed server left behind.
        let _ = std::fs::remove_file(&socket);
        let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
            .args(["serve", "--output"])
            .arg(&out)
            .arg("--socket")
            .arg(&socket)
            .args(["--links", "1", "--rate-per-link", "2MB/s", "--buffer", "2s"])
            .args(["--pre", "300ms", "--post", "300ms", "--method", "direct"])
            .args(["--export-to", &format!("file://{}", store.display())])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let server = KillOnDrop(child);
        wait_for_socket(&socket);
        server
    };
    let server = start();
    std::thread::sleep(Duration::from_millis(600));
    let o = snbuf(&[
        "trigger",
        "--socket",
        socket.to_str().unwrap(),
        "--burst-id",
        "a",
        "--wait",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    wait_until(Duration::from_secs(30), "exported", || {
        out.join("a/export.json").exists()
    });
    drop(server);
    std::fs::remove_file(store.join("a/link-0000.dat")).unwrap();
    let _server = start();
    wait_until(
        Duration::from_secs(30),
        "the lost object sent again",
        || store.join("a/link-0000.dat").exists(),
    );
    assert_eq!(
        std::fs::read(store.join("a/link-0000.dat")).unwrap(),
        std::fs::read(out.join("a/link-0000.dat")).unwrap()
    );
}

/// A unit that starts with `--delete-after-verify` finds a burst it exported long ago, before a
/// restart (its second read-back never came): read back once more, then its local copy goes.
#[test]
fn an_old_export_found_at_start_is_read_back_then_deleted() {
    let root = tempfile::tempdir().unwrap();
    let b = burst(root.path());
    let store = root.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let to = format!("file://{}", store.display());
    let o = run(&mut export_cmd(&b, &to, &[], &[]));
    assert!(o.status.success(), "{}", stderr(&o));
    // Exported an hour ago, as far as its record says.
    let record = b.join("export.json");
    let mut e: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let hour_ago = snbuf_quantity::now_unix_ns() - 3_600_000_000_000;
    e["verified_unix_ns"] = serde_json::json!(hour_ago);
    std::fs::write(&record, e.to_string()).unwrap();
    let queue = deleting_queue(&store, Duration::from_secs(600));
    queue.push_exported(b.clone(), hour_ago);
    wait_until(Duration::from_secs(30), "the local copy removed", || {
        !b.exists()
    });
    assert!(store.join("b/link-0000.dat").exists());
}
