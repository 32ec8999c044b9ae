//! A site power cut: one machine holds a whole site (three nats-servers from deploy/'s cluster
//! file, a Garage object store with its fsyncs on, two `snbuf serve` units that join the fleet and
//! export every burst to it, and an operator who sends a trigger every few seconds), all on one
//! data disk with a volatile write cache (vm.rs). At a seeded moment, 0 to 2.5 s after the
//! operator's first, second or third acknowledged trigger once both units are up (so mid-burst,
//! and mid-export of the bursts before), or in one boot of four after the first, 0 to 2.5 s
//! after its first acknowledged trigger whether the units are up or not, the plug is pulled; the machine boots again and everything starts by itself,
//! as systemd would (each program restarted 5 s after it stops), the operator too. After the last
//! cut the machine boots once more without the operator and runs until every burst is exported.
//! Then the host mounts the disk, serves the store's own files with a Garage of its own, downloads
//! every unit's bursts and runs `snbuf verify` on each.
//!
//! Every trigger acknowledged to the operator (`snbuf trigger --nats` exited 0) must end, for
//! each unit, in a burst in the store that `verify` passes and that answers it: whole, or cut
//! short only where the power went inside its window or the unit was not yet up when it was
//! sent; or, in those same cases only, reported missed in the unit's journal. Anything else (a
//! trigger the units never heard of, a burst recorded but not in the store, a burst in the store
//! that does not verify) is lost.
//!
//! `SNBUF_SITE_CUTS` (default 2), `SNBUF_SITE_SEED`, `SNBUF_SITE_SYNC` (`always`, deploy/'s
//! setting, or `default`: the same file without it, the server's 2-minute sync) and
//! `SNBUF_SITE_RESULT=FILE` (the tally appended as one JSON line); `bench/site_powercut.sh`
//! runs 20 cuts of each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::common::{self, trials::trial_seed, KillOnDrop};
use super::{env_u64, vm, LoopMount};

/// The units' windows: the trigger's own, short, so that a few fit between cuts.
const PRE: &str = "500ms";
const POST: Duration = Duration::from_secs(2);
/// How long after the power went inside a trigger's window, or before its unit was up, a window
/// cut short or missed is the cut's doing: its post-trigger part, and the writers' lag.
const EXCUSE_SLACK: Duration = Duration::from_secs(3);
/// From a boot to the operator's acknowledged triggers, and from the last boot to every burst
/// exported, on an emulated CPU. The last boot sends again every burst whose export record a cut
/// took (it is not synced: a lost one only costs a resend), 5 MB each: on a loaded host, with
/// other guests beside it, over a minute each.
const BOOT_TO_ACKS: Duration = Duration::from_secs(300);
const SETTLE_DEADLINE: Duration = Duration::from_secs(900);

/// The store's fixed key: the guest imports it, the host reads with it.
const KEY_ID: &str = "GK5a17e5c0ffee00d1e5e1f1a7";
const KEY_SECRET: &str = "5ec4e7a11ce0b0b0c0ffee5a1ade00d15ea5e5a1adbadc0ffee0ddba11f00d42";
const RPC_SECRET: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
/// The guest's ports (its own loopback).
const NATS_URLS: &str = "nats://127.0.0.1:4222,nats://127.0.0.1:4223,nats://127.0.0.1:4224";
const S3_PORT: u16 = 3900;
const UNITS: [&str; 2] = ["u1", "u2"];

