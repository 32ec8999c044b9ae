//! Fault trials of the fleet, Jepsen-style: a 3-server NATS cluster (each server its own process
//! and store, started from deploy/nats-cluster.conf), N `snbuf serve` units with emulated links,
//! a trigger storm (`snbuf trigger --nats` every few seconds), and a seeded nemesis that, one
//! fault at a time, kills a server with SIGKILL and restarts it, pauses one (SIGSTOP/SIGCONT: a
//! partition as the client sees it), kills and restarts a unit, or restarts the whole cluster.
//! Meanwhile `snbuf fleet status` is timed. At the end every unit's bursts (its disk) and events
//! (the event stream) are checked against the triggers sent:
//! - lost: acknowledged by the cluster, and neither recorded nor reported missed by some unit;
//! - duplicates: a unit with two outcomes for one trigger (recorded twice, or recorded and
//!   missed, or missed twice);
//! - `fleet status` and `trigger --nats` each answer within 10 s.
//!
//! `cargo test` runs the CI-sized trial (3 servers, 4 units, ~1 minute, each fault kind at
//! least once). `bench/fleet_faults.sh TRIALS SEED` runs longer ones with more units through the
//! same code (SNBUF_FLEET_TRIALS, _UNITS, _SECONDS, _SEED) and keeps each trial's report
//! (SNBUF_FLEET_RESULT) for RELIABILITY.md.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::nats_cluster::Cluster;
use common::trials::trial_seed;
use common::{keep_result_line, output_within, wait_for_socket, KillOnDrop};
use serde_json::{json, Value};
use snbuf_platform::rng::Rng;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How long any one fleet command may take: the bound, checked on every call.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

struct Unit {
    id: String,
    out: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    proc: Option<KillOnDrop>,
}

impl Unit {
    fn start(&mut self, urls: &str) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
            .args(["serve", "--output"])
            .arg(&self.out)
            .arg("--socket")
            .arg(&self.socket)
            // A light unit: one emulated link, DUNE's 10 s buffer, short windows.
            .args([
                "--links",
                "1",
                "--rate-per-link",
                "1MB/s",
                "--buffer",
                "10s",
            ])
            .args(["--pre", "300ms", "--post", "300ms", "--method", "direct"])
            .args(["--nats", urls, "--unit", &self.id])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let _ = std::fs::remove_file(&self.socket);
        self.proc = Some(KillOnDrop(child));
        wait_for_socket(&self.socket);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillServer,
    PauseServer,
    KillUnit,
    RestartCluster,
}

const FAULTS: [Fault; 4] = [
    Fault::KillServer,
    Fault::PauseServer,
    Fault::KillUnit,
    Fault::RestartCluster,
];

/// One trigger as the storm sent it.
struct Sent {
    id: String,
    /// When it was sent, in seconds from the storm's start.
    at_s: f64,
    accepted: bool,
    seconds: f64,
    answer: String,
}

/// Runs `snbuf ARGS`, held to `ANSWER_WITHIN` (killed at 3x, so a hang fails instead of
/// stalling); returns whether it succeeded, its stdout, stderr and how long it took.
fn timed_snbuf(args: &[&str]) -> (bool, String, String, f64) {
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_snbuf"));
    cmd.args(args);
    let o = output_within(cmd, ANSWER_WITHIN * 3);
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        start.elapsed().as_secs_f64(),
    )
}

/// The fault kinds to draw from: all, or those SNBUF_FLEET_FAULTS names (comma separated,
/// e.g. "KillServer,PauseServer" for one server down at a time only).
fn fault_kinds() -> Vec<Fault> {
    match std::env::var("SNBUF_FLEET_FAULTS") {
        Ok(list) => FAULTS
            .into_iter()
            .filter(|f| list.split(',').any(|n| n.trim() == format!("{f:?}")))
            .collect(),
        Err(_) => FAULTS.to_vec(),
    }
}

/// The fault schedule: every kind once (in a seeded order), then seeded draws.
fn schedule(rng: &mut Rng, n: usize) -> Vec<Fault> {
    let all = fault_kinds();
    let mut kinds = all.clone();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.next_u64() as usize % (i + 1));
    }
    while kinds.len() < n {
        kinds.push(all[rng.next_u64() as usize % all.len()]);
    }
    kinds
}

