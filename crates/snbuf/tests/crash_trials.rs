//! Crash trials of the real binary: `snbuf record` is killed with SIGKILL at a random moment,
//! then `snbuf recover` and `snbuf verify` run on what it left. The recorder's status file says,
//! per link, how many chunks were durable (the durable watermark); every chunk it reported before
//! the kill must be there and intact, and no frame that verify accepts may differ from what the
//! link emulator produced (each frame carries its link's pattern, its timestamp and sequence).
//!
//! CI runs a few trials per method; `bench/crash_trials.sh` runs any number (default 100):
//! `SNBUF_CRASH_TRIALS=N` trials per method, `SNBUF_CRASH_SEED=S` for other kill moments.
//!
//! A process kill keeps the page cache, so it tests the recorder's ordering and accounting
//! (acknowledge after persist, headers after payloads, recovery of an unsealed burst), not the
//! medium's flushes; `snbuf-burst`'s crash_consistency test covers power loss on a simulated
//! medium that drops, keeps or tears unflushed writes.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use snbuf_burst::{scan, Expect, HEADER_BYTES};
use snbuf_daq::source::has_pattern_payload;

/// ProtoDUNE WIB frames, the default: 300 ticks each.
const TICKS_PER_FRAME: u64 = 300;

#[derive(Default)]
struct Tally {
    trials: u64,
    kill_points: BTreeMap<String, u64>,
    acked_chunks_checked: u64,
    acked_chunks_lost: u64,
    frames_checked: u64,
    corrupt_accepted: u64,
}

fn splitmix64(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run_trials(method: &str) {
    let trials = env_u64("SNBUF_CRASH_TRIALS", 2);
    let mut seed = env_u64("SNBUF_CRASH_SEED", 1) ^ (method.len() as u64 * 0x1000_0001);
    let mut tally = Tally::default();
    for _ in 0..trials {
        // From just after the start to about when a normal run ends (2.3-2.6 s here), so that
        // buffering, recording, sealing and verifying are all hit.
        let kill_after = Duration::from_millis(100 + splitmix64(&mut seed) % 2400);
        trial(method, kill_after, &mut tally);
    }
    let points: Vec<String> = tally
        .kill_points
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    println!(
        "crash trials ({method}): {} trials; killed at {}; {} acknowledged chunks checked, \
         {} lost; {} frames checked, {} corrupt accepted",
        tally.trials,
        points.join(", "),
        tally.acked_chunks_checked,
        tally.acked_chunks_lost,
        tally.frames_checked,
        tally.corrupt_accepted
    );
    assert_eq!(tally.acked_chunks_lost, 0, "acknowledged chunks lost");
    assert_eq!(tally.corrupt_accepted, 0, "corrupt frames accepted");
}

fn trial(method: &str, kill_after: Duration, tally: &mut Tally) {
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
    while start.elapsed() < kill_after {
        if child.try_wait().unwrap().is_some() {
            exited = true;
            break;
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
    tally.trials += 1;
    let phase = if exited {
        "done (exited before the kill)".to_string()
    } else {
        status
            .as_ref()
            .and_then(|s| s["phase"].as_str())
            .unwrap_or("starting")
            .to_string()
    };
    *tally.kill_points.entry(phase).or_default() += 1;

    let burst = data.join("t");
    let acked: Vec<(u64, u64, u64)> = status
        .as_ref()
        .filter(|s| s["burst_dir"].is_string())
        .map(|s| {
            s["links"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| {
                    (
                        l["link"].as_u64().unwrap(),
                        l["durable_chunks"].as_u64().unwrap(),
                        l["durable_frames"].as_u64().unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    if !burst.exists() {
        // Killed before the trigger started the burst: nothing may have been acknowledged.
        let claimed: u64 = acked.iter().map(|a| a.1).sum();
        tally.acked_chunks_checked += claimed;
        tally.acked_chunks_lost += claimed;
        return;
    }
    let recover = common::snbuf(&["recover", burst.to_str().unwrap()]);
    assert!(
        recover.status.success(),
        "recover after a kill at {kill_after:?}: {}",
        common::stderr(&recover)
    );
    let verify = common::snbuf(&["verify", "--json", burst.to_str().unwrap()]);
    let report: Value = serde_json::from_slice(&verify.stdout).unwrap();
    assert_eq!(
        verify.status.code(),
        Some(0),
        "a recovered burst verifies (its loss counted): {report}"
    );
    for (link, chunks, frames) in acked {
        let lv = report["links"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["link"] == link)
            .expect("every link has a file");
        tally.acked_chunks_checked += chunks;
        let kept = lv["chunks"].as_u64().unwrap();
        if kept < chunks || lv["frames"].as_u64().unwrap() < frames {
            eprintln!("link {link}: {chunks} chunks acknowledged, {kept} recovered: {lv}");
            tally.acked_chunks_lost += chunks.saturating_sub(kept).max(1);
        }
    }
    check_frames(&burst, tally);
}

/// Every frame in every chunk that verify accepted is one the emulator made for that link: its
/// pattern, its timestamp on the chunk's grid, and a sequence number one more than the last.
fn check_frames(burst: &Path, tally: &mut Tally) {
    for entry in std::fs::read_dir(burst).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(link) = snbuf_burst::manifest::link_of_file_name(&name) else {
            continue;
        };
        let file = std::fs::File::open(&path).unwrap();
        let report = scan(
            &file,
            Expect {
                link: Some(link),
                ticks_per_frame: Some(TICKS_PER_FRAME),
            },
        )
        .unwrap();
        let mut last_seq: Option<u64> = None;
        for c in &report.chunks {
            let mut payload = vec![0u8; c.payload_bytes as usize];
            file.read_exact_at(&mut payload, c.offset + HEADER_BYTES as u64)
                .unwrap();
            let fb = payload.len() / c.frame_count as usize;
            for (k, frame) in payload.chunks_exact(fb).enumerate() {
                tally.frames_checked += 1;
                let ts = u64::from_le_bytes(frame[0..8].try_into().unwrap());
                let seq = u64::from_le_bytes(frame[8..16].try_into().unwrap());
                let in_order = last_seq.is_none_or(|s| seq > s);
                let on_grid = ts == c.first_timestamp + k as u64 * TICKS_PER_FRAME;
                if !(in_order && on_grid && has_pattern_payload(link, frame)) {
                    tally.corrupt_accepted += 1;
                }
                last_seq = Some(seq);
            }
        }
    }
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
    use snbuf_daq::source::pattern_byte;
    use snbuf_persist::{open, Method, SinkConfig};

    let dir = tempfile::tempdir().unwrap();
    let fb = 5568usize;
    let frame = |link: u32, ts: u64, seq: u64| {
        let mut f: Vec<u8> = (0..fb).map(|i| pattern_byte(link, i)).collect();
        f[0..8].copy_from_slice(&ts.to_le_bytes());
        f[8..16].copy_from_slice(&seq.to_le_bytes());
        f
    };
    let spec = BurstSpec {
        burst_id: "b".into(),
        frame: FrameInfo {
            frame_type: "protodune-wib".into(),
            frame_bytes: fb as u32,
            ticks_per_frame: TICKS_PER_FRAME,
            clock_hz: 50_000_000,
        },
        trigger: None,
        method: "buffered".into(),
        links: vec![0],
        max_payload_bytes: 4 * fb,
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
    check_frames(&dir.path().join("b"), &mut tally);
    assert_eq!(tally.frames_checked, 6);
    assert_eq!(tally.corrupt_accepted, 2);
}