/// The guest's site: started by /init once the data disk is mounted. `snbuf_boot` names this
/// boot's triggers; `snbuf_operator=1` runs the operator; `snbuf_sync` picks the servers' file.
/// Lines for the host: `@@ up UNIT` once a unit answers on its socket, `@@ acked ID` for each
/// trigger the cluster acknowledged, and without the operator every 3 s `@@ ls UNIT JSON` (its
/// bursts, exported or not) and `@@ fleet JSON` (each unit's heartbeat: its exporter's queue and
/// the read-backs it owes).
const SITE_SH: &str = r#"
ifconfig lo 127.0.0.1 up
# Logs on the data disk, read by the host after the last boot (what the cut left of them).
mkdir -p /data/log
echo "== boot $snbuf_boot" >> /data/log/site.log
export SNBUF_S3_ENDPOINT=http://127.0.0.1:3900 AWS_REGION=garage
export AWS_ACCESS_KEY_ID=@KEY_ID@ AWS_SECRET_ACCESS_KEY=@KEY_SECRET@
urls=@NATS_URLS@
# Each program as a service: started now, restarted 5 s after it stops (deploy/snbuf.service).
service() {
  name=$1; shift
  ( while true; do "$@" >> /data/log/$name.log 2>&1; echo "@@ stopped $name $?"; sleep 5; done ) &
}
for n in 1 2 3; do
  mkdir -p /data/nats/n$n
  service nats$n env SNBUF_NATS_NAME=n$n SNBUF_NATS_LISTEN=127.0.0.1:422$((n + 1)) \
    SNBUF_NATS_STORE=/data/nats/n$n SNBUF_NATS_CLUSTER_LISTEN=127.0.0.1:622$((n + 1)) \
    SNBUF_NATS_ROUTE1=nats-route://127.0.0.1:6222 SNBUF_NATS_ROUTE2=nats-route://127.0.0.1:6223 \
    SNBUF_NATS_ROUTE3=nats-route://127.0.0.1:6224 /bin/nats-server -c /etc/nats-$snbuf_sync.conf
done
mkdir -p /data/garage
service garage /bin/garage -c /etc/garage.toml server
if [ ! -e /data/garage/configured ]; then
  # The store's first boot: one node, the fixed key, the bucket (each step again after a cut).
  n=0
  until node=$(/bin/garage -c /etc/garage.toml status 2>/dev/null | awk '/NO ROLE ASSIGNED|dc1/ {print $1; exit}') && [ -n "$node" ]; do
    n=$((n + 1)); [ $n -gt 600 ] && { echo "@@ fail garage did not start: $(tail -n 3 /data/log/garage.log)"; break; }
    usleep 200000
  done
  g() { /bin/garage -c /etc/garage.toml "$@" >> /data/log/garage-setup.log 2>&1; }
  g layout assign -z dc1 -c 1G "$node"
  g layout apply --version 1
  g key import --yes -n snbuf @KEY_ID@ @KEY_SECRET@
  g bucket create snbuf
  g bucket allow --read --write --owner snbuf --key snbuf
  g bucket info snbuf && touch /data/garage/configured && sync
fi
for u in u1 u2; do
  service $u /bin/snbuf serve --output /data/$u --unit $u --nats $urls \
    --export-to s3://snbuf/$u --links 2 --rate-per-link 1MB/s --buffer 10s \
    --pre @PRE@ --post 2s --max-window 5s --chunk-frames 16
  ( until /bin/snbuf status --socket /data/$u/snbuf.sock > /dev/null 2>&1; do usleep 100000; done
    echo "@@ up $u" ) &
done
if [ "$snbuf_operator" = 1 ]; then
  # The first boot is the site's installation: the operator begins once both units have joined
  # the fleet (their journals exist). After that, everything starts at once, as at any boot.
  while [ "$snbuf_boot" = 0 ] && ! [ -e /data/u1/fleet-triggers.jsonl -a -e /data/u2/fleet-triggers.jsonl ]; do
    usleep 100000
  done
  k=0
  while true; do
    k=$((k + 1))
    if /bin/snbuf trigger --nats $urls --burst-id "b$snbuf_boot-t$k" > /run/trigger.log 2>&1; then
      echo "@@ acked b$snbuf_boot-t$k"
    fi
    cat /run/trigger.log >> /data/log/operator.log
    sleep 4
  done
fi
while true; do
  sleep 3
  for u in u1 u2; do echo "@@ ls $u $(/bin/snbuf ls /data/$u --json 2>/dev/null | tr -d '\n')"; done
  echo "@@ fleet $(/bin/snbuf fleet status --nats $urls --json 2>/dev/null | tr -d '\n')"
done
"#;