/// One trial: a storm of `seconds` with `units` units; returns its report.
fn trial(k: u64, seed: u64, units: usize, seconds: u64, dir: &Path) -> Option<Value> {
    let mut rng = Rng::new(trial_seed(seed, "fleet", k));
    let mut cluster = Cluster::start(3, dir)?;
    let urls = cluster.urls();
    let mut fleet: Vec<Unit> = (0..units)
        .map(|u| Unit {
            id: format!("u{u}"),
            out: dir.join(format!("u{u}")),
            socket: dir.join(format!("u{u}.sock")),
            log: dir.join(format!("u{u}.log")),
            proc: None,
        })
        .collect();
    for u in &mut fleet {
        u.start(&urls);
    }
    // Every unit on the fleet and buffering before the first trigger.
    let up = Instant::now();
    loop {
        let (ok, out, err, _) = timed_snbuf(&["fleet", "status", "--nats", &urls, "--json"]);
        let v: Vec<Value> = if ok {
            serde_json::from_str(&out).unwrap()
        } else {
            vec![]
        };
        let ready = v
            .iter()
            .filter(|u| u["status"]["buffer_fill"].as_f64() > Some(0.1))
            .count();
        if ready == units {
            break;
        }
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "units never reported: {err}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let start = Instant::now();
    let storm = {
        let (stop, sent, urls) = (stop.clone(), sent.clone(), urls.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("t{k}-{n:04}");
                let at_s = start.elapsed().as_secs_f64();
                let (accepted, out, err, seconds) =
                    timed_snbuf(&["trigger", "--nats", &urls, "--burst-id", &id]);
                let answer = if accepted { out } else { err };
                sent.lock().unwrap().push(Sent {
                    id,
                    at_s,
                    accepted,
                    seconds,
                    answer: answer.trim().to_string(),
                });
                std::thread::sleep(Duration::from_millis(2500));
            }
        })
    };
    let status_times: Arc<Mutex<Vec<(f64, bool)>>> = Arc::default();
    let watcher = {
        let (stop, times, urls) = (stop.clone(), status_times.clone(), urls.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (ok, _, _, s) = timed_snbuf(&["fleet", "status", "--nats", &urls, "--json"]);
                times.lock().unwrap().push((s, ok));
                std::thread::sleep(Duration::from_millis(1500));
            }
        })
    };

    // The nemesis: one fault at a time, each held a few seconds, then healed, then quiet.
    let mut done: Vec<Value> = Vec::new();
    let mut heal_s_max = 0.0f64;
    let mut unhealed: Option<String> = None;
    let plan = schedule(&mut rng, 64);
    for fault in plan {
        if start.elapsed() >= Duration::from_secs(seconds) && done.len() >= fault_kinds().len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2000 + rng.next_u64() % 2000));
        let hold = Duration::from_millis(4000 + rng.next_u64() % 4000);
        let server = rng.next_u64() as usize % 3;
        let began_s = start.elapsed().as_secs_f64();
        let target = match fault {
            Fault::KillServer => {
                cluster.kill(server);
                std::thread::sleep(hold);
                cluster.restart(server);
                cluster.servers[server].name.clone()
            }
            Fault::PauseServer => {
                cluster.pause(server);
                std::thread::sleep(hold);
                cluster.resume(server);
                cluster.servers[server].name.clone()
            }
            Fault::KillUnit => {
                let u = &mut fleet[rng.next_u64() as usize % units];
                drop(u.proc.take());
                std::thread::sleep(hold / 2);
                u.start(&urls);
                u.id.clone()
            }
            Fault::RestartCluster => {
                for i in 0..3 {
                    cluster.kill(i);
                }
                std::thread::sleep(hold / 2);
                for i in 0..3 {
                    cluster.restart(i);
                }
                "all".into()
            }
        };
        // One fault at a time: the next waits until the cluster has healed.
        let healed = cluster.wait_healthy(Duration::from_secs(90));
        let heal_s = healed.as_ref().map_or(f64::NAN, |d| d.as_secs_f64());
        heal_s_max = heal_s_max.max(heal_s);
        done.push(json!({"fault": format!("{fault:?}"), "target": target,
            "held_s": hold.as_secs_f64(), "healed_after_s": heal_s,
            "began_s": began_s, "healed_s": start.elapsed().as_secs_f64()}));
        if let Err(e) = healed {
            // No second fault on a cluster that has not healed: the storm ends here, and the
            // report says so (the test fails on it).
            unhealed = Some(format!("after {fault:?} of {target}: {e}"));
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    storm.join().unwrap();
    watcher.join().unwrap();
    let storm_s = start.elapsed().as_secs_f64();

    // Settle: redeliveries (ack wait) and the last bursts sealed, then every unit's outcomes.
    let sent = std::mem::take(&mut *sent.lock().unwrap());
    let outcomes = settle(&fleet, &sent, &urls);
    for u in &mut fleet {
        drop(u.proc.take());
    }
    let report = check(&fleet, &sent, &outcomes, &done);
    let times = status_times.lock().unwrap();
    let longest_status = times.iter().map(|t| t.0).fold(0.0, f64::max);
    let longest_trigger = sent.iter().map(|s| s.seconds).fold(0.0, f64::max);
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for f in &done {
        *by_kind
            .entry(f["fault"].as_str().unwrap().into())
            .or_default() += 1;
    }
    let mut r = report;
    let o = r.as_object_mut().unwrap();
    o.insert("trial".into(), json!(k));
    o.insert("seed".into(), json!(seed));
    o.insert("servers".into(), json!(3));
    o.insert("nats_server".into(), json!(cluster.version()));
    o.insert("units".into(), json!(units));
    o.insert("storm_s".into(), json!(storm_s));
    o.insert("faults".into(), json!(by_kind));
    o.insert("fault_log".into(), json!(done));
    o.insert("longest_heal_s".into(), json!(heal_s_max));
    o.insert("not_healed_within_90_s".into(), json!(unhealed));
    o.insert("status_calls".into(), json!(times.len()));
    o.insert(
        "status_failed".into(),
        json!(times.iter().filter(|t| !t.1).count()),
    );
    o.insert("longest_status_s".into(), json!(longest_status));
    o.insert("longest_trigger_s".into(), json!(longest_trigger));
    Some(r)
}

