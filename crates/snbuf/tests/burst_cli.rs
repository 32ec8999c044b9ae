//! `snbuf verify` and `snbuf recover` as a user runs them: exit 0 / 1 / 2, one error line, JSON
//! that parses, and a dry run that changes nothing.

mod common;

use common::snbuf;

use std::path::Path;

use snbuf_burst::manifest::{link_file_name, now_unix_ns, MANIFEST_FORMAT, MANIFEST_VERSION};
use snbuf_burst::{BurstState, ChunkWriter, LinkRecord, LinkState, Manifest};
use snbuf_persist::{open, Method, SinkConfig};

/// Two links of five 3-frame chunks each, written with `direct`, sealed.
fn burst(dir: &Path) {
    let mut links = Vec::new();
    for link in 0..2u32 {
        let path = dir.join(link_file_name(link));
        let sink = open(&SinkConfig::new(Method::Direct, &path, 1 << 20)).unwrap();
        let mut w = ChunkWriter::new(sink, link, 464, 3 * 464).unwrap();
        for seq in 0..5u64 {
            w.write_chunk(
                seq * 3 * 25,
                seq * 3 * 25 + 50,
                &vec![seq as u8 + 1; 3 * 464],
            )
            .unwrap();
        }
        let t = w.totals();
        drop(w);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(t.file_bytes)
            .unwrap();
        links.push(LinkRecord {
            link,
            file: link_file_name(link),
            state: LinkState::Ok,
            chunks: t.chunks,
            frames: t.frames,
            payload_bytes: t.payload_bytes,
            file_bytes: t.file_bytes,
            first_timestamp: t.first_timestamp,
            last_timestamp: t.last_timestamp,
            lost_frames: 0,
            error: None,
        });
    }
    Manifest {
        format: MANIFEST_FORMAT.into(),
        format_version: MANIFEST_VERSION,
        burst_id: "cli".into(),
        state: BurstState::Sealed,
        created_unix_ns: now_unix_ns(),
        sealed_unix_ns: Some(now_unix_ns()),
        trigger: None,
        frame: None,
        method: "direct".into(),
        durability: "fdatasync".into(),
        links,
        recovery: None,
    }
    .write_atomic(dir)
    .unwrap();
}

#[test]
fn verify_says_valid_with_exit_0_and_json_parses() {
    let dir = tempfile::tempdir().unwrap();
    burst(dir.path());
    let d = dir.path().to_str().unwrap();
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

#[test]
fn damage_gives_exit_1_and_recover_repairs_what_it_can() {
    let dir = tempfile::tempdir().unwrap();
    burst(dir.path());
    let d = dir.path().to_str().unwrap();
    let f = dir.path().join(link_file_name(1));
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