/// Garage's settings, its files under `root`, its S3 API on `s3` (the guest's and the host's).
/// LMDB with its fsyncs on: with SQLite (`metadata_fsync` on too) a cut a few seconds after the
/// units' read-back took objects the store had acknowledged and served back (a manifest, a whole
/// burst), found by this trial.
fn garage_toml(root: &str, s3: u16, rpc: u16, admin: u16) -> String {
    format!(
        "metadata_dir = \"{root}/meta\"\ndata_dir = \"{root}/data\"\ndb_engine = \"lmdb\"\n\
         metadata_fsync = true\ndata_fsync = true\nreplication_factor = 1\n\
         rpc_bind_addr = \"127.0.0.1:{rpc}\"\nrpc_public_addr = \"127.0.0.1:{rpc}\"\n\
         rpc_secret = \"{RPC_SECRET}\"\n[s3_api]\ns3_region = \"garage\"\n\
         api_bind_addr = \"127.0.0.1:{s3}\"\nroot_domain = \".s3.garage.localhost\"\n\
         [admin]\napi_bind_addr = \"127.0.0.1:{admin}\"\n"
    )
}

/// deploy/'s cluster file, and the same without `sync_interval: always`.
fn nats_confs() -> [(&'static str, String); 2] {
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/nats-cluster.conf"
    );
    let always = std::fs::read_to_string(file).unwrap();
    assert!(always.contains("sync_interval: always"), "{file}");
    let default = always
        .lines()
        .filter(|l| !l.trim_start().starts_with("sync_interval"))
        .collect::<Vec<_>>()
        .join("\n");
    [("always", always), ("default", default)]
}

fn garage_bin() -> Option<PathBuf> {
    let home_bin = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/garage"));
    common::installed_tool(
        home_bin
            .into_iter()
            .chain([PathBuf::from("/usr/local/bin/garage")]),
        "SNBUF_REQUIRE_GARAGE",
        "garage: cargo install garage --locked",
    )
}

/// The reasons a unit gives for a trigger it missed because it was down, or stopped as it took
/// it (crates/fleet: trigger_handling.rs, journal.rs).
const MISSED_DOWN: [&str; 2] = [
    "this unit was not running or not connected",
    "before its burst began",
];

/// A trigger the operator was told the cluster stored.
struct Acked {
    id: String,
    boot: u64,
    at: Instant,
}

