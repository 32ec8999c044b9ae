//! Power cuts on a real kernel. The `snbuf` binary under test records in a virtual machine
//! (Debian's kernel, an ext4 or xfs data disk whose writes stay in a volatile cache until the
//! guest flushes: see `vm.rs`), streaming its durable watermark to the host over the serial
//! console; at a seeded random moment the host pulls the plug (SIGKILL to QEMU and to the disk's
//! server together). Then, on the host, the image is mounted (its journal replayed, as a reboot
//! would), `snbuf recover` and `snbuf verify` run, and every promise the host had received is
//! checked (`common::trials`): every acknowledged chunk present, intact and in sequence; no frame
//! accepted that the link never sent; a burst reported sealed found sealed, matching its data.
//!
//! Most cuts fall mid-recording by construction: at a random moment after the host has seen the
//! first chunk acknowledged, well before the window's end, so that acknowledged chunks are always
//! checked; every such trial asserts that it was cut while recording with chunks acknowledged.
//! The first trial of every method is one of them. The rest fall while buffering, while sealing
//! (between the last chunk and the manifest, its rename and directory fsync) or right after
//! "sealed". Every method and file system draws its own stream of seeds. The trials are shown to
//! catch three broken recorders (`--inject-fault lost-flush`, `late-flush`, `lost-dir-sync`).
//!
//! `serve` is cut the same way mid-burst, then the guest boots again on the disk and starts
//! `serve`, which must recover and seal the burst itself before it answers; its plug is pulled
//! again, and the checks run.
//!
//! CI runs one trial per method on ext4 (direct, uring, buffered, msync) and on xfs (direct,
//! msync), each cut mid-recording, and one of `serve` (direct, ext4). `bench/powercut.sh [N]
//! [SEED]` runs N per method: `SNBUF_POWERCUT_TRIALS`, `_SEED`, `_FS`, `_METHODS`, and
//! `_PROGRAMS` (record,serve); with `SNBUF_POWERCUT_RESULT=FILE` each method's tally is
//! appended to FILE as one JSON line. Without QEMU, nbdkit, busybox-static, cpio and a kernel
//! the tests skip, unless SNBUF_REQUIRE_QEMU is set (CI): then they fail. The host must be root
//! (loop mounts).

#[path = "../common/mod.rs"]
mod common;
mod site;
mod vm;

use std::path::Path;
use std::time::{Duration, Instant};

use common::trials::{check_burst, trial_seed, Promises, Tally};
use serde_json::Value;

/// Links, and each link's rate, in the guest: modest, for an emulated CPU.
const LINKS: &str = "2";
const RATE: &str = "1MB/s";
/// How long a trial may take from its guest's init to its cut.
const RUN_DEADLINE: Duration = Duration::from_secs(180);

/// When to pull the plug.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    /// `delay_ms` after the host first sees a chunk acknowledged: mid-recording, as long as
    /// `delay_ms` is well inside the window's post-trigger part (2 s of detector time, which the
    /// emulated links take 2 s of wall time to produce).
    MidRecording { delay_ms: u64 },
    /// `delay_ms` after the recorder first reports `phase` (or a later one).
    InPhase { phase: &'static str, delay_ms: u64 },
    /// As soon as the host has seen `chunks` chunks acknowledged (all links together).
    OnAck { chunks: u64 },
}

/// The longest delay of a mid-recording cut after the first acknowledgement: 0.8 s short of the
/// window's 2 s after the trigger.
const MID_RECORDING_SPAN_MS: u64 = 1200;

/// Trial `k`'s cut: the first trial, and three in four after it, mid-recording; the others while
/// buffering, while sealing or right after "sealed".
fn random_cut(k: u64, rng: &mut snbuf_platform::rng::Rng) -> Cut {
    if k == 0 || rng.below(4) != 0 {
        return Cut::MidRecording {
            delay_ms: rng.below(MID_RECORDING_SPAN_MS),
        };
    }
    let (phase, span_ms) =
        [("buffering", 1000), ("sealing", 100), ("sealed", 500)][rng.below(3) as usize];
    Cut::InPhase {
        phase,
        delay_ms: rng.below(span_ms),
    }
}

/// The order of the recorder's phases.
fn phase_rank(phase: &str) -> u32 {
    match phase {
        "recording" => 1,
        "sealing" => 2,
        "sealed" => 3,
        _ => 0,
    }
}

struct Trial {
    /// `record`, or `serve` (one trigger; after the cut the guest boots again and starts
    /// `serve` on the same disk, which must recover the burst itself).
    program: &'static str,
    fs: &'static str,
    method: &'static str,
    links: &'static str,
    rate: &'static str,
    fault: Option<&'static str>,
    cut: Cut,
    label: String,
}

