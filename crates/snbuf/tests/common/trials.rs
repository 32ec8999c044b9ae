//! What a crash or power-cut trial checks once the recorder is gone: every chunk the recorder
//! had called durable is there and intact, a burst it had called sealed is sealed as it said,
//! and no frame that `verify` accepts differs from what the link emulator made for that link at
//! that timestamp (the emulator's frames are fully determined by link and time).
//! `crash_trials.rs` (SIGKILL) and `powercut.rs` (a virtual machine's plug pulled) share it.

use std::collections::BTreeMap;
use std::os::unix::fs::FileExt;
use std::path::Path;

use serde_json::Value;
use snbuf_burst::{scan, Expect, Manifest};
use snbuf_readout::{FrameGen, FrameType, Payload};

/// ProtoDUNE WIB frames, the recorder's default: 300 ticks each.
pub const TICKS_PER_FRAME: u64 = 300;

/// Ticks between a link's frames when `snbuf record` emulates ProtoDUNE WIB links at `rate`
/// ("20MB/s"): the emulator is a sub-sampled detector on the real 50 MHz clock.
pub fn frame_step_for(rate: &str) -> u64 {
    let bytes_per_s = snbuf_quantity::parse_rate_bytes_per_s(rate).expect("a rate") as f64;
    snbuf_frames::DetectorClock::of(FrameType::ProtoDuneWib)
        .frame_step_ticks(bytes_per_s / FrameType::ProtoDuneWib.frame_bytes() as f64)
}

/// The seed of trial `k` of the trials named `name` ("ext4/uring"): each name draws its own
/// stream from the run's `seed` (FNV-1a of the name mixed in), so that two methods never share a
/// schedule, and each trial has its own seed, so that a failure can be replayed alone.
pub fn trial_seed(seed: u64, name: &str, k: u64) -> u64 {
    let fnv = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    });
    snbuf_platform::rng::Rng::new(seed ^ fnv)
        .next_u64()
        .wrapping_add(k.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// What the trials found, over all of them.
#[derive(Default, Debug)]
pub struct Tally {
    pub trials: u64,
    /// Where each cut fell, by the recorder's phase then.
    pub cut_points: BTreeMap<String, u64>,
    pub acked_chunks_checked: u64,
    pub acked_chunks_lost: u64,
    /// Bursts reported sealed, and of those, found otherwise (or not matching their data).
    pub sealed_checked: u64,
    pub sealed_broken: u64,
    pub frames_checked: u64,
    pub corrupt_accepted: u64,
    /// The first trials that failed, with what went wrong.
    pub failures: Vec<String>,
}

impl Tally {
    pub fn line(&self, what: &str) -> String {
        let points: Vec<String> = self
            .cut_points
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        format!(
            "{what}: {} trials; cut at {}; {} acknowledged chunks checked, {} lost; {} sealed \
             bursts checked, {} broken; {} frames checked, {} corrupt accepted",
            self.trials,
            points.join(", "),
            self.acked_chunks_checked,
            self.acked_chunks_lost,
            self.sealed_checked,
            self.sealed_broken,
            self.frames_checked,
            self.corrupt_accepted
        )
    }

    /// The tally as one JSON object, for a kept result file (bench/results/).
    pub fn json(&self) -> Value {
        serde_json::json!({
            "trials": self.trials,
            "cut_points": self.cut_points,
            "acked_chunks_checked": self.acked_chunks_checked,
            "acked_chunks_lost": self.acked_chunks_lost,
            "sealed_checked": self.sealed_checked,
            "sealed_broken": self.sealed_broken,
            "frames_checked": self.frames_checked,
            "corrupt_accepted": self.corrupt_accepted,
            "failures": self.failures,
        })
    }

    /// Whether every promise held.
    pub fn clean(&self) -> bool {
        self.acked_chunks_lost == 0 && self.sealed_broken == 0 && self.corrupt_accepted == 0
    }

    fn fail(&mut self, why: String) {
        if self.failures.len() < 10 {
            self.failures.push(why);
        }
    }
}

/// What the recorder had promised before it was cut off: per link the durable chunks and
/// frames, and whether it had reported the burst sealed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Promises {
    pub links: Vec<(u64, u64, u64)>,
    pub sealed: bool,
}