/// What the host heard of one boot.
#[derive(Default)]
struct Boot {
    /// When each unit first answered on its socket.
    up: BTreeMap<String, Instant>,
    cut_at: Option<Instant>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Verdict {
    /// In the store, verified, its window whole.
    Whole,
    /// In the store, verified, cut short by the power going inside its window (or the unit not
    /// yet up).
    CutShort,
    /// Reported missed by the unit, which was down for it.
    MissedExcused,
    /// Anything else.
    Lost,
}

#[test]
fn a_site_power_cut_loses_no_acknowledged_trigger() {
    let Some(tools) = vm::Tools::find() else {
        return;
    };
    let (Some(garage), Some(nats)) = (garage_bin(), common::nats_server_bin()) else {
        return;
    };
    let sync = std::env::var("SNBUF_SITE_SYNC").unwrap_or_else(|_| "always".into());
    assert!(
        sync == "always" || sync == "default",
        "SNBUF_SITE_SYNC={sync}"
    );
    let cuts = env_u64("SNBUF_SITE_CUTS", 2);
    let seed = env_u64("SNBUF_SITE_SEED", 1);
    let mut extras = vec![
        vm::Extra::Program {
            from: garage.clone(),
            to: "/bin/garage",
        },
        vm::Extra::Program {
            from: nats,
            to: "/bin/nats-server",
        },
        vm::Extra::File {
            to: "/etc/garage.toml",
            text: garage_toml("/data/garage", S3_PORT, 3901, 3903),
        },
        vm::Extra::File {
            to: "/etc/site.sh",
            text: SITE_SH
                .replace("@KEY_ID@", KEY_ID)
                .replace("@KEY_SECRET@", KEY_SECRET)
                .replace("@NATS_URLS@", NATS_URLS)
                .replace("@PRE@", PRE),
        },
    ];
    for (name, text) in nats_confs() {
        let to = if name == "always" {
            "/etc/nats-always.conf"
        } else {
            "/etc/nats-default.conf"
        };
        extras.push(vm::Extra::File { to, text });
    }
    let machine = vm::Machine {
        memory_mib: 2048,
        cpus: 2,
    };
    let guest = vm::Guest::build(&tools, &extras, machine);
    let mut disk = vm::Disk::of_size("ext4", 2 << 30);
    let mut acked: Vec<Acked> = Vec::new();
    let mut boots: Vec<Boot> = Vec::new();
    let started = Instant::now();
    let mut early_cuts = 0u64;
    for k in 0..cuts {
        let mut rng = snbuf_platform::rng::Rng::new(trial_seed(seed, &format!("site/{sync}"), k));
        let mut acks_before_cut = 1 + rng.below(3) as usize;
        let delay = Duration::from_millis(rng.below(2500));
        // One boot in four after the first is cut as it starts: after its first acknowledged
        // trigger, whether or not the units are up yet (a trigger then may be only in the
        // stream: what the servers' sync_interval guards).
        let early = k > 0 && rng.below(4) == 0;
        if early {
            acks_before_cut = 1;
        }
        let boot_no = k.to_string();
        let params = [
            ("mode", "site"),
            ("fs", "ext4"),
            ("sync", sync.as_str()),
            ("boot", boot_no.as_str()),
            ("operator", "1"),
        ];
        let mut vm = guest.boot_ready(&tools, disk, &params);
        let mut boot = Boot::default();
        let mut seen = 0;
        let deadline = Instant::now() + BOOT_TO_ACKS;
        let mut cut_after: Option<Instant> = None;
        loop {
            let now = Instant::now();
            if cut_after.is_some_and(|c| now >= c) {
                break;
            }
            let wait = cut_after.unwrap_or(deadline).saturating_duration_since(now);
            assert!(
                now < deadline,
                "cut {k}: {seen} of {acks_before_cut} triggers acknowledged, units up {:?}, within \
                 {BOOT_TO_ACKS:?}\n{}",
                boot.up.keys().collect::<Vec<_>>(),
                vm.tails()
            );
            let Some((at, line)) = vm.next_line(wait.min(Duration::from_millis(200))) else {
                assert!(vm.alive(), "cut {k}: the guest stopped\n{}", vm.tails());
                continue;
            };
            hear(&line, at, k, &mut boot, &mut acked, &mut seen);
            assert!(
                !line.starts_with("@@ fail"),
                "cut {k}: {line}\n{}",
                vm.tails()
            );
            // Once every unit is up this boot (a unit that does not start fails the trial here,
            // but for a boot cut as it starts) and the operator has had its triggers
            // acknowledged.
            let units_up = early || boot.up.len() == UNITS.len();
            if seen >= acks_before_cut && units_up && cut_after.is_none() {
                cut_after = Some(at + delay);
            }
        }
        let (d, cut_at) = vm.cut();
        // Lines the host had received before the cut are promises too.
        while let Some((at, line)) = vm.next_line(Duration::ZERO) {
            if at <= cut_at {
                hear(&line, at, k, &mut boot, &mut acked, &mut seen);
            }
        }
        boot.cut_at = Some(cut_at);
        boots.push(boot);
        eprintln!(
            "site cut {k}: {seen} acknowledged this boot, cut {delay:?} after the \
             {acks_before_cut}th{}",
            if early { ", as it started" } else { "" }
        );
        early_cuts += early as u64;
        disk = d.expect("the site's disk");
    }
    let disk = settle(&tools, &guest, disk, &sync, cuts);
    let verdicts = check(&garage, &disk, &acked, &boots);
    let count = |v: Verdict| verdicts.values().filter(|(x, _)| *x == v).count();
    let failures: Vec<String> = verdicts
        .iter()
        .filter(|(_, (v, _))| *v == Verdict::Lost)
        .map(|((u, t), (_, why))| format!("{u} {t}: {why}"))
        .collect();
    let line = json!({
        "sync_interval": sync, "cuts": cuts, "cut_as_it_started": early_cuts, "seed": seed,
        "accel": guest.accel,
        "acked": acked.len(), "unit_triggers": verdicts.len(),
        "whole": count(Verdict::Whole), "cut_short": count(Verdict::CutShort),
        "missed_excused": count(Verdict::MissedExcused), "lost": count(Verdict::Lost),
        "failures": failures, "pass": failures.is_empty(),
        "seconds": started.elapsed().as_secs_f64(),
    });
    println!("site power cuts: {line}");
    common::keep_result_line("SNBUF_SITE_RESULT", &line);
    assert!(!acked.is_empty(), "no trigger was acknowledged");
    // Not everything excused: each unit recorded some window whole, and the store holds it.
    for unit in UNITS {
        assert!(
            verdicts
                .iter()
                .any(|((u, _), (v, _))| u == unit && *v == Verdict::Whole),
            "{unit} has no whole window in the store: {verdicts:#?}"
        );
    }
    if sync == "always" {
        assert!(
            failures.is_empty(),
            "acknowledged triggers lost: {failures:#?}"
        );
    }
}

/// Takes in one console line of boot `k`.
fn hear(
    line: &str,
    at: Instant,
    k: u64,
    boot: &mut Boot,
    acked: &mut Vec<Acked>,
    seen: &mut usize,
) {
    if let Some(id) = line.strip_prefix("@@ acked ") {
        acked.push(Acked {
            id: id.trim().to_string(),
            boot: k,
            at,
        });
        *seen += 1;
    } else if let Some(u) = line.strip_prefix("@@ up ") {
        boot.up.entry(u.trim().to_string()).or_insert(at);
    }
}

/// The last boot, without the operator: until both units list bursts, none recording and every
/// one exported, in two reports in a row. Returns the disk, cut.
fn settle(tools: &vm::Tools, guest: &vm::Guest, disk: vm::Disk, sync: &str, k: u64) -> vm::Disk {
    let boot_no = k.to_string();
    let params = [
        ("mode", "site"),
        ("fs", "ext4"),
        ("sync", sync),
        ("boot", boot_no.as_str()),
        ("operator", "0"),
    ];
    let mut vm = guest.boot_ready(tools, disk, &params);
    let deadline = Instant::now() + SETTLE_DEADLINE;
    let mut settled: BTreeMap<String, u32> = BTreeMap::new();
    let mut last: BTreeMap<String, String> = BTreeMap::new();
    // Whether each unit's exporter, as its heartbeat says, has nothing queued and no read-back
    // due (at its start it reads back what it exported in the last minutes, and sends again
    // what the store lost in the cut).
    let mut exporters_idle = false;
    while settled.len() < UNITS.len() || settled.values().any(|&n| n < 2) || !exporters_idle {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "not every burst exported within {SETTLE_DEADLINE:?}: {last:#?}\n{}",
            vm.tails()
        );
        let Some((_, line)) = vm.next_line(left.min(Duration::from_secs(1))) else {
            assert!(vm.alive(), "the last boot stopped\n{}", vm.tails());
            continue;
        };
        assert!(!line.starts_with("@@ fail"), "{line}\n{}", vm.tails());
        if let Some(fleet) = line.strip_prefix("@@ fleet ") {
            let units: Value = serde_json::from_str(fleet).unwrap_or(Value::Null);
            exporters_idle = UNITS.iter().all(|u| {
                units.as_array().into_iter().flatten().any(|x| {
                    let e = &x["status"]["export"];
                    x["status"]["unit"] == *u && e["queued"] == 0 && e["read_backs_due"] == 0
                })
            });
            last.insert("fleet".into(), fleet.to_string());
            continue;
        }
        let Some(rest) = line.strip_prefix("@@ ls ") else {
            continue;
        };
        let Some((unit, listing)) = rest.split_once(' ') else {
            continue;
        };
        let bursts: Value = serde_json::from_str(listing).unwrap_or(Value::Null);
        let done = bursts.as_array().is_some_and(|b| {
            !b.is_empty()
                && b.iter().all(|b| {
                    let exported = b["exported"].as_str().unwrap_or("");
                    b["state"] != "recording" && exported.starts_with("yes")
                })
        });
        let n = settled.entry(unit.to_string()).or_insert(0);
        *n = if done { *n + 1 } else { 0 };
        last.insert(unit.to_string(), listing.to_string());
    }
    let (disk, _) = vm.cut();
    disk.expect("the site's disk")
}