/// Every unit's outcomes, once the fleet has settled: its burst directories for the trials'
/// triggers, and the `missed` events it published (trigger id -> reasons), read when both stop
/// changing (at most 60 s).
struct Outcomes {
    recorded: BTreeMap<String, BTreeSet<String>>,
    missed: BTreeMap<(String, String), Vec<String>>,
    unsealed: u64,
}

fn settle(fleet: &[Unit], sent: &[Sent], urls: &str) -> Outcomes {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = (usize::MAX, usize::MAX);
    loop {
        std::thread::sleep(Duration::from_secs(6));
        let o = read_outcomes(fleet, urls);
        let now = (
            o.recorded.values().map(BTreeSet::len).sum::<usize>(),
            o.missed.len(),
        );
        let all = now.0 + now.1 >= fleet.len() * sent.iter().filter(|s| s.accepted).count();
        if (now == last && all) || Instant::now() > deadline {
            return o;
        }
        last = now;
    }
}

fn read_outcomes(fleet: &[Unit], urls: &str) -> Outcomes {
    let mut recorded = BTreeMap::new();
    let mut unsealed = 0;
    for u in fleet {
        let mut ids = BTreeSet::new();
        for e in std::fs::read_dir(&u.out).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with('t') || !e.path().is_dir() {
                continue;
            }
            let state = std::fs::read_to_string(e.path().join("manifest.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Value>(&t).ok())
                .and_then(|m| m["state"].as_str().map(String::from));
            if state.as_deref() != Some("sealed") {
                unsealed += 1;
            }
            ids.insert(name);
        }
        recorded.insert(u.id.clone(), ids);
    }
    let mut missed: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let (ok, out, err, _) = timed_snbuf(&["fleet", "events", "--nats", urls, "--json"]);
    assert!(ok, "fleet events: {err}");
    let events: Vec<Value> = serde_json::from_str(&out).unwrap();
    for e in events.iter().filter(|e| e["event"] == "missed") {
        let key = (
            e["unit"].as_str().unwrap().to_string(),
            e["trigger_id"].as_str().unwrap_or("").to_string(),
        );
        let why = e["detail"]["reason"].as_str().unwrap_or("").to_string();
        missed.entry(key).or_default().push(why);
    }
    Outcomes {
        recorded,
        missed,
        unsealed,
    }
}

/// A missed trigger's reason, as a class for the report.
fn reason_class(why: &str) -> &'static str {
    if why.starts_with("delivered") {
        "window gone when delivered"
    } else if why.starts_with("refused") {
        "refused by the unit"
    } else if why.contains("no frame has arrived") {
        "no data yet (unit just started)"
    } else if why.contains("before its burst began") {
        "unit died before its burst began"
    } else {
        "other"
    }
}

/// The fault under way when a trigger was sent at `at_s` (or up to 5 s before: its delivery and
/// acknowledgement take that long), if any.
fn fault_at(faults: &[Value], at_s: f64) -> String {
    faults
        .iter()
        .find(|f| {
            let (began, healed) = (
                f["began_s"].as_f64().unwrap(),
                f["healed_s"].as_f64().unwrap(),
            );
            at_s >= began - 5.0 && at_s <= healed
        })
        .map_or("none".into(), |f| f["fault"].as_str().unwrap().into())
}

