//! `snbuf verify` and `snbuf recover` as a user runs them: exit 0 / 1 / 2, one error line, JSON
//! that parses, and a dry run that changes nothing.

mod common;

use common::snbuf;

use std::path::{Path, PathBuf};

use snbuf_burst::manifest::link_file_name;
use snbuf_burst::{BurstSpec, BurstWriter, FrameInfo, Window};
use snbuf_persist::{open, Method, SinkConfig};

/// Two links of five 3-frame chunks each (464 B frames, 25 ticks apart), written with `direct`
/// through the burst writer and sealed, under `root`.
fn burst(root: &Path) -> PathBuf {
    burst_with(root, None, None)
}

/// `burst`, with a trigger window, and with chunk `skipped` of link 1 never written (its frames
/// counted lost, as the recorder counts frames gone from the buffer).
fn burst_with(root: &Path, trigger: Option<Window>, skipped: Option<u64>) -> PathBuf {
    let spec = BurstSpec {
        burst_id: "cli".into(),
        frame: FrameInfo {
            frame_type: "custom:464:25".into(),
            frame_bytes: 464,
            ticks_per_frame: 25,
            clock_hz: 50_000_000,
            frame_step_ticks: None,
        },
        trigger,
        method: "direct".into(),
        links: vec![0, 1],
        max_payload_bytes: 3 * 464,
        identities: vec![],
        run_number: None,
        unit: None,
        injected_faults: Vec::new(),
    };
    let mut b = BurstWriter::create(root, spec, |_, path| {
        open(&SinkConfig::new(Method::Direct, path, 1 << 20))
    })
    .unwrap();
    for link in 0..2 {
        for seq in 0..5u64 {
            if link == 1 && skipped == Some(seq) {
                b.add_lost_frames(1, 3);
                continue;
            }
            // Three frames, each with its timestamp where custom frames keep it (bytes 0..8).
            let mut frames = vec![seq as u8 + 1; 3 * 464];
            for (k, f) in frames.chunks_exact_mut(464).enumerate() {
                f[..8].copy_from_slice(&(seq * 75 + k as u64 * 25).to_le_bytes());
            }
            b.write_chunk(link, seq * 75, seq * 75 + 50, &frames)
                .unwrap();
        }
    }
    let dir = b.dir().to_path_buf();
    b.seal().unwrap();
    dir
}

#[test]
fn verify_says_valid_with_exit_0_and_json_parses() {
    let root = tempfile::tempdir().unwrap();
    let dir = burst(root.path());
    let d = dir.to_str().unwrap();
    let o = snbuf(&["verify", d]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("valid"));
    let o = snbuf(&["verify", d, "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], true);
    assert_eq!(v["links"][1]["chunks"], 5);
}

/// Valid is not whole: a burst whose lost frames are all counted passes `verify`, and `verify`
/// still says its trigger's window is not whole, naming the link; a window inside the data is.
#[test]
fn verify_says_whether_each_triggers_window_is_whole() {
    let root = tempfile::tempdir().unwrap();
    // Frames at 0, 25, ..., 350; the window [0, 375) is every one of them.
    let window = Window::new(100, 0, 375, 50_000_000);
    for sub in ["a", "b"] {
        std::fs::create_dir(root.path().join(sub)).unwrap();
    }
    let whole = burst_with(&root.path().join("a"), Some(window.clone()), None);
    let lossy = burst_with(&root.path().join("b"), Some(window), Some(2));
    let json = |dir: &Path| {
        let o = snbuf(&["verify", dir.to_str().unwrap(), "--json"]);
        assert_eq!(
            o.status.code(),
            Some(0),
            "valid: {}",
            String::from_utf8_lossy(&o.stdout)
        );
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let v = json(&whole);
    let t = &v["triggers"][0];
    assert_eq!(t["trigger_id"], "cli", "{v}");
    assert_eq!(
        (t["frames_in_window"].as_u64(), t["frames_present"].as_u64()),
        (Some(30), Some(30)),
        "{t}"
    );
    assert_eq!(t["whole"], true, "{t}");

    let v = json(&lossy);
    assert_eq!(v["valid"], true, "the loss is counted: {v}");
    let t = &v["triggers"][0];
    assert_eq!(t["frames_present"], 27, "{t}");
    assert_eq!(t["links_short"], serde_json::json!([1]), "{t}");
    assert_eq!(t["whole"], false, "{t}");
    let o = snbuf(&["verify", lossy.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("trigger cli: NOT WHOLE: 3 of its 30 frames missing (links [1])"),
        "{text}"
    );
}

#[test]
fn damage_gives_exit_1_and_recover_repairs_what_it_can() {
    let root = tempfile::tempdir().unwrap();
    let dir = burst(root.path());
    let d = dir.to_str().unwrap();
    let f = dir.join(link_file_name(1));
    let len = std::fs::metadata(&f).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(len - 100)
        .unwrap();

    let o = snbuf(&["verify", d]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("torn tail at offset"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");

    let before = std::fs::read(&f).unwrap();
    let o = snbuf(&["recover", d, "--dry-run"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("would drop"));
    assert_eq!(
        std::fs::read(&f).unwrap(),
        before,
        "a dry run changes nothing"
    );

    let o = snbuf(&["recover", d]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("link 1: kept 4 chunk(s)"));
    let o = snbuf(&["recover", d]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("nothing to recover"),
        "idempotent"
    );
    assert_eq!(snbuf(&["verify", d]).status.code(), Some(0));
}

#[test]
fn bad_paths_are_usage_errors_and_an_empty_directory_is_not_a_burst() {
    for cmd in ["verify", "recover"] {
        let o = snbuf(&[cmd, "/nonexistent/snbuf/burst"]);
        assert_eq!(o.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no such directory"), "{err}");
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    assert_eq!(snbuf(&["verify", d]).status.code(), Some(1));
    let o = snbuf(&["recover", d]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a burst"));
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing created"
    );
}