/// Every acknowledged trigger's verdict, per unit and trigger, with what was found.
fn check(
    garage: &Path,
    disk: &vm::Disk,
    acked: &[Acked],
    boots: &[Boot],
) -> BTreeMap<(String, String), (Verdict, String)> {
    let mounted = LoopMount::new(&disk.image, disk.fs);
    let logs = mounted.path().join("log");
    let store = HostStore::start(garage, &mounted.path().join("garage"));
    let copies = tempfile::tempdir().unwrap();
    let mut verdicts = BTreeMap::new();
    for unit in UNITS {
        let local = mounted.path().join(unit);
        let (answered, in_store) = store.download_and_verify(unit, &copies.path().join(unit));
        let journal =
            std::fs::read_to_string(local.join("fleet-triggers.jsonl")).unwrap_or_default();
        let missed: BTreeMap<String, String> = journal
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["outcome"] == "missed")
            .map(|l| {
                let id = l["trigger_id"].as_str().unwrap_or("").to_string();
                (id, l["reason"].as_str().unwrap_or("").to_string())
            })
            .collect();
        for t in acked {
            let boot = &boots[t.boot as usize];
            // The power went inside its window, or the unit was not up when it was sent.
            let excused = boot.cut_at.is_some_and(|c| c < t.at + POST + EXCUSE_SLACK)
                || boot.up.get(unit).is_none_or(|&up| up + EXCUSE_SLACK > t.at);
            let verdict = match (answered.get(&t.id), missed.get(&t.id)) {
                (Some((true, burst)), _) => (Verdict::Whole, format!("whole in {burst}")),
                (Some((false, burst)), _) if excused => {
                    (Verdict::CutShort, format!("cut short in {burst}"))
                }
                (Some((false, burst)), _) => (
                    Verdict::Lost,
                    format!("recorded with loss in {burst}, the power on"),
                ),
                // Missed because the unit was down for it, or stopped as it took it.
                (None, Some(why)) if excused && MISSED_DOWN.iter().any(|r| why.contains(r)) => {
                    (Verdict::MissedExcused, why.clone())
                }
                (None, Some(why)) => (Verdict::Lost, format!("missed while up: {why}")),
                (None, None) if local.join(&t.id).exists() => (
                    Verdict::Lost,
                    "recorded, not in the store verified".to_string(),
                ),
                (None, None) => (Verdict::Lost, "neither recorded nor said".to_string()),
            };
            if verdict.0 == Verdict::Lost {
                eprintln!(
                    "site: {unit} {}: {}\n{}",
                    t.id,
                    verdict.1,
                    diagnosis(
                        &logs,
                        (&local, &copies.path().join(unit)),
                        unit,
                        &t.id,
                        &in_store
                    )
                );
            }
            verdicts.insert((unit.to_string(), t.id.clone()), verdict);
        }
    }
    if verdicts.values().any(|(v, _)| *v == Verdict::Lost) {
        // The site's logs (what the cuts left of them) outlive the test, for whoever reads why.
        let keep = std::env::temp_dir().join(format!("snbuf-site-logs-{}", std::process::id()));
        let copied = Command::new("cp").arg("-r").arg(&logs).arg(&keep).status();
        let journals = UNITS.map(|u| mounted.path().join(u).join("fleet-triggers.jsonl"));
        for (u, j) in UNITS.iter().zip(journals) {
            let _ = std::fs::copy(j, keep.join(format!("{u}-journal.jsonl")));
        }
        eprintln!("site: the logs are kept in {} ({copied:?})", keep.display());
    }
    verdicts
}

