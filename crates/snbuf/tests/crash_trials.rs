//! Crash trials of the real binary: `snbuf record` is killed with SIGKILL at a random moment,
//! then `snbuf recover` and `snbuf verify` run on what it left. The recorder's status file says,
//! per link, how many chunks were durable (the durable watermark); every chunk it reported before
//! the kill must be there and intact, and no frame that verify accepts may differ from what the
//! link emulator produced for that link at that timestamp (the emulator's frames are fully
//! determined by link and time).
//!
//! CI runs a few trials per method; `bench/crash_trials.sh` runs any number (default 100):
//! `SNBUF_CRASH_TRIALS=N` trials per method, `SNBUF_CRASH_SEED=S` for other kill moments.
//!
//! A process kill keeps the page cache, so it tests the recorder's ordering and accounting
//! (acknowledge after persist, headers after payloads, recovery of an unsealed burst), not the
//! medium's flushes; `snbuf-burst`'s crash_consistency test covers power loss on a simulated
//! medium that drops, keeps or tears unflushed writes, and `powercut.rs` a real kernel losing
//! its power.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::trials::{
    check_burst, check_frames, frame_step_for, trial_seed, Promises, Tally, TICKS_PER_FRAME,
};
use serde_json::Value;
use snbuf_readout::{FrameGen, FrameType, Payload};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run_trials(method: &str) {
    let trials = env_u64("SNBUF_CRASH_TRIALS", 2);
    let seed = env_u64("SNBUF_CRASH_SEED", 1);
    let mut tally = Tally::default();
    for k in 0..trials {
        let mut rng = snbuf_platform::rng::Rng::new(trial_seed(seed, method, k));
        // The first trial is killed mid-recording, up to 300 ms after the recorder first said a
        // chunk was durable, so that acknowledged chunks are always checked. The others from
        // just after the start to about when a normal run ends (2.3-2.6 s here), so that
        // buffering, recording, sealing and verifying are all hit.
        let kill = if k == 0 {
            Kill::AfterFirstAck(Duration::from_millis(rng.below(300)))
        } else {
            Kill::After(Duration::from_millis(100 + rng.below(2400)))
        };
        let checked_before = tally.acked_chunks_checked;
        trial(method, kill, &mut tally);
        if k == 0 {
            assert!(
                tally.acked_chunks_checked > checked_before,
                "{method}: killed mid-recording, yet no acknowledged chunk was checked \
                 (did the recorder report any?): {}",
                tally.line("so far")
            );
        }
    }
    println!("{}", tally.line(&format!("crash trials ({method})")));
    let mut line = tally.json();
    line["method"] = method.into();
    line["seed"] = seed.into();
    common::keep_result_line("SNBUF_CRASH_RESULT", &line);
    assert!(tally.clean(), "promises broken: {:#?}", tally.failures);
}

/// When a trial's recorder is killed.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// This long after it started.
    After(Duration),
    /// This long after its status file first showed a chunk durable (within 20 s, or the
    /// trial fails: a recorder that reports nothing must not pass).
    AfterFirstAck(Duration),
}

