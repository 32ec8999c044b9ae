//! Fault trials of the fleet, Jepsen-style: a 3-server NATS cluster (each server its own process
//! and store, started from deploy/nats-cluster.conf), N `snbuf serve` units with emulated links
//! and DUNE's 10 s buffers, a trigger storm (`snbuf trigger --nats` every 2.5 s, every second
//! while a fault is held), `fleet status` every 1.5 s, and a seeded nemesis that, one fault at a
//! time, kills a server with SIGKILL and restarts it, pauses one (SIGSTOP/SIGCONT), partitions
//! one (network namespaces: cut off from the other servers, from some units and from the
//! operator), cuts a unit off from every server, kills and restarts a unit, or restarts the
//! whole cluster.
//!
//! At the end, for every trigger the cluster stored (acknowledged, or found in the stream though
//! its answer was lost) and every unit, one rule (`common::fleet_verdict`):
//! - recorded: the trigger's own window whole on disk, every frame of every link, as `snbuf
//!   verify` counts it; a valid burst with frames missing is "recorded with loss", a failure;
//! - excused only where nothing could have done better: the unit was down when the trigger was
//!   issued, or was killed while recording it and its restart recovered the burst valid, or
//!   every server was down when it was issued;
//! - anything else is lost; two outcomes for one trigger on one unit is a duplicate.
//!
//! Also measured, for every running unit and every trigger: how long after the cluster stored
//! it the unit decided it (its journal), per fault kind and per way the copy came (fast path,
//! JetStream, catch-up); a kind without a sample fails, as does any over 1 s. A unit cut off
//! from every server is not deaf by choice: its triggers must be whole once it heals, and at
//! the end every unit's durable consumer has nothing pending. Every `fleet status` and `trigger
//! --nats` call must answer within the operator's 8 s.
//!
//! `cargo test` runs the CI-sized trial (4 units, each fault kind at least once). Where network
//! namespaces cannot be made (not root) it runs on 127.0.0.1 without partitions, and says so.
//! `bench/fleet_faults.sh TRIALS SEED` runs longer ones through the same code (SNBUF_FLEET_TRIALS,
//! _UNITS, _SECONDS, _SEED, SNBUF_NATS_SERVER) and keeps each trial's report (SNBUF_FLEET_RESULT).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::fleet_verdict::{verdict, BurstSeen, UnitAt, Verdict};
use common::nats_cluster::Cluster;
use common::netns::TestNet;
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

/// How long any one fleet command may take: the bound promised to the operator, checked on
/// every call. A call still running past it is killed (a little later) and counted.
const ANSWER_WITHIN: Duration = snbuf_fleet::client::OPERATOR_ANSWER_WITHIN;
/// The longest a running unit may take to decide a trigger, from the moment the cluster stored
/// it, whenever some server is up and reachable.
const DEAF_AT_MOST_S: f64 = 1.0;
/// The units' latency buffer: DUNE's.
const BUFFER: &str = "10s";
/// A trigger's window reaches this far after it; a unit killed within it, plus the time to seal,
/// interrupted the recording of that trigger.
const RECORDING_S: f64 = 0.3 + 3.0;

struct Unit {
    id: String,
    out: PathBuf,
    socket: PathBuf,
    log: PathBuf,
    proc: Option<KillOnDrop>,
}

impl Unit {
    fn start(&mut self, urls: &str, net: Option<&TestNet>) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let bin = env!("CARGO_BIN_EXE_snbuf");
        let mut cmd = match net {
            Some(n) => n.command(&self.id, bin),
            None => Command::new(bin),
        };
        cmd.args(["serve", "--output"])
            .arg(&self.out)
            .arg("--socket")
            .arg(&self.socket)
            // A light unit: one emulated link, a short buffer, short windows.
            .args([
                "--links",
                "1",
                "--rate-per-link",
                "1MB/s",
                "--buffer",
                BUFFER,
            ])
            .args(["--pre", "300ms", "--post", "300ms", "--method", "direct"])
            .args(["--nats", urls, "--unit", &self.id])
            .stdout(Stdio::null())
            .stderr(log);
        let _ = std::fs::remove_file(&self.socket);
        self.proc = Some(KillOnDrop(cmd.spawn().unwrap()));
        wait_for_socket(&self.socket);
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    KillServer,
    PauseServer,
    PartitionServer,
    /// One unit cut off from every server (its network drops their packets) for the hold.
    CutOffUnit,
    KillUnit,
    RestartCluster,
}

const FAULTS: [Fault; 6] = [
    Fault::KillServer,
    Fault::PauseServer,
    Fault::PartitionServer,
    Fault::CutOffUnit,
    Fault::KillUnit,
    Fault::RestartCluster,
];

impl Fault {
    /// Whether it needs network namespaces.
    fn needs_net(self) -> bool {
        matches!(self, Fault::PartitionServer | Fault::CutOffUnit)
    }
}

/// Sets its flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One trigger as the storm sent it.
struct Sent {
    id: String,
    /// When it was sent, in seconds from the storm's start.
    at_s: f64,
    accepted: bool,
    seconds: f64,
    answer: String,
    /// The retry the sender printed, if it was run: whether the cluster took it, how long it
    /// took, and what it said.
    retry: Option<(bool, f64, String)>,
}

/// What `trigger --nats` says before the command that sends an unstored trigger again.
const RETRY_SAID: &str = "Send it again, safely (the same id is recorded once): ";

/// One `fleet status` call: when it began (s from the storm's start), how long it took, whether
/// it succeeded, and what it said on stderr.
type StatusCall = (f64, f64, bool, String);