/// What the site's disk says of trigger `id` at `unit`: its log lines and journal lines that
/// name it, the unit's bursts, and what the store holds.
fn diagnosis(
    logs: &Path,
    (local, store_copy): (&Path, &Path),
    unit: &str,
    id: &str,
    in_store: &[String],
) -> String {
    let naming = |path: &Path| -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(id) || l.starts_with("== boot"))
            .map(|l| format!("  {l}"))
            .collect()
    };
    let bursts: Vec<String> = std::fs::read_dir(local)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let verify = |dir: &Path| {
        let o = common::output_within(
            Command::new(env!("CARGO_BIN_EXE_snbuf"))
                .arg("verify")
                .arg(dir),
            Duration::from_secs(120),
        );
        String::from_utf8_lossy(&o.stdout).into_owned() + &common::stderr(&o)
    };
    let mut copies = String::new();
    for (name, dir) in [
        ("on the disk", local.join(id)),
        ("in the store", store_copy.join(id)),
    ] {
        if dir.exists() {
            copies += &format!("verify of its copy {name}:\n{}\n", verify(&dir));
        }
    }
    [
        copies,
        format!("{unit}'s log:"),
        naming(&logs.join(format!("{unit}.log"))).join("\n"),
        "its journal:".into(),
        naming(&local.join("fleet-triggers.jsonl")).join("\n"),
        format!("on its disk: {bursts:?}"),
        format!("in the store: {in_store:#?}"),
    ]
    .join("\n")
}

