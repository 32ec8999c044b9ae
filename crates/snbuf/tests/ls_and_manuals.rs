//! `snbuf ls` over a directory of bursts in every state, and the generated shell completions
//! and man pages.

mod common;

use std::path::Path;

use common::{assert_refused, small_recording, snbuf, snbuf_owned};
use serde_json::Value;

fn record(out: &Path, id: &str, extra: &[(&str, &str)]) {
    let mut opts = vec![("--rate-per-link", "4MB/s")];
    opts.extend_from_slice(extra);
    let _ = snbuf_owned(&small_recording(out, id, &opts));
}

#[test]
fn ls_lists_every_burst_with_its_state_loss_verification_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("data");
    record(&out, "a-sealed", &[]);
    record(
        &out,
        "b-failed",
        &[("--inject-fault", "persist-eio:link=1,after=2")],
    );
    record(
        &out,
        "c-lossy",
        &[
            ("--buffer", "300ms"),
            ("--pre", "200ms"),
            ("--chunk-frames", "32"),
            ("--inject-fault", "slow:rate=2MB/s"),
        ],
    );
    record(&out, "d-cut", &[]);
    // d-cut as a crash leaves it: a manifest still saying "recording".
    let m = out.join("d-cut/manifest.json");
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("\"sealed\"", "\"recording\"");
    std::fs::write(&m, text).unwrap();
    let export = dir.path().join("exported");
    std::fs::create_dir(&export).unwrap();
    let o = snbuf(&[
        "export",
        out.join("a-sealed").to_str().unwrap(),
        "--to",
        &format!("file://{}", export.display()),
    ]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    std::fs::create_dir(out.join("not-a-burst")).unwrap();

    let o = snbuf(&["ls", out.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let by_id = |id: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|b| b["burst_id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(v.as_array().unwrap().len(), 4, "{v}");
    let a = by_id("a-sealed");
    assert_eq!(a["state"], "sealed");
    assert_eq!(a["verified"], "yes", "the recorder's own check");
    assert!(a["exported"].as_str().unwrap().starts_with("yes"), "{a}");
    assert_eq!(a["lost_frames"], 0);
    assert!(a["bytes"].as_u64().unwrap() > 0 && a["window_s"].as_f64().unwrap() > 0.0);
    assert_eq!(by_id("b-failed")["state"], "failed");
    assert!(by_id("c-lossy")["lost_frames"].as_u64().unwrap() > 0);
    assert_eq!(by_id("c-lossy")["exported"], "no");
    assert_eq!(by_id("d-cut")["state"], "interrupted");
    // The table, and --verify reading everything now.
    let o = snbuf(&["ls", out.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    for id in ["a-sealed", "b-failed", "c-lossy", "d-cut"] {
        assert!(text.contains(id), "{text}");
    }
    let o = snbuf(&["ls", out.to_str().unwrap(), "--verify", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let verdict = |id: &str| {
        v.as_array()
            .unwrap()
            .iter()
            .find(|b| b["burst_id"] == id)
            .unwrap()["verified"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(verdict("a-sealed"), "yes (now)");
    assert!(
        verdict("d-cut").starts_with("NO"),
        "an unsealed burst does not verify"
    );
    assert_refused(
        &snbuf(&["ls", "/nonexistent/snbuf-data"]),
        2,
        "not a directory",
    );
}

#[test]
fn completions_and_man_pages_come_from_the_command_definitions() {
    for shell in ["bash", "zsh", "fish"] {
        let o = snbuf(&["completions", shell]);
        assert!(o.status.success());
        let text = String::from_utf8_lossy(&o.stdout);
        for sub in ["record", "serve", "convert", "ls"] {
            assert!(text.contains(sub), "{shell} completion lacks {sub}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let man = dir.path().join("man1");
    let o = snbuf(&["man", man.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::stderr(&o));
    for page in [
        "snbuf.1",
        "snbuf-record.1",
        "snbuf-serve.1",
        "snbuf-bench-write.1",
        "snbuf-fleet-status.1",
    ] {
        let text = std::fs::read_to_string(man.join(page)).unwrap_or_else(|_| panic!("{page}"));
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page} is a man page"
        );
    }
    let record = std::fs::read_to_string(man.join("snbuf-record.1")).unwrap();
    assert!(
        record.contains("rate\\-per\\-link"),
        "options are documented"
    );
    // A closed pipe ends the output quietly, like any Unix tool: no panic.
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_snbuf"));
    c.args(["completions", "bash"])
        .stdout(std::process::Stdio::piped());
    let mut child = common::KillOnDrop(c.stderr(std::process::Stdio::piped()).spawn().unwrap());
    drop(child.0.stdout.take());
    assert!(
        child.wait_within(common::COMMAND_DEADLINE).is_some(),
        "completions into a closed pipe ended"
    );
    let mut err = String::new();
    use std::io::Read;
    // The process has ended: its stderr pipe is at its end.
    child
        .0
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(!err.contains("panicked"));
}