/// Runs `snbuf ARGS`, killed a little past `ANSWER_WITHIN` (a hang fails instead of stalling);
/// returns whether it succeeded, its stdout, stderr and how long it took.
fn timed_snbuf(args: &[&str]) -> (bool, String, String, f64) {
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_snbuf"));
    cmd.args(args);
    let o = output_within(cmd, ANSWER_WITHIN + Duration::from_secs(2));
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        start.elapsed().as_secs_f64(),
    )
}

/// The fault kinds to draw from: all this machine can make (partitions need network
/// namespaces), or those SNBUF_FLEET_FAULTS names (comma separated).
fn fault_kinds(partitions: bool) -> Vec<Fault> {
    let all = FAULTS.into_iter().filter(|f| partitions || !f.needs_net());
    match std::env::var("SNBUF_FLEET_FAULTS") {
        Ok(list) => all
            .filter(|f| list.split(',').any(|n| n.trim() == format!("{f:?}")))
            .collect(),
        Err(_) => all.collect(),
    }
}

/// The fault schedule: every kind once (in a seeded order), then seeded draws.
fn schedule(rng: &mut Rng, all: &[Fault], n: usize) -> Vec<Fault> {
    let mut kinds = all.to_vec();
    for i in (1..kinds.len()).rev() {
        kinds.swap(i, rng.next_u64() as usize % (i + 1));
    }
    while kinds.len() < n {
        kinds.push(all[rng.next_u64() as usize % all.len()]);
    }
    kinds
}

/// The hosts of a trial: the servers and the units, each in its own network namespace where
/// this machine can make them (None: everything on 127.0.0.1).
fn hosts(units: usize) -> Option<TestNet> {
    let mut names: Vec<String> = (1..=3).map(|i| format!("n{i}")).collect();
    names.extend((0..units).map(|u| format!("u{u}")));
    TestNet::create(&names)
}