fn check(fleet: &[Unit], sent: &[Sent], o: &Outcomes, faults: &[Value]) -> Value {
    let mut lost = Vec::new();
    let mut lost_during: BTreeMap<String, u64> = BTreeMap::new();
    let mut duplicates = Vec::new();
    let mut recorded_by_all = 0;
    let mut unit_recorded = 0;
    let mut missed_by_reason: BTreeMap<&str, u64> = BTreeMap::new();
    let mut recorded_unaccepted = 0;
    for s in sent {
        let mut by_all = true;
        for u in fleet {
            let rec = o.recorded[&u.id].contains(&s.id);
            let miss = o.missed.get(&(u.id.clone(), s.id.clone()));
            let n = rec as usize + miss.map_or(0, Vec::len);
            if n > 1 {
                duplicates.push(format!(
                    "{} {}: recorded {rec}, missed {miss:?}",
                    u.id, s.id
                ));
            }
            if rec {
                unit_recorded += 1;
                if !s.accepted {
                    recorded_unaccepted += 1;
                }
            } else {
                by_all = false;
            }
            if let Some(m) = miss {
                for why in m {
                    *missed_by_reason.entry(reason_class(why)).or_default() += 1;
                }
            }
            if s.accepted && n == 0 {
                let during = fault_at(faults, s.at_s);
                lost.push(format!(
                    "{} {} (sent at {:.1} s, during {during})",
                    u.id, s.id, s.at_s
                ));
                *lost_during.entry(during).or_default() += 1;
            }
        }
        recorded_by_all += by_all as u64;
    }
    let accepted = sent.iter().filter(|s| s.accepted).count();
    let refused: Vec<&str> = sent
        .iter()
        .filter(|s| !s.accepted)
        .map(|s| s.answer.as_str())
        .collect();
    json!({
        "triggers_sent": sent.len(),
        "triggers_accepted": accepted,
        "triggers_not_accepted": refused.len(),
        "not_accepted_answers": refused,
        "recorded_by_every_unit": recorded_by_all,
        "unit_recorded": unit_recorded,
        "unit_recorded_not_accepted": recorded_unaccepted,
        "unit_missed": missed_by_reason.values().sum::<u64>(),
        "missed_by_reason": missed_by_reason,
        "unsealed_bursts": o.unsealed,
        "duplicates": duplicates.len(),
        "duplicate_list": duplicates,
        "lost": lost.len(),
        "lost_list": lost,
        "lost_during": lost_during,
        // The target: none lost while at most one server is down. A whole cluster
        // killed at once is beyond it: a replicated stream acknowledges a write before flushing
        // it (nats-server#7564).
        "lost_one_server_down_at_a_time": lost.len() as u64 - lost_during.get("RestartCluster").copied().unwrap_or(0),
    })
}

#[test]
fn a_fleet_loses_no_trigger_and_duplicates_none_while_servers_and_units_fail() {
    let trials = env_u64("SNBUF_FLEET_TRIALS", 1);
    let units = env_u64("SNBUF_FLEET_UNITS", 4) as usize;
    let seconds = env_u64("SNBUF_FLEET_SECONDS", 45);
    let seed = env_u64("SNBUF_FLEET_SEED", 20261125);
    // Every trial runs and is kept; the failures are told together at the end.
    let mut failures = Vec::new();
    for k in 0..trials {
        let dir = tempfile::tempdir().unwrap();
        let Some(r) = trial(k, seed, units, seconds, dir.path()) else {
            return; // no nats-server here, and not required
        };
        eprintln!("fleet faults: {}", serde_json::to_string(&r).unwrap());
        keep_result_line("SNBUF_FLEET_RESULT", &r);
        let broken = failures_of(&r);
        if !broken.is_empty() || r["lost"] != 0 {
            // The servers' and units' logs, stores and bursts, for the post-mortem.
            eprintln!("fleet faults: kept {}", dir.keep().display());
        }
        failures.extend(broken.into_iter().map(|f| format!("trial {k}: {f}")));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// What trial report `r` shows against the targets, one line each.
fn failures_of(r: &Value) -> Vec<String> {
    let mut f = Vec::new();
    if r["lost_one_server_down_at_a_time"] != 0 {
        f.push(format!("triggers lost: {}", r["lost_list"]));
    }
    if r["duplicates"] != 0 {
        f.push(format!("duplicates: {}", r["duplicate_list"]));
    }
    if !r["not_healed_within_90_s"].is_null() {
        f.push(format!(
            "the cluster did not heal: {}",
            r["not_healed_within_90_s"]
        ));
    }
    for key in ["longest_status_s", "longest_trigger_s"] {
        if r[key].as_f64().unwrap() >= ANSWER_WITHIN.as_secs_f64() {
            f.push(format!("{key} {} s", r[key]));
        }
    }
    for kind in fault_kinds() {
        if r["faults"][format!("{kind:?}")].as_u64() < Some(1) {
            f.push(format!("{kind:?} never ran"));
        }
    }
    if r["triggers_accepted"].as_u64() < Some(1) {
        f.push("no trigger was accepted".into());
    }
    f
}