/// What the host has heard from the guest.
#[derive(Default)]
struct Heard {
    promised: Promises,
    phase: String,
    exit: Option<i32>,
}

impl Heard {
    fn hear(&mut self, line: &str, console: &[String], label: &str) {
        if let Some(json) = line.strip_prefix("@@ status ") {
            if let Ok(v) = serde_json::from_str::<Value>(json) {
                self.promised.merge(Promises::from_status(&v));
                if let Some(p) = v["phase"].as_str() {
                    self.phase = p.to_string();
                }
            }
        } else if let Some(code) = line.strip_prefix("@@ exit ") {
            self.exit = code.trim().parse().ok();
        } else if line.starts_with("@@ fail") {
            panic!("{label}: {line}\n{}", tail(console));
        }
    }

    /// Where the cut fell.
    fn cut_point(&self) -> String {
        match self.exit {
            Some(0) => "after it exited".into(),
            Some(c) => format!("after it failed ({c})"),
            None if self.phase.is_empty() => "starting".into(),
            None => self.phase.clone(),
        }
    }
}

fn tail(console: &[String]) -> String {
    console[console.len().saturating_sub(40)..].join("\n")
}

/// The guest's parameters for `t`, in `mode`.
fn params<'a>(t: &'a Trial, mode: &'a str) -> Vec<(&'a str, &'a str)> {
    let mut params = vec![
        ("mode", mode),
        ("fs", t.fs),
        ("method", t.method),
        ("links", t.links),
        ("rate", t.rate),
    ];
    if let Some(f) = t.fault {
        params.push(("fault", f));
    }
    params
}

/// One piece: one trial from boot to the checks, its steps sharing what the host heard.
fn run_trial(tools: &vm::Tools, guest: &vm::Guest, t: &Trial, tally: &mut Tally) {
    let disk = vm::Disk::new(t.fs);
    let mut vm = guest.boot_ready(tools, disk, &params(t, t.program));
    let mut heard = Heard::default();
    let until = Instant::now() + RUN_DEADLINE;
    let mut cut_at: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if cut_at.is_some_and(|c| now >= c) {
            break;
        }
        assert!(
            now < until,
            "{}: no cut within {RUN_DEADLINE:?}\n{}",
            t.label,
            vm.tails()
        );
        let wait = cut_at.map_or(Duration::from_millis(200), |c| c - now);
        let Some((_, line)) = vm.next_line(wait.min(Duration::from_millis(200))) else {
            continue;
        };
        heard.hear(&line, &vm.console, &t.label);
        if heard.exit.is_some_and(|c| c != 0) && t.fault.is_none() {
            panic!("{}: the recorder failed\n{}", t.label, vm.tails());
        }
        if cut_at.is_none() {
            let due = match t.cut {
                Cut::MidRecording { delay_ms } => (heard.promised.chunks() > 0
                    || heard.exit.is_some()
                    || phase_rank(&heard.phase) > phase_rank("recording"))
                .then(|| now + Duration::from_millis(delay_ms)),
                Cut::InPhase { phase, delay_ms } => (phase_rank(&heard.phase) >= phase_rank(phase)
                    || heard.exit.is_some())
                .then(|| now + Duration::from_millis(delay_ms)),
                Cut::OnAck { chunks } => {
                    (heard.promised.chunks() >= chunks || heard.exit.is_some()).then_some(now)
                }
            };
            cut_at = due;
        }
    }
    let (disk, _) = vm.cut();
    // Whatever the guest wrote to its console before the cut is a promise too, read or not.
    let drain_until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < drain_until {
        let Some((_, line)) = vm.next_line(Duration::from_millis(100)) else {
            break;
        };
        heard.hear(&line, &vm.console, &t.label);
    }
    if std::env::var_os("SNBUF_POWERCUT_VERBOSE").is_some() {
        eprintln!(
            "{}: console, cut at {}:\n{}",
            t.label,
            heard.cut_point(),
            vm.tails()
        );
    }
    *tally.cut_points.entry(heard.cut_point()).or_default() += 1;
    let mut disk = disk.expect("the trial's disk");
    if t.program == "serve" {
        disk = restart_serve(tools, guest, disk, t, &heard);
    }
    let mounted = LoopMount::new(&disk.image, disk.fs);
    if t.program == "serve" {
        // What the restarted unit recovered was made durable before it said so: the disk,
        // cut again, holds the burst sealed, before the host's own recover touches it.
        let m = snbuf_burst::Manifest::read(&mounted.path().join("snbuf/t"));
        assert!(
            m.as_ref()
                .is_ok_and(|m| m.state != snbuf_burst::BurstState::Recording),
            "{}: after the restart and a second cut the burst is {:?}",
            t.label,
            m.map(|m| m.state)
        );
    }
    let checked_before = tally.acked_chunks_checked;
    check_burst(
        &|args| common::snbuf(args),
        &mounted.path().join("snbuf/t"),
        &heard.promised,
        common::trials::frame_step_for(t.rate),
        &t.label,
        tally,
    );
    if matches!(t.cut, Cut::MidRecording { .. }) {
        // By construction: a schedule that drifted out of the recording phase would leave the
        // recorder's acknowledgements under a power cut unchecked.
        assert!(
            heard.cut_point() == "recording" && tally.acked_chunks_checked > checked_before,
            "{}: meant to cut mid-recording with chunks acknowledged, cut {} with {} \
             acknowledged chunks checked\n{}",
            t.label,
            heard.cut_point(),
            tally.acked_chunks_checked - checked_before,
            vm.tails()
        );
    }
}