fn trial(method: &str, kill: Kill, tally: &mut Tally) {
    // nt needs a mapped file; /dev/shm stands in for persistent memory where it exists.
    let out = if method == "nt" && Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    };
    let status_path = out.path().join("status.json");
    let data = out.path().join("data");
    let mut child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["record", "--output"])
        .arg(&data)
        .args(["--status-file"])
        .arg(&status_path)
        .args([
            "--burst-id",
            "t",
            "--links",
            "2",
            "--rate-per-link",
            "20MB/s",
            "--buffer",
            "1s",
            "--pre",
            "500ms",
            "--post",
            "1500ms",
            "--trigger-after",
            "600ms",
            "--chunk-frames",
            "32",
            "--chunks-per-persist",
            "2",
            "--method",
            method,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("snbuf runs");
    let start = Instant::now();
    let mut exited = false;
    let mut kill_at = match kill {
        Kill::After(d) => Some(start + d),
        Kill::AfterFirstAck(_) => None,
    };
    while kill_at.is_none_or(|k| Instant::now() < k) {
        if child.try_wait().unwrap().is_some() {
            exited = true;
            break;
        }
        if let (None, Kill::AfterFirstAck(delay)) = (kill_at, kill) {
            let acked = std::fs::read_to_string(&status_path)
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .is_some_and(|s| Promises::from_status(&s).chunks() > 0);
            if acked {
                kill_at = Some(Instant::now() + delay);
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{method}: the recorder reported no durable chunk in 20 s"
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // What the recorder had said was durable, read before the kill: all of it must survive.
    let status: Option<Value> = std::fs::read_to_string(&status_path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    if !exited {
        child.kill().unwrap();
    }
    child.wait().unwrap();
    let phase = if exited {
        "done (exited before the kill)".to_string()
    } else {
        status
            .as_ref()
            .and_then(|s| s["phase"].as_str())
            .unwrap_or("starting")
            .to_string()
    };
    *tally.cut_points.entry(phase).or_default() += 1;
    let promised = status
        .as_ref()
        .map(Promises::from_status)
        .unwrap_or_default();
    check_burst(
        &|args| common::snbuf(args),
        &data.join("t"),
        &promised,
        frame_step_for("20MB/s"),
        &format!("{method} killed {kill:?}"),
        tally,
    );
}

#[test]
fn killed_while_recording_with_direct_loses_nothing_acknowledged() {
    run_trials("direct");
}

#[test]
fn killed_while_recording_with_uring_loses_nothing_acknowledged() {
    run_trials("uring");
}

#[test]
fn killed_while_recording_with_nt_loses_nothing_acknowledged() {
    run_trials("nt");
}

/// The frame check is not vacuous: a frame with a valid checksum but another link's payload, or
/// off its chunk's timestamp grid, counts as corrupt accepted.
#[test]
fn the_frame_check_catches_a_frame_that_is_not_the_links() {
    use snbuf_burst::{BurstSpec, BurstWriter, FrameInfo};
    use snbuf_persist::{open, Method, SinkConfig};

    let dir = tempfile::tempdir().unwrap();
    let fb = 5568usize;
    let frame = |link: u32, ts: u64, _: u64| {
        FrameGen::new(FrameType::ProtoDuneWib, link, &Payload::Emulated)
            .unwrap()
            .frame_at(ts)
            .to_vec()
    };
    let spec = BurstSpec {
        burst_id: "b".into(),
        frame: FrameInfo {
            frame_type: "protodune-wib".into(),
            frame_bytes: fb as u32,
            ticks_per_frame: TICKS_PER_FRAME,
            clock_hz: 50_000_000,
            frame_step_ticks: None,
        },
        trigger: None,
        method: "buffered".into(),
        links: vec![0],
        max_payload_bytes: 4 * fb,
        identities: vec![],
        run_number: None,
        unit: None,
        injected_faults: Vec::new(),
    };
    let mut w = BurstWriter::create(dir.path(), spec, |_, path| {
        open(&SinkConfig::new(Method::Buffered, path, 1 << 20))
    })
    .unwrap();
    let good = [frame(0, 1000, 1), frame(0, 1300, 2)].concat();
    let other_link = [frame(0, 1600, 3), frame(1, 1900, 4)].concat();
    let off_grid = [frame(0, 2200, 5), frame(0, 2222, 6)].concat();
    w.write_chunk(0, 1000, 1300, &good).unwrap();
    w.write_chunk(0, 1600, 1900, &other_link).unwrap();
    w.write_chunk(0, 2200, 2500, &off_grid).unwrap();
    w.seal().unwrap();
    let mut tally = Tally::default();
    check_frames(&dir.path().join("b"), TICKS_PER_FRAME, &mut tally);
    assert_eq!(tally.frames_checked, 6);
    assert_eq!(tally.corrupt_accepted, 2);
}