impl Promises {
    /// From a `--status-file` report (links' durable watermark, and the phase).
    pub fn from_status(status: &Value) -> Promises {
        let links = if status["burst_dir"].is_string() {
            status["links"]
                .as_array()
                .map(|ls| {
                    ls.iter()
                        .filter_map(|l| {
                            Some((
                                l["link"].as_u64()?,
                                l["durable_chunks"].as_u64()?,
                                l["durable_frames"].as_u64()?,
                            ))
                        })
                        .collect()
                })
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        Promises {
            links,
            sealed: status["phase"] == "sealed",
        }
    }

    /// The later of two reports: watermarks only grow.
    pub fn merge(&mut self, newer: Promises) {
        for (link, chunks, frames) in newer.links {
            match self.links.iter_mut().find(|l| l.0 == link) {
                Some(l) => {
                    l.1 = l.1.max(chunks);
                    l.2 = l.2.max(frames);
                }
                None => self.links.push((link, chunks, frames)),
            }
        }
        self.sealed |= newer.sealed;
    }

    pub fn chunks(&self) -> u64 {
        self.links.iter().map(|l| l.1).sum()
    }
}

/// Checks what a cut recorder left in `burst` against what it had promised, with the `snbuf`
/// binary at `snbuf` (recover, then verify), and counts into `tally`. `label` names the trial
/// in failures (its seed, so that it can be replayed).
pub fn check_burst(
    snbuf: &dyn Fn(&[&str]) -> std::process::Output,
    burst: &Path,
    promised: &Promises,
    frame_step_ticks: u64,
    label: &str,
    tally: &mut Tally,
) {
    tally.trials += 1;
    let claimed = promised.chunks();
    if !burst.exists() {
        // Cut before the trigger made the burst: nothing may have been acknowledged.
        tally.acked_chunks_checked += claimed;
        tally.acked_chunks_lost += claimed;
        if promised.sealed {
            tally.sealed_checked += 1;
            tally.sealed_broken += 1;
        }
        if claimed > 0 || promised.sealed {
            tally.fail(format!(
                "{label}: the burst is gone, {claimed} chunks were acknowledged"
            ));
        }
        return;
    }
    let path = burst.to_str().expect("a UTF-8 path");
    if promised.sealed {
        // Reported sealed: so it must be, as found, before recover touches anything.
        tally.sealed_checked += 1;
        let state = Manifest::read(burst).map(|m| m.state);
        let verify = snbuf(&["verify", path]);
        let sealed = matches!(state, Ok(snbuf_burst::BurstState::Sealed));
        if !sealed || verify.status.code() != Some(0) {
            tally.sealed_broken += 1;
            tally.fail(format!(
                "{label}: reported sealed, found {state:?}, verify said {}",
                String::from_utf8_lossy(&verify.stdout).trim()
            ));
        }
    }
    let recover = snbuf(&["recover", path]);
    let verify = snbuf(&["verify", "--json", path]);
    let report: Option<Value> = serde_json::from_slice(&verify.stdout).ok();
    let (true, Some(0), Some(report)) = (recover.status.success(), verify.status.code(), report)
    else {
        // A recovered burst must verify (its loss counted): one that does not keeps nothing.
        tally.acked_chunks_checked += claimed;
        tally.acked_chunks_lost += claimed.max(1);
        tally.fail(format!(
            "{label}: recover said {}; verify said {}",
            String::from_utf8_lossy(&recover.stderr).trim(),
            String::from_utf8_lossy(&verify.stdout).trim()
        ));
        return;
    };
    for &(link, chunks, frames) in &promised.links {
        tally.acked_chunks_checked += chunks;
        let lv = report["links"]
            .as_array()
            .and_then(|ls| ls.iter().find(|l| l["link"] == link));
        let (kept, kept_frames) = lv
            .map(|l| {
                (
                    l["chunks"].as_u64().unwrap_or(0),
                    l["frames"].as_u64().unwrap_or(0),
                )
            })
            .unwrap_or((0, 0));
        if kept < chunks || kept_frames < frames {
            tally.acked_chunks_lost += chunks.saturating_sub(kept).max(1);
            tally.fail(format!(
                "{label}: link {link}: {chunks} chunks ({frames} frames) acknowledged, \
                 {kept} ({kept_frames}) recovered"
            ));
        }
    }
    let before = tally.corrupt_accepted;
    check_frames(burst, frame_step_ticks, tally);
    if tally.corrupt_accepted > before {
        tally.fail(format!(
            "{label}: {} frames accepted that the link never sent",
            tally.corrupt_accepted - before
        ));
    }
}

/// Every frame in every chunk that verify accepted is the one the emulator made for that link at
/// its timestamp, byte for byte, on the chunk's grid (frames `step` ticks apart) and after the
/// frame before it.
pub fn check_frames(burst: &Path, step: u64, tally: &mut Tally) {
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
                frame_step_ticks: Some(step),
                frame: None,
            },
        )
        .unwrap();
        let mut last_ts: Option<u64> = None;
        let mut sent = FrameGen::new(FrameType::ProtoDuneWib, link, &Payload::Emulated)
            .unwrap()
            .with_frame_step(step);
        let layout = FrameType::ProtoDuneWib.layout();
        for c in &report.chunks {
            let mut payload = vec![0u8; c.payload_bytes as usize];
            file.read_exact_at(&mut payload, c.offset + c.payload_offset)
                .unwrap();
            let fb = payload.len() / c.frame_count as usize;
            for (k, frame) in payload.chunks_exact(fb).enumerate() {
                tally.frames_checked += 1;
                let ts = layout.timestamp(frame);
                let in_order = last_ts.is_none_or(|t| ts > t);
                let on_grid = ts == c.first_timestamp + k as u64 * step;
                if !(in_order && on_grid && sent.frame_at(ts) == frame) {
                    tally.corrupt_accepted += 1;
                }
                last_ts = Some(ts);
            }
        }
    }
}