/// One trial: a storm of `seconds` with `units` units; returns its report.
///
/// One piece: the trial's timeline (setup, storm, nemesis, settle) shares its clock, its fleet
/// and the fault log the checks read.
fn trial(k: u64, seed: u64, units: usize, seconds: u64, dir: &Path) -> Option<Value> {
    let mut rng = Rng::new(trial_seed(seed, "fleet", k));
    let mut net = hosts(units);
    let servers: Vec<(String, Option<String>)> = (1..=3)
        .map(|i| match &net {
            Some(n) => {
                let h = n.host(&format!("n{i}"));
                (h.ip.clone(), Some(h.netns.clone()))
            }
            None => ("127.0.0.1".to_string(), None),
        })
        .collect();
    let mut cluster = Cluster::start_on(&servers, dir)?;
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
        u.start(&urls, net.as_ref());
    }
    wait_until_buffering(&urls, units);
    let kinds = fault_kinds(net.is_some());

    let stop = Arc::new(AtomicBool::new(false));
    // Whatever ends this function, a panic included, the storm and the watcher stop.
    let _stop_on_exit = StopOnDrop(stop.clone());
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    // While a fault is held the storm sends every second: every fault gets deaf-time samples.
    let holding = Arc::new(AtomicBool::new(false));
    let clock = TrialClock::now();
    let start = clock.start;
    let storm = {
        let (stop, sent, urls) = (stop.clone(), sent.clone(), urls.clone());
        let holding = holding.clone();
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("t{k}-{n:04}");
                let at_s = start.elapsed().as_secs_f64();
                let (accepted, out, err, seconds) =
                    timed_snbuf(&["trigger", "--nats", &urls, "--burst-id", &id]);
                let answer = if accepted { out } else { err };
                // Not stored, or not known to be: the operator runs the command the sender
                // printed (same id, same instant), once.
                let retry = (!accepted)
                    .then(|| answer.split(RETRY_SAID).nth(1).map(str::trim))
                    .flatten()
                    .map(|cmd| {
                        let words: Vec<&str> = cmd.split_whitespace().skip(1).collect();
                        let (ok, out, err, s) = timed_snbuf(&words);
                        (ok, s, if ok { out } else { err }.trim().to_string())
                    });
                sent.lock().unwrap().push(Sent {
                    id,
                    at_s,
                    accepted,
                    seconds,
                    answer: answer.trim().to_string(),
                    retry,
                });
                let pause_ms = if holding.load(Ordering::Relaxed) {
                    1000
                } else {
                    2500
                };
                std::thread::sleep(Duration::from_millis(pause_ms));
            }
        })
    };
    let status_calls: Arc<Mutex<Vec<StatusCall>>> = Arc::default();
    let watcher = {
        let (stop, calls, urls) = (stop.clone(), status_calls.clone(), urls.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let at_s = start.elapsed().as_secs_f64();
                let (ok, _, err, s) = timed_snbuf(&["fleet", "status", "--nats", &urls, "--json"]);
                calls
                    .lock()
                    .unwrap()
                    .push((at_s, s, ok, err.trim().to_string()));
                std::thread::sleep(Duration::from_millis(1500));
            }
        })
    };

    // The nemesis: one fault at a time, each held a few seconds, then healed, then quiet.
    let mut done: Vec<Value> = Vec::new();
    let mut heal_s_max = 0.0f64;
    let mut unhealed: Option<String> = None;
    for fault in schedule(&mut rng, &kinds, 64) {
        if start.elapsed() >= Duration::from_secs(seconds) && done.len() >= kinds.len() {
            break;
        }
        std::thread::sleep(Duration::from_millis(2000 + rng.next_u64() % 2000));
        let hold = Duration::from_millis(4000 + rng.next_u64() % 4000);
        let server = rng.next_u64() as usize % 3;
        let began_s = start.elapsed().as_secs_f64();
        let mut entry = json!({"fault": format!("{fault:?}"), "held_s": hold.as_secs_f64(),
            "began_s": began_s});
        holding.store(true, Ordering::Relaxed);
        let target = match fault {
            Fault::KillServer => {
                cluster.kill(server);
                std::thread::sleep(hold);
                cluster.restart(server);
                entry["server_accepts_s"] = json!(start.elapsed().as_secs_f64());
                cluster.servers[server].name.clone()
            }
            Fault::PauseServer => {
                cluster.pause(server);
                std::thread::sleep(hold);
                cluster.resume(server);
                cluster.servers[server].name.clone()
            }
            Fault::PartitionServer => {
                let net = net.as_mut().expect("partitions run only with a net");
                let name = cluster.servers[server].name.clone();
                // Cut off from the other servers, from some units (at least one, never all)
                // and from the operator's host.
                let mut cut: Vec<String> = cluster
                    .servers
                    .iter()
                    .filter(|s| s.name != name)
                    .map(|s| s.host.clone())
                    .collect();
                let n_units = 1 + rng.next_u64() as usize % (units - 1).max(1);
                let mut ids: Vec<usize> = (0..units).collect();
                for i in (1..ids.len()).rev() {
                    ids.swap(i, rng.next_u64() as usize % (i + 1));
                }
                let cut_units: Vec<String> =
                    ids[..n_units].iter().map(|&u| format!("u{u}")).collect();
                cut.extend(cut_units.iter().map(|u| net.host(u).ip.clone()));
                cut.push(net.gateway_ip());
                net.partition(&name, &cut);
                std::thread::sleep(hold);
                net.heal(&name);
                entry["cut_units"] = json!(cut_units);
                name
            }
            Fault::CutOffUnit => {
                let net = net.as_mut().expect("cut-offs run only with a net");
                let unit = format!("u{}", rng.next_u64() as usize % units);
                let server_ips: Vec<String> =
                    cluster.servers.iter().map(|s| s.host.clone()).collect();
                net.partition(&unit, &server_ips);
                entry["cut_s"] = json!(start.elapsed().as_secs_f64());
                std::thread::sleep(hold);
                net.heal(&unit);
                entry["heal_s"] = json!(start.elapsed().as_secs_f64());
                unit
            }
            Fault::KillUnit => {
                let u = &mut fleet[rng.next_u64() as usize % units];
                drop(u.proc.take());
                std::thread::sleep(hold / 2);
                u.start(&urls, net.as_ref());
                entry["unit_up_s"] = json!(start.elapsed().as_secs_f64());
                u.id.clone()
            }
            Fault::RestartCluster => {
                for i in 0..3 {
                    cluster.kill(i);
                }
                entry["servers_down_s"] = json!(start.elapsed().as_secs_f64());
                std::thread::sleep(hold / 2);
                for i in 0..3 {
                    cluster.restart(i);
                }
                // Every server accepts connections again: from here the normal rules apply.
                entry["servers_accept_s"] = json!(start.elapsed().as_secs_f64());
                "all".into()
            }
        };
        entry["target"] = json!(target);
        entry["ended_s"] = json!(start.elapsed().as_secs_f64());
        // One fault at a time: the next waits until the cluster has healed. The storm keeps
        // its pace until then: the healing is part of the fault.
        let healed = cluster.wait_healthy(Duration::from_secs(90));
        holding.store(false, Ordering::Relaxed);
        let heal_s = healed.as_ref().map_or(f64::NAN, |d| d.as_secs_f64());
        heal_s_max = heal_s_max.max(heal_s);
        entry["healed_after_s"] = json!(heal_s);
        entry["healed_s"] = json!(start.elapsed().as_secs_f64());
        done.push(entry);
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

    let sent = std::mem::take(&mut *sent.lock().unwrap());
    let stored = stored_triggers(&urls);
    let outcomes = settle(&fleet, &sent, &stored, &urls);
    let pending = consumers_pending(&urls, &fleet);
    for u in &mut fleet {
        drop(u.proc.take());
    }
    let mut r = check(&fleet, &sent, &stored, &outcomes, &done, &clock);
    let o = r.as_object_mut().unwrap();
    o.insert("consumers_pending".into(), json!(pending));
    o.insert(
        "fault_kinds".into(),
        json!(kinds.iter().map(|k| format!("{k:?}")).collect::<Vec<_>>()),
    );
    let calls = status_calls.lock().unwrap();
    let during_restart = |at_s: f64| fault_at(&done, at_s) == "RestartCluster";
    let mut by_kind: BTreeMap<String, u64> = BTreeMap::new();
    for f in &done {
        *by_kind
            .entry(f["fault"].as_str().unwrap().into())
            .or_default() += 1;
    }
    o.insert("trial".into(), json!(k));
    o.insert("seed".into(), json!(seed));
    o.insert("servers".into(), json!(3));
    o.insert("nats_server".into(), json!(cluster.version()));
    o.insert(
        "network".into(),
        json!(if net.is_some() {
            "namespaces"
        } else {
            "loopback"
        }),
    );
    o.insert("units".into(), json!(units));
    o.insert("buffer".into(), json!(BUFFER));
    o.insert("storm_s".into(), json!(storm_s));
    o.insert("faults".into(), json!(by_kind));
    o.insert("fault_log".into(), json!(done));
    o.insert("longest_heal_s".into(), json!(heal_s_max));
    o.insert("not_healed_within_90_s".into(), json!(unhealed));
    o.insert("status_calls".into(), json!(calls.len()));
    o.insert(
        "status_failed".into(),
        json!(calls.iter().filter(|c| !c.2).count()),
    );
    let failed: Vec<String> = calls
        .iter()
        .filter(|c| !c.2 && !during_restart(c.0))
        .map(|c| {
            format!(
                "at {:.1} s, {:.1} s, during {}: {}",
                c.0,
                c.1,
                fault_at(&done, c.0),
                c.3
            )
        })
        .collect();
    o.insert(
        "status_failed_outside_cluster_restart".into(),
        json!(failed.len()),
    );
    o.insert(
        "status_failures_outside_cluster_restart".into(),
        json!(failed),
    );
    let longest_status = calls.iter().map(|c| c.1).fold(0.0, f64::max);
    o.insert("longest_status_s".into(), json!(longest_status));
    let longest_trigger = sent
        .iter()
        .flat_map(|s| [Some(s.seconds), s.retry.as_ref().map(|r| r.1)])
        .flatten()
        .fold(0.0, f64::max);
    o.insert("longest_trigger_s".into(), json!(longest_trigger));
    // The servers stop before their namespaces go.
    drop(cluster);
    drop(net);
    Some(r)
}

