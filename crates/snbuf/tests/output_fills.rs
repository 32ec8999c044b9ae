//! An output that fills while a unit's window grows: something else on the file system takes
//! its room after the trigger, while the burst's files are still growing toward a window
//! longer than the prepared ones. Each link keeps what fit, its file stops full, the rest of
//! its window is counted lost and the burst says why; the unit goes on, and once there is room
//! again the next alert is recorded whole.

mod common;

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use common::{burst_outcome as outcome, snbuf, wait_for_socket, KillOnDrop, Mount};
use serde_json::Value;

/// Writes `path` until the file system has no room left (ENOSPC); what it could not write is
/// the point.
fn fill(path: &Path) {
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0x5a_u8; 1 << 20];
    loop {
        match f.write_all(&block) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return,
            Err(e) => panic!("filling the output: {e}"),
        }
    }
}

#[test]
fn an_output_filled_while_the_window_grows_keeps_what_fit_and_the_unit_goes_on() {
    let Some(small) = Mount::tmpfs("size=160M") else {
        common::skip_unless_required(
            "SNBUF_REQUIRE_ROOT",
            "a small tmpfs to fill cannot be mounted (needs root)",
        );
        return;
    };
    let root = tempfile::tempdir().unwrap();
    let out = small.path().join("data");
    let socket = root.path().join("ctl.sock");
    // 2 links x 5 MB/s: the prepared files hold 1 s; the 8.5 s window needs ~85 MB, which the
    // output has when the trigger comes.
    let options = [
        "--links",
        "2",
        "--rate-per-link",
        "5MB/s",
        "--buffer",
        "2s",
        "--pre",
        "500ms",
        "--post",
        "500ms",
    ];
    let mut cmd = common::serve_command_into(&out, &socket, &options);
    let _unit = KillOnDrop(cmd.spawn().unwrap());
    wait_for_socket(&socket);
    std::thread::sleep(Duration::from_millis(1500));
    let s = socket.to_str().unwrap();
    let o = snbuf(&[
        "trigger",
        "--socket",
        s,
        "--burst-id",
        "grown",
        "--pre",
        "500ms",
        "--post",
        "8s",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        !said.contains("not recorded"),
        "the window fit when asked: {said}"
    );
    // Two seconds in, something else takes the rest of the output.
    std::thread::sleep(Duration::from_secs(2));
    let ballast = small.path().join("ballast");
    fill(&ballast);

    let grown = outcome(&socket, "grown", Duration::from_secs(30));
    assert!(
        grown["lost_frames"]
            .as_u64()
            .unwrap_or_else(|| panic!("no count of lost frames: {grown}"))
            > 0,
        "the rest is counted lost: {grown}"
    );
    let m: Value =
        serde_json::from_slice(&std::fs::read(out.join("grown/manifest.json")).unwrap()).unwrap();
    for l in m["links"].as_array().unwrap() {
        assert!(l["frames"].as_u64().unwrap() > 0, "what fit was kept: {l}");
        let error = l["error"].as_str().unwrap_or_default();
        assert!(error.contains("full"), "the link says why it stopped: {l}");
    }
    // What was kept reads back whole: verify finds nothing wrong but the stop it names.
    let v = snbuf(&["verify", "--json", out.join("grown").to_str().unwrap()]);
    let report: Value = serde_json::from_slice(&v.stdout).unwrap();
    for link in report["links"].as_array().unwrap() {
        for p in link["problems"].as_array().unwrap() {
            assert!(
                p.as_str().unwrap().contains("link failed while recording"),
                "{p}"
            );
        }
    }

    // Room again: the next alert is recorded whole by the same unit.
    std::fs::remove_file(&ballast).unwrap();
    let o = snbuf(&["trigger", "--socket", s, "--burst-id", "after", "--wait"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let after = outcome(&socket, "after", Duration::from_secs(30));
    assert_eq!(after["valid"], true, "{after}");
    assert_eq!(after["lost_frames"], 0, "{after}");
}
