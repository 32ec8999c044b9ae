//! A unit killed in the middle of a chain of bursts (a window grown by joins past
//! `--max-burst`, going on as ROOT-2, ROOT-3, ...) and started again on the same output: the
//! burst being recorded is recovered, still continuing the one before without a gap, every
//! chunk acknowledged kept; the burst it would have gone on in was never made, and its
//! manifest no longer names one.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{snbuf, status_when, unit_status as status, wait_for_socket, KillOnDrop};
use serde_json::Value;

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn a_unit_killed_mid_chain_recovers_the_burst_still_continuing_the_one_before() {
    let dir = tempfile::tempdir().unwrap();
    let options = [common::SMALL_UNIT, common::CHAINING_UNIT].concat();
    let (mut cmd, out, socket) = common::serve_command(dir.path(), &options);
    let mut server = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    let s = socket.to_str().unwrap();
    let trigger = |id: &str, pre: &str, post: &str| {
        let o = snbuf(&[
            "trigger",
            "--socket",
            s,
            "--burst-id",
            id,
            "--pre",
            pre,
            "--post",
            post,
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    std::thread::sleep(Duration::from_millis(1500));
    trigger("first", "1s", "2s");
    std::thread::sleep(Duration::from_millis(1500));
    // The first burst spans [T-1 s, T+3 s) of its trigger T, capped at --max-burst. The second,
    // [T+1 s, T+4.5 s), goes on in first-2 from T+3 s.
    let said = trigger("second", "500ms", "3s");
    assert!(said.contains("first-2"), "{said}");
    status_when(&socket, Duration::from_secs(20), |st| {
        st["recording_burst"]["burst_id"] == "first-2"
    });
    // A third, half a second into first-2, reaches past first-2's own cap (T+7 s): first-2's
    // manifest names first-3 from now on.
    std::thread::sleep(Duration::from_millis(500));
    let said = trigger("third", "100ms", "3800ms");
    assert!(said.contains("first-3"), "{said}");
    let next_manifest = out.join("first-2/manifest.json");
    status_when(&socket, Duration::from_secs(10), |st| {
        let named = std::fs::read(&next_manifest)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .is_some_and(|m| m["continued_in"] == "first-3");
        named
            && st["recording"].as_array().is_some_and(|links| {
                links.len() == 2
                    && links
                        .iter()
                        .all(|l| l["durable_chunks"].as_u64().unwrap_or(0) >= 2)
            })
    });
    // Killed in first-2, before first-3 is made.
    assert_eq!(status(&socket)["recording_burst"]["burst_id"], "first-2");
    server.0.kill().unwrap();
    server.0.wait().unwrap();

    let (mut cmd, _, _) = common::serve_command(dir.path(), &options);
    let _server = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    let recovered = common::burst_outcome(&socket, "first-2", Duration::from_secs(30));
    assert_eq!(recovered["state"], "recovered", "{recovered}");
    assert_eq!(recovered["valid"], true, "{recovered}");

    // The first was sealed by then (or, had the kill come first, recovered at the start).
    let first = manifest(&out.join("first"));
    let next = manifest(&out.join("first-2"));
    assert!(
        ["sealed", "recovered"].contains(&first["state"].as_str().unwrap()),
        "{first}"
    );
    assert_eq!(first["continued_in"], "first-2", "{first}");
    assert_eq!(next["state"], "recovered", "{next}");
    assert_eq!(next["continues"], "first", "{next}");
    assert!(
        next["continued_in"].is_null(),
        "first-3 was never made, and is not named: {next}"
    );
    assert!(!out.join("first-3").exists());
    // No gap at the seam: each link's first frame in first-2 is the one after its last in
    // first. What first-2 did not get to is counted lost.
    let step = first["frame"]["frame_step_ticks"].as_u64().unwrap();
    for (a, b) in first["links"]
        .as_array()
        .unwrap()
        .iter()
        .zip(next["links"].as_array().unwrap())
    {
        assert_eq!(a["lost_frames"], 0, "{a}");
        assert_eq!(
            b["first_timestamp"].as_u64(),
            a["last_timestamp"].as_u64().map(|t| t + step),
            "link {}",
            a["link"]
        );
        assert!(b["lost_frames"].as_u64().unwrap() > 0, "{b}");
    }
    for b in ["first", "first-2"] {
        let v = snbuf(&["verify", out.join(b).to_str().unwrap()]);
        assert_eq!(
            v.status.code(),
            Some(0),
            "{b}: {}",
            String::from_utf8_lossy(&v.stdout)
        );
    }
}