/// The site's store, served on the host from its own files on the mounted disk.
struct HostStore {
    _server: KillOnDrop,
    client: common::s3_client::S3Client,
    _dir: tempfile::TempDir,
}

impl HostStore {
    fn start(garage: &Path, files: &Path) -> HostStore {
        let dir = tempfile::tempdir().unwrap();
        let (s3_port, rpc, admin) = (
            common::free_port(),
            common::free_port(),
            common::free_port(),
        );
        let cfg = dir.path().join("garage.toml");
        std::fs::write(
            &cfg,
            garage_toml(files.to_str().unwrap(), s3_port, rpc, admin),
        )
        .unwrap();
        let server = Command::new(garage)
            .args(["-c", cfg.to_str().unwrap(), "server"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("garage.log")).unwrap())
            .spawn()
            .expect("garage starts");
        let client = common::s3_client::S3Client::new(
            &format!("http://127.0.0.1:{s3_port}"),
            KEY_ID,
            KEY_SECRET,
            "snbuf",
        );
        let store = HostStore {
            _server: KillOnDrop(server),
            client,
            _dir: dir,
        };
        // Until it answers a listing (it opens its database, then its API).
        let deadline = Instant::now() + Duration::from_secs(30);
        while store.list("").is_err() {
            assert!(
                Instant::now() < deadline,
                "the site's store does not answer on the host: {}",
                std::fs::read_to_string(store._dir.path().join("garage.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        store
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, String> {
        self.client.list(prefix)
    }

    /// Downloads every burst of `unit` into `into` and verifies each: for every trigger a valid
    /// burst answers, whether its window is whole there, and the burst.
    fn download_and_verify(&self, unit: &str, into: &Path) -> (Answered, Vec<String>) {
        let keys = self.list(&format!("{unit}/")).expect("the store lists");
        for key in &keys {
            let rel = &key[unit.len() + 1..];
            let to = into.join(rel);
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            // An error is no object: tried again (Garage answers 503 while it starts), then
            // fails the trial.
            let mut tries = 0;
            let body = loop {
                tries += 1;
                match self.client.get(key) {
                    Ok(body) => break body,
                    Err(e) if tries < 10 => {
                        eprintln!("site: {e}, again");
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    Err(e) => panic!("{e} ({tries} times)"),
                }
            };
            std::fs::write(&to, body).unwrap();
        }
        let mut answered = BTreeMap::new();
        let mut seen = Vec::new();
        for burst in std::fs::read_dir(into).into_iter().flatten().flatten() {
            let o = common::output_within(
                Command::new(env!("CARGO_BIN_EXE_snbuf"))
                    .args(["verify", "--json"])
                    .arg(burst.path()),
                Duration::from_secs(120),
            );
            let report: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
            let name = burst.file_name().to_string_lossy().into_owned();
            let triggers: Vec<String> = report["triggers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| format!("{} whole {}", t["trigger_id"], t["whole"]))
                .collect();
            seen.push(format!(
                "{name}: valid {}, {triggers:?}{}",
                report["valid"],
                if report["valid"] == true {
                    String::new()
                } else {
                    format!(" ({})", common::stderr(&o).trim())
                }
            ));
            if report["valid"] != true {
                continue;
            }
            for t in report["triggers"].as_array().into_iter().flatten() {
                let id = t["trigger_id"].as_str().unwrap_or("").to_string();
                let whole = t["whole"] == true;
                let best = answered.entry(id).or_insert((whole, name.clone()));
                if whole && !best.0 {
                    *best = (true, name.clone());
                }
            }
        }
        (answered, seen)
    }
}

/// For each trigger a valid burst in the store answers: whether its window is whole there, and
/// the burst.
type Answered = BTreeMap<String, (bool, String)>;