/// Every unit on the fleet and buffering before the first trigger (at most 30 s).
fn wait_until_buffering(urls: &str, units: usize) {
    let up = Instant::now();
    loop {
        let (ok, out, err, _) = timed_snbuf(&["fleet", "status", "--nats", urls, "--json"]);
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
            return;
        }
        assert!(
            up.elapsed() < Duration::from_secs(30),
            "units never reported: {err}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The trial's clock: seconds from the storm's start, for instants the cluster and the units
/// stamp in Unix time (one machine, one clock).
struct TrialClock {
    start: Instant,
    start_unix_ns: u64,
}

impl TrialClock {
    fn now() -> TrialClock {
        TrialClock {
            start: Instant::now(),
            start_unix_ns: snbuf_quantity::now_unix_ns(),
        }
    }

    fn s(&self, unix_ns: u64) -> f64 {
        (unix_ns as i128 - self.start_unix_ns as i128) as f64 / 1e9
    }
}

/// A trigger the cluster stored: when its sender issued it, and when the cluster stored it (the
/// stream's own timestamp: when it was published, as far as the units can know).
#[derive(Clone, Copy, Debug)]
struct Stored {
    issued_unix_ns: u64,
    stored_unix_ns: u64,
}

/// Every trigger in the trigger stream (read straight from it, message by message): what the
/// cluster stored, whatever the sender was told.
fn stored_triggers(urls: &str) -> BTreeMap<String, Stored> {
    let read = async {
        let js = async_nats::jetstream::new(nats_client(urls).await);
        // A healed cluster may still be electing the stream's leader ("JetStream system
        // temporarily unavailable", 503): the whole stream is read again until it answers, within
        // the minute.
        loop {
            match read_trigger_stream(&js).await {
                Ok(ids) => break ids,
                Err(e) => {
                    eprintln!("the trigger stream, read again: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    };
    within_a_minute(read, "the trigger stream")
}

/// One reading of the whole trigger stream, or why it failed.
async fn read_trigger_stream(
    js: &async_nats::jetstream::Context,
) -> Result<BTreeMap<String, Stored>, String> {
    use async_nats::jetstream::stream::RawMessageErrorKind;
    let mut stream = js
        .get_stream("SNBUF_TRIGGERS")
        .await
        .map_err(|e| e.to_string())?;
    let last = stream
        .info()
        .await
        .map_err(|e| e.to_string())?
        .state
        .last_sequence;
    let mut ids = BTreeMap::new();
    for seq in 1..=last {
        match stream.get_raw_message(seq).await {
            Ok(m) => {
                let v: Value = serde_json::from_slice(&m.payload).unwrap_or(Value::Null);
                if let (Some(id), Some(issued)) =
                    (v["trigger_id"].as_str(), v["issued_unix_ns"].as_u64())
                {
                    let stored_unix_ns = m.time.unix_timestamp_nanos().max(0) as u64;
                    ids.insert(
                        id.to_string(),
                        Stored {
                            issued_unix_ns: issued,
                            stored_unix_ns,
                        },
                    );
                }
            }
            // Never stored under this sequence (a gap): nothing to read.
            Err(e) if e.kind() == RawMessageErrorKind::NoMessageFound => {}
            Err(e) => return Err(format!("trigger stream sequence {seq}: {e}")),
        }
    }
    Ok(ids)
}

/// Runs `read` of the healed cluster, at most a minute (far beyond what it takes).
fn within_a_minute<T>(read: impl std::future::Future<Output = T>, what: &str) -> T {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async { tokio::time::timeout(Duration::from_secs(60), read).await })
        .unwrap_or_else(|_| panic!("{what} could not be read within 60 s"))
}

async fn nats_client(urls: &str) -> async_nats::Client {
    let opts = async_nats::ConnectOptions::new().connection_timeout(Duration::from_secs(2));
    let addrs: Vec<async_nats::ServerAddr> = urls.split(',').map(|u| u.parse().unwrap()).collect();
    opts.connect(addrs).await.unwrap()
}

/// The units whose durable trigger consumer still has triggers to deliver or acknowledgements
/// outstanding, once the fleet has settled: a consumer that never came back after a fault.
fn consumers_pending(urls: &str, fleet: &[Unit]) -> Vec<String> {
    let read = async {
        let js = async_nats::jetstream::new(nats_client(urls).await);
        // As for the trigger stream: asked again while the healed cluster elects its leaders.
        loop {
            match read_consumers(&js, fleet).await {
                Ok(pending) => break pending,
                Err(e) => {
                    eprintln!("the consumers, read again: {e}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
            }
        }
    };
    within_a_minute(read, "the consumers")
}

/// JetStream's answer while a cluster has no leader for a stream yet: worth asking again.
fn temporarily_unavailable(e: &impl std::fmt::Display) -> bool {
    let e = e.to_string();
    e.contains("temporarily unavailable") || e.contains("10008")
}

/// One reading of every unit's consumer: those with work left; Err where JetStream could not
/// answer yet.
async fn read_consumers(
    js: &async_nats::jetstream::Context,
    fleet: &[Unit],
) -> Result<Vec<String>, String> {
    let stream = js
        .get_stream("SNBUF_TRIGGERS")
        .await
        .map_err(|e| e.to_string())?;
    let mut pending = Vec::new();
    for u in fleet {
        let name = format!("unit-{}", u.id);
        let mut c: async_nats::jetstream::consumer::PullConsumer =
            match stream.get_consumer(&name).await {
                Ok(c) => c,
                Err(e) if temporarily_unavailable(&e) => return Err(e.to_string()),
                Err(e) => {
                    pending.push(format!("{name}: {e}"));
                    continue;
                }
            };
        let info = c.info().await.map_err(|e| e.to_string())?;
        if info.num_pending > 0 || info.num_ack_pending > 0 {
            pending.push(format!(
                "{name}: {} pending, {} awaiting acknowledgement",
                info.num_pending, info.num_ack_pending
            ));
        }
    }
    Ok(pending)
}

/// How a unit decided a trigger, from its journal.
#[derive(Clone, Debug)]
struct Decided {
    at_unix_ns: u64,
    /// fast, jet_stream or catch_up.
    route: String,
}

/// What every unit did, once the fleet has settled.
struct Outcomes {
    /// (unit, trigger) -> the bursts on the unit's disk that name the trigger.
    bursts: BTreeMap<(String, String), Vec<BurstSeen>>,
    /// (unit, trigger) -> the reasons of its `missed` events.
    missed: BTreeMap<(String, String), Vec<String>>,
    /// (unit, trigger) -> when and how the unit decided it (its journal).
    decided: BTreeMap<(String, String), Decided>,
}

/// The outcomes, read when they stop changing and every stored trigger has one on every unit
/// (at most 90 s: redeliveries come within the acknowledgement wait).
fn settle(
    fleet: &[Unit],
    sent: &[Sent],
    stored: &BTreeMap<String, Stored>,
    urls: &str,
) -> Outcomes {
    let pairs: Vec<(String, String)> = sent
        .iter()
        .filter(|s| stored.contains_key(&s.id))
        .flat_map(|s| fleet.iter().map(|u| (u.id.clone(), s.id.clone())))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut last = usize::MAX;
    loop {
        std::thread::sleep(Duration::from_secs(5));
        let o = read_outcomes(fleet, urls, false);
        // Every (unit, trigger) with an outcome, and nothing new since the last look (a
        // redelivery, which is how a duplicate shows, comes within the acknowledgement wait).
        let with_outcome = pairs
            .iter()
            .filter(|p| o.bursts.contains_key(*p) || o.missed.contains_key(*p))
            .count();
        let all = o.bursts.values().map(Vec::len).sum::<usize>()
            + o.missed.values().map(Vec::len).sum::<usize>();
        if (all == last && with_outcome == pairs.len()) || Instant::now() > deadline {
            return read_outcomes(fleet, urls, true);
        }
        last = all;
    }
}

/// A burst directory as `snbuf verify --json` reads it (`verify`), or only its manifest's names:
/// (trigger id, what the burst holds of its window).
fn bursts_in(dir: &Path, verify: bool) -> Vec<(String, BurstSeen)> {
    let Ok(text) = std::fs::read_to_string(dir.join("manifest.json")) else {
        return vec![];
    };
    let m: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    let mut names: BTreeSet<String> = m["triggers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["trigger_id"].as_str().map(String::from))
        .collect();
    if let Some(id) = m["burst_id"].as_str() {
        names.insert(id.to_string());
    }
    let v: Value = if verify {
        // Exit 1 for a burst with problems, its report printed all the same.
        let o = common::snbuf(&["verify", dir.to_str().unwrap(), "--json"]);
        serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    let coverage = |id: &str| {
        v["triggers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| t["trigger_id"] == id)
            .cloned()
    };
    names
        .into_iter()
        .filter(|t| t.starts_with('t'))
        .map(|t| {
            let c = coverage(&t);
            let seen = BurstSeen {
                name: name.clone(),
                state: m["state"].as_str().unwrap_or("?").to_string(),
                valid: v["valid"] == true,
                whole: c.as_ref().and_then(|c| c["whole"].as_bool()),
                frames_missing: c.as_ref().map_or(0, |c| {
                    c["frames_in_window"].as_u64().unwrap_or(0)
                        - c["frames_present"].as_u64().unwrap_or(0)
                }),
            };
            (t, seen)
        })
        .collect()
}

/// Every unit's bursts on disk (verified with `snbuf verify` when `verify`), its journal, and
/// the `missed` events in the event stream.
fn read_outcomes(fleet: &[Unit], urls: &str, verify: bool) -> Outcomes {
    let mut bursts: BTreeMap<(String, String), Vec<BurstSeen>> = BTreeMap::new();
    let mut decided = BTreeMap::new();
    for u in fleet {
        for e in std::fs::read_dir(&u.out).into_iter().flatten().flatten() {
            for (t, seen) in bursts_in(&e.path(), verify) {
                bursts.entry((u.id.clone(), t)).or_default().push(seen);
            }
        }
        let journal =
            std::fs::read_to_string(u.out.join("fleet-triggers.jsonl")).unwrap_or_default();
        for line in journal.lines() {
            let l: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            if let (Some(id), Some(at)) = (l["trigger_id"].as_str(), l["at_unix_ns"].as_u64()) {
                if l["outcome"].is_string() {
                    let route = l["route"].as_str().unwrap_or("?").to_string();
                    decided.insert(
                        (u.id.clone(), id.to_string()),
                        Decided {
                            at_unix_ns: at,
                            route,
                        },
                    );
                }
            }
        }
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
        bursts,
        missed,
        decided,
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

/// The fault under way when a trigger was published at `at_s` (or up to 1 s before: a trigger
/// published just before a fault is delivered during it), if any.
fn fault_of(faults: &[Value], at_s: f64) -> Option<&Value> {
    faults.iter().find(|f| {
        let (began, healed) = (
            f["began_s"].as_f64().unwrap(),
            f["healed_s"].as_f64().unwrap(),
        );
        at_s >= began - 1.0 && at_s <= healed
    })
}

/// `fault_of`'s kind, or "none".
fn fault_at(faults: &[Value], at_s: f64) -> String {
    fault_of(faults, at_s).map_or("none".into(), |f| f["fault"].as_str().unwrap().into())
}

/// The kills of unit `unit`: (killed, up again) in seconds from the storm's start.
fn kills<'a>(faults: &'a [Value], unit: &'a str) -> impl Iterator<Item = (f64, f64)> + 'a {
    faults
        .iter()
        .filter(move |f| f["fault"] == "KillUnit" && f["target"] == unit)
        .map(|f| {
            (
                f["began_s"].as_f64().unwrap(),
                f["unit_up_s"].as_f64().unwrap(),
            )
        })
}

/// Whether unit `unit` was down when a trigger was issued at `issued_s`: from its kill until it
/// was buffering again (1 s after its socket appeared).
fn down_at(faults: &[Value], unit: &str, issued_s: f64) -> bool {
    kills(faults, unit).any(|(killed, up)| issued_s >= killed && issued_s <= up + 1.0)
}

/// Whether unit `unit` was killed while it recorded a trigger issued at `issued_s` (within its
/// window and the time to seal it).
fn killed_while_recording(faults: &[Value], unit: &str, issued_s: f64) -> bool {
    kills(faults, unit).any(|(killed, _)| killed > issued_s && killed <= issued_s + RECORDING_S)
}

/// Whether every server was down when a trigger was issued at `issued_s`: from the kills of a
/// whole-cluster restart until every server accepted connections again.
fn servers_down_at(faults: &[Value], issued_s: f64) -> bool {
    faults.iter().any(|f| {
        let (Some(down), Some(up)) = (f["servers_down_s"].as_f64(), f["servers_accept_s"].as_f64())
        else {
            return false;
        };
        issued_s >= down && issued_s <= up
    })
}

/// How long after its network heals a unit cut off from every server may take to be connected
/// again: a connect attempt in flight when it healed had its SYN dropped (resent after 1 s) and
/// gives up at the connect timeout (2 s); the next comes within 250 ms.
const RECONNECT_ALLOWANCE_S: f64 = 2.5;

/// How long before a unit's cut a trigger may have been stored and still be on its way to the
/// unit when its packets start being dropped (a trial saw one stored ~50 ms before).
const CUT_LEAD_S: f64 = 0.5;

/// The cut that held unit `unit` off every server when a trigger was published at `at_s`
/// (from just before it, until it could have reconnected): when it healed.
fn cut_off_at(faults: &[Value], unit: &str, at_s: f64) -> Option<f64> {
    faults
        .iter()
        .filter(|f| f["fault"] == "CutOffUnit" && f["target"] == unit)
        .find(|f| {
            at_s >= f["cut_s"].as_f64().unwrap() - CUT_LEAD_S
                && at_s <= f["heal_s"].as_f64().unwrap() + RECONNECT_ALLOWANCE_S
        })
        .map(|f| f["heal_s"].as_f64().unwrap())
}

/// Deaf times (s) per fault kind and per way the copy came.
type DeafSamples = BTreeMap<String, BTreeMap<String, Vec<f64>>>;

/// `{kind: {route: {n, p50_s, max_s}}}`.
fn deaf_summary(samples: &DeafSamples) -> Value {
    let mut out = serde_json::Map::new();
    for (kind, routes) in samples {
        let mut by_route = serde_json::Map::new();
        for (route, v) in routes {
            let mut v = v.clone();
            v.sort_by(f64::total_cmp);
            by_route.insert(
                route.clone(),
                json!({"n": v.len(), "p50_s": v[v.len() / 2], "max_s": v[v.len() - 1]}),
            );
        }
        out.insert(kind.clone(), Value::Object(by_route));
    }
    Value::Object(out)
}

/// One piece: every (trigger, unit) classified by one set of rules, the tallies they feed
/// sharing them.
fn check(
    fleet: &[Unit],
    sent: &[Sent],
    stored: &BTreeMap<String, Stored>,
    o: &Outcomes,
    faults: &[Value],
    clock: &TrialClock,
) -> Value {
    let mut lost = Vec::new();
    let mut with_loss = Vec::new();
    let mut lost_during: BTreeMap<String, u64> = BTreeMap::new();
    let mut excused: BTreeMap<&str, u64> = BTreeMap::new();
    let mut duplicates = Vec::new();
    let (mut recorded_by_all, mut unit_whole) = (0, 0);
    let mut missed_by_reason: BTreeMap<&str, u64> = BTreeMap::new();
    let mut deaf = DeafSamples::new();
    let mut cut_off_decided_after_heal_s = 0.0f64;
    let mut cut_off_whole = 0;
    let mut cut_off_routes: BTreeMap<String, u64> = BTreeMap::new();
    let mut not_sent = Vec::new();
    let mut no_journal = Vec::new();
    let mut lost_acked_before_restart = Vec::new();
    for s in sent {
        let Some(st) = stored.get(&s.id) else {
            // The cluster never stored it, and the sender said so: not sent. Only a whole
            // cluster down (or electing its leaders after) may cause that.
            let during = fault_at(faults, s.at_s);
            if during != "RestartCluster" {
                not_sent.push(format!(
                    "{} (at {:.1} s, during {during}): {}; retried: {:?}",
                    s.id, s.at_s, s.answer, s.retry
                ));
            }
            continue;
        };
        let (issued_s, published_s) = (clock.s(st.issued_unix_ns), clock.s(st.stored_unix_ns));
        let during = fault_at(faults, published_s);
        let servers_down = servers_down_at(faults, issued_s);
        // Acknowledged before a whole-cluster restart began: must be recorded after it.
        let acked_before_restart = fault_of(faults, s.at_s).is_some_and(|f| {
            f["fault"] == "RestartCluster"
                && s.accepted
                && s.at_s + s.seconds <= f["began_s"].as_f64().unwrap()
        });
        let mut by_all = true;
        for u in fleet {
            let key = (u.id.clone(), s.id.clone());
            let bursts = o.bursts.get(&key).map_or(&[][..], Vec::as_slice);
            let miss = o.missed.get(&key).map_or(&[][..], Vec::as_slice);
            let at = UnitAt {
                down: down_at(faults, &u.id, issued_s),
                killed_while_recording: killed_while_recording(faults, &u.id, issued_s),
            };
            if bursts.len() + miss.len() > 1 {
                duplicates.push(format!(
                    "{} {}: bursts {bursts:?}, missed {miss:?}",
                    u.id, s.id
                ));
            }
            for why in miss {
                *missed_by_reason.entry(reason_class(why)).or_default() += 1;
            }
            let cut_off_until = cut_off_at(faults, &u.id, published_s);
            // How long the unit took to decide it, from when the cluster stored it: a sample
            // wherever it could have heard it.
            match o.decided.get(&key) {
                _ if at.down || at.killed_while_recording => {}
                Some(d) => {
                    let after_s = d.at_unix_ns.saturating_sub(st.stored_unix_ns) as f64 / 1e9;
                    match cut_off_until {
                        Some(heal_s) => {
                            *cut_off_routes.entry(d.route.clone()).or_default() += 1;
                            let after_heal = clock.s(d.at_unix_ns) - heal_s;
                            cut_off_decided_after_heal_s =
                                cut_off_decided_after_heal_s.max(after_heal);
                        }
                        None => deaf
                            .entry(during.clone())
                            .or_default()
                            .entry(d.route.clone())
                            .or_default()
                            .push(after_s),
                    }
                }
                None => no_journal.push(format!("{} {}", u.id, s.id)),
            }
            let verdict = match verdict(bursts, miss, at) {
                // Issued while every server was down, stored later: its window may have left
                // the buffer by then, which is all this excuses.
                v if v.is_failure()
                    && servers_down
                    && bursts.is_empty()
                    && miss.iter().any(|w| w.starts_with("delivered")) =>
                {
                    Verdict::Excused(
                        "issued while every server was down; its window gone when stored",
                    )
                }
                v => v,
            };
            let said = |why: &str| {
                format!(
                    "{} {} (issued at {issued_s:.1} s, stored at {published_s:.1} s, during {during}): {why}",
                    u.id, s.id
                )
            };
            match &verdict {
                Verdict::Whole => {
                    unit_whole += 1;
                    cut_off_whole += cut_off_until.is_some() as u64;
                }
                Verdict::Excused(why) => {
                    by_all = false;
                    *excused.entry(why).or_default() += 1;
                }
                Verdict::WithLoss(why) | Verdict::Lost(why) => {
                    by_all = false;
                    if matches!(verdict, Verdict::WithLoss(_)) {
                        with_loss.push(said(why));
                    } else {
                        lost.push(said(why));
                    }
                    *lost_during.entry(during.clone()).or_default() += 1;
                    if acked_before_restart {
                        lost_acked_before_restart.push(format!("{} {}", u.id, s.id));
                    }
                }
            }
        }
        recorded_by_all += by_all as u64;
    }
    let accepted = sent.iter().filter(|s| s.accepted).count();
    json!({
        "triggers_sent": sent.len(),
        "triggers_accepted": accepted,
        "triggers_stored": sent.iter().filter(|s| stored.contains_key(&s.id)).count(),
        "stored_though_not_accepted": sent.iter().filter(|s| !s.accepted && stored.contains_key(&s.id)).count(),
        "retried": sent.iter().filter(|s| s.retry.is_some()).count(),
        "retried_and_accepted": sent.iter().filter(|s| s.retry.as_ref().is_some_and(|r| r.0)).count(),
        "not_accepted_answers": sent.iter().filter(|s| !s.accepted).map(|s| s.answer.as_str()).collect::<Vec<_>>(),
        "not_sent_outside_cluster_restart": not_sent,
        // Acknowledged to the sender, and not in the stream at the end: a write the cluster lost.
        "acknowledged_then_lost_by_cluster": sent.iter().filter(|s| s.accepted && !stored.contains_key(&s.id)).map(|s| s.id.as_str()).collect::<Vec<_>>(),
        "recorded_whole_by_every_unit": recorded_by_all,
        "unit_recorded_whole": unit_whole,
        "unit_excused": excused,
        "missed_by_reason": missed_by_reason,
        "duplicates": duplicates.len(),
        "duplicate_list": duplicates,
        "lost": lost.len(),
        "lost_list": lost,
        "recorded_with_loss": with_loss.len(),
        "recorded_with_loss_list": with_loss,
        "lost_during": lost_during,
        "deaf_s": deaf_summary(&deaf),
        "cut_off_recorded_whole": cut_off_whole,
        "cut_off_decided_after_heal_max_s": cut_off_decided_after_heal_s,
        "cut_off_decided_by": cut_off_routes,
        "decided_without_journal_line": no_journal,
        "lost_acknowledged_before_cluster_restart": lost_acked_before_restart,
    })
}

#[test]
fn a_fleet_loses_no_trigger_and_duplicates_none_while_servers_and_units_fail() {
    let trials = env_u64("SNBUF_FLEET_TRIALS", 1);
    let units = env_u64("SNBUF_FLEET_UNITS", 4) as usize;
    let seconds = env_u64("SNBUF_FLEET_SECONDS", 45);
    let seed = env_u64("SNBUF_FLEET_SEED", 20261126);
    // Every trial runs and is kept; the failures are told together at the end.
    let mut failures = Vec::new();
    for k in 0..trials {
        let dir = tempfile::tempdir().unwrap();
        // A trial that breaks off (a panic: a read that failed, a unit that never reported) is
        // kept too, as a failure: the kept trials are not only the ones that got to the end.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            trial(k, seed, units, seconds, dir.path())
        }));
        let mut r = match ran {
            Ok(Some(r)) => r,
            Ok(None) => return, // no nats-server here, and not required
            Err(panic) => {
                let why = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into());
                json!({"trial": k, "seed": seed, "units": units, "broke_off": why})
            }
        };
        // The verdict is kept with the figures: a kept trial says whether it passed.
        let broken = match r["broke_off"].as_str() {
            Some(why) => vec![format!("the trial broke off: {why}")],
            None => failures_of(&r),
        };
        r["pass"] = json!(broken.is_empty());
        r["failures"] = json!(broken);
        eprintln!("fleet faults: {}", serde_json::to_string(&r).unwrap());
        keep_result_line("SNBUF_FLEET_RESULT", &r);
        if !broken.is_empty() {
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
    let list = |key: &str| r[key].as_array().cloned().unwrap_or_default();
    for (key, what) in [
        ("lost_list", "triggers lost"),
        (
            "recorded_with_loss_list",
            "recorded with frames of the window missing",
        ),
        ("duplicate_list", "duplicates"),
        (
            "not_sent_outside_cluster_restart",
            "not stored with a server up",
        ),
        (
            "acknowledged_then_lost_by_cluster",
            "acknowledged, then not in the stream",
        ),
        (
            "decided_without_journal_line",
            "decided by a running unit with no journal line",
        ),
        (
            "lost_acknowledged_before_cluster_restart",
            "acknowledged before the cluster restarted, then lost",
        ),
        (
            "consumers_pending",
            "durable consumers with triggers pending at the end",
        ),
    ] {
        let l = list(key);
        if !l.is_empty() {
            f.push(format!("{what}: {l:?}"));
        }
    }
    if !r["not_healed_within_90_s"].is_null() {
        f.push(format!(
            "the cluster did not heal: {}",
            r["not_healed_within_90_s"]
        ));
    }
    for key in ["longest_status_s", "longest_trigger_s"] {
        if r[key].as_f64().unwrap() > ANSWER_WITHIN.as_secs_f64() {
            f.push(format!("{key} {} s", r[key]));
        }
    }
    // A `fleet status` that failed (in bound) while one server was down is counted and kept,
    // not failed on: it reads from JetStream, whose streams can be without a leader for a few
    // seconds after back-to-back faults (RELIABILITY.md).
    let kinds: Vec<String> = list("fault_kinds")
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    for kind in &kinds {
        if r["faults"][kind].as_u64() < Some(1) {
            f.push(format!("{kind} never ran"));
        }
    }
    // Deaf: decided within 1 s of being stored, whenever some server was up and reachable; a
    // fault kind with no sample is a trial that measured nothing there.
    let deaf = &r["deaf_s"];
    // With one unit, a fault of that unit leaves no running unit to sample.
    let sampled =
        |kind: &str| r["units"].as_u64() > Some(1) || !matches!(kind, "KillUnit" | "CutOffUnit");
    for kind in kinds.iter().map(String::as_str).chain(["none"]) {
        let routes = deaf[kind].as_object().cloned().unwrap_or_default();
        if sampled(kind)
            && routes
                .values()
                .map(|v| v["n"].as_u64().unwrap())
                .sum::<u64>()
                == 0
        {
            f.push(format!("no deaf-time sample during {kind}"));
        }
        for (route, v) in &routes {
            let max = v["max_s"].as_f64().unwrap();
            if max > DEAF_AT_MOST_S {
                f.push(format!(
                    "a running unit decided a trigger {max:.2} s after it was stored, during {kind}, by {route}"
                ));
            }
        }
    }
    if kinds.iter().any(|k| k == "CutOffUnit") && r["cut_off_recorded_whole"].as_u64() < Some(1) {
        f.push("no trigger published during a unit's cut-off was recorded whole".into());
    }
    if r["triggers_accepted"].as_u64() < Some(1) {
        f.push("no trigger was accepted".into());
    }
    f
}

/// The verdict's rules: valid is not whole, and an excuse needs a unit that was down or killed.
#[test]
fn valid_is_not_whole_and_excuses_need_a_reason() {
    let burst = |valid: bool, whole: Option<bool>, state: &str| BurstSeen {
        name: "b".into(),
        state: state.into(),
        valid,
        whole,
        frames_missing: if whole == Some(true) { 0 } else { 7 },
    };
    let up = UnitAt::default();
    let down = UnitAt {
        down: true,
        ..UnitAt::default()
    };
    let killed = UnitAt {
        killed_while_recording: true,
        ..UnitAt::default()
    };
    assert_eq!(
        verdict(&[burst(true, Some(true), "sealed")], &[], up),
        Verdict::Whole
    );
    assert!(verdict(&[burst(true, Some(false), "sealed")], &[], up).is_failure());
    assert!(verdict(&[burst(false, Some(false), "failed")], &[], up).is_failure());
    assert!(verdict(&[], &["refused: busy".into()], up).is_failure());
    assert!(verdict(&[], &[], up).is_failure());
    assert!(!verdict(&[], &["delivered late".into()], down).is_failure());
    assert!(
        verdict(&[], &[], down).is_failure(),
        "a down unit still says missed"
    );
    assert!(!verdict(&[burst(true, Some(false), "recovered")], &[], killed).is_failure());
    assert!(
        verdict(&[burst(true, Some(false), "sealed")], &[], killed).is_failure(),
        "sealed before the kill: not whole is a loss"
    );
    assert!(verdict(&[burst(false, None, "recording")], &[], killed).is_failure());
}