/// After the cut: the guest boots again on the same disk and starts `serve`, which must have
/// recovered and sealed the burst it was recording before it answers (nobody runs `snbuf
/// recover`). Its plug is pulled in turn once it said so; returns the disk.
fn restart_serve(
    tools: &vm::Tools,
    guest: &vm::Guest,
    disk: vm::Disk,
    t: &Trial,
    heard: &Heard,
) -> vm::Disk {
    let mut vm = guest.boot_ready(tools, disk, &params(t, "restart"));
    let line = vm
        .wait_for_line("@@ restarted ", RUN_DEADLINE)
        .unwrap_or_else(|e| panic!("{}: serve did not come back: {e}\n{}", t.label, vm.tails()));
    let status: Value = serde_json::from_str(&line["@@ restarted ".len()..])
        .unwrap_or_else(|e| panic!("{}: {e}: {line}", t.label));
    let burst = status["bursts"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["burst_id"] == "t"))
        .cloned();
    let sealed_before = heard.promised.sealed || heard.phase == "sealed";
    match burst {
        // Recovered and sealed by the unit itself, valid.
        Some(b) => assert!(
            b["state"] == "recovered" && b["valid"] == true,
            "{}: after the restart the burst is {b}\n{}",
            t.label,
            vm.tails()
        ),
        None => assert!(
            sealed_before,
            "{}: cut {} and serve did not recover the burst: {status}\n{}",
            t.label,
            heard.cut_point(),
            vm.tails()
        ),
    }
    let (disk, _) = vm.cut();
    disk.expect("the trial's disk")
}

/// A disk image mounted on the host (its journal replayed); unmounted on drop.
struct LoopMount(tempfile::TempDir);

impl LoopMount {
    fn new(image: &Path, fs: &str) -> LoopMount {
        let dir = tempfile::tempdir().unwrap();
        let mut c = std::process::Command::new("mount");
        c.args(["-o", "loop", "-t", fs]).arg(image).arg(dir.path());
        let o = common::output_within(c, Duration::from_secs(60));
        assert!(
            o.status.success(),
            "mount -o loop {} (the host must be root, with loop devices and {fs}): {}",
            image.display(),
            common::stderr(&o)
        );
        LoopMount(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let mut c = std::process::Command::new("umount");
        c.arg(self.0.path());
        let _ = common::output_within(c, Duration::from_secs(60));
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The rig, or None when the test skips.
fn rig(fs: &str) -> Option<(vm::Tools, &'static vm::Guest)> {
    let tools = vm::Tools::find()?;
    let guest = vm::guest(&tools);
    if !guest.filesystems.contains(&fs) {
        assert!(
            std::env::var_os("SNBUF_REQUIRE_QEMU").is_none(),
            "the guest kernel has no {fs} module"
        );
        eprintln!("skip: the guest kernel has no {fs} module");
        return None;
    }
    Some((tools, guest))
}

/// Random power cuts on `fs`, `default_trials` per method of `default_methods` unless the
/// environment says otherwise; every promise must hold.
fn power_cuts(
    program: &'static str,
    fs: &'static str,
    default_methods: &[&'static str],
    default_trials: u64,
) {
    let fs = match std::env::var("SNBUF_POWERCUT_FS") {
        Ok(only) if only != fs => return,
        _ => fs,
    };
    if std::env::var("SNBUF_POWERCUT_PROGRAMS").is_ok_and(|p| !p.split(',').any(|p| p == program)) {
        return;
    }
    let Some((tools, guest)) = rig(fs) else {
        return;
    };
    let trials = env_u64("SNBUF_POWERCUT_TRIALS", default_trials);
    let seed = env_u64("SNBUF_POWERCUT_SEED", 1);
    let methods: Vec<&'static str> = match std::env::var("SNBUF_POWERCUT_METHODS") {
        Ok(list) => ["direct", "uring", "buffered", "msync"]
            .into_iter()
            .filter(|m| list.split(',').any(|l| l == *m))
            .collect(),
        Err(_) => default_methods.to_vec(),
    };
    let mut failures = Vec::new();
    for method in methods {
        let mut tally = Tally::default();
        for k in 0..trials {
            // `record`'s trials keep their seeds of before; `serve`'s have their own, and are
            // all cut mid-recording (what its restart must recover).
            let stream = match program {
                "record" => format!("{fs}/{method}"),
                _ => format!("{fs}/{program}/{method}"),
            };
            let mut rng = snbuf_platform::rng::Rng::new(trial_seed(seed, &stream, k));
            let cut = match program {
                "record" => random_cut(k, &mut rng),
                _ => Cut::MidRecording {
                    delay_ms: rng.below(MID_RECORDING_SPAN_MS),
                },
            };
            let t = Trial {
                program,
                fs,
                method,
                links: LINKS,
                rate: RATE,
                fault: None,
                cut,
                label: format!("{program} {fs}/{method} trial {k} (seed {seed}, {cut:?})"),
            };
            run_trial(&tools, guest, &t, &mut tally);
        }
        println!(
            "{} [{}]",
            tally.line(&format!("power cuts ({program}, {fs}, {method})")),
            guest.accel
        );
        let mut line = tally.json();
        line["program"] = program.into();
        line["fs"] = fs.into();
        line["method"] = method.into();
        line["seed"] = seed.into();
        line["accel"] = guest.accel.into();
        common::keep_result_line("SNBUF_POWERCUT_RESULT", &line);
        if !tally.clean() {
            failures.push(tally.failures.clone());
        }
    }
    assert!(failures.is_empty(), "promises broken: {failures:#?}");
}

#[test]
fn power_cuts_on_ext4_lose_nothing_acknowledged() {
    power_cuts(
        "record",
        "ext4",
        &["direct", "uring", "buffered", "msync"],
        1,
    );
}

#[test]
fn power_cuts_on_xfs_lose_nothing_acknowledged() {
    power_cuts("record", "xfs", &["direct", "msync"], 1);
}

/// `serve` cut mid-burst, booted again, started again: the burst is recovered, sealed and
/// verified by the unit itself, with every chunk it acknowledged.
#[test]
fn serve_power_cuts_on_ext4_are_recovered_at_the_next_start() {
    power_cuts("serve", "ext4", &["direct"], 1);
}

/// A broken recorder must fail the trials: `fault` cut at `cut`, up to 4 trials, until `caught`
/// says the tally shows the breakage. `links` and `rate` as the breakage needs: a late flush is
/// only visible until the next flush of any file on the disk (a device flush empties the whole
/// cache), so it is tried with one link, slowly.
fn caught(
    fault: &'static str,
    (links, rate): (&'static str, &'static str),
    cut: Cut,
    caught: impl Fn(&Tally) -> bool,
) {
    let Some((tools, guest)) = rig("ext4") else {
        return;
    };
    let mut tally = Tally::default();
    for k in 0..4 {
        let t = Trial {
            program: "record",
            fs: "ext4",
            method: "direct",
            links,
            rate,
            fault: Some(fault),
            cut,
            label: format!("ext4/direct with {fault}, trial {k}"),
        };
        run_trial(&tools, guest, &t, &mut tally);
        if caught(&tally) {
            println!("{fault}: caught in trial {k}: {:?}", tally.failures);
            let mut line = tally.json();
            line["mutant"] = fault.into();
            line["links"] = links.into();
            line["rate"] = rate.into();
            line["cut"] = format!("{cut:?}").into();
            line["caught_in_trial"] = (k + 1).into();
            line["accel"] = guest.accel.into();
            common::keep_result_line("SNBUF_POWERCUT_RESULT", &line);
            return;
        }
    }
    panic!("{fault} was not caught: {}", tally.line("mutant"));
}

#[test]
fn the_trials_catch_a_recorder_that_never_flushes() {
    caught("lost-flush", (LINKS, RATE), Cut::OnAck { chunks: 6 }, |t| {
        t.acked_chunks_lost > 0
    });
}

#[test]
fn the_trials_catch_a_recorder_that_acknowledges_before_its_flush() {
    let slowly = ("1", "250KB/s");
    caught("late-flush", slowly, Cut::OnAck { chunks: 4 }, |t| {
        t.acked_chunks_lost > 0
    });
}

#[test]
fn the_trials_catch_a_recorder_that_skips_the_directory_fsync() {
    let cut = Cut::InPhase {
        phase: "sealed",
        delay_ms: 0,
    };
    caught("lost-dir-sync", (LINKS, RATE), cut, |t| t.sealed_broken > 0);
}
