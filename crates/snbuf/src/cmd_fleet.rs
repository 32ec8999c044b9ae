//! `snbuf fleet status|events`, `snbuf trigger --nats`, and the NATS side of `snbuf serve`:
//! the command-line face of `snbuf_fleet`.

use std::time::Duration;

use snbuf_fleet::schema::SCHEMA;
use snbuf_fleet::TriggerMessage;
use snbuf_quantity::now_unix_ns;

use crate::cli::{
    FleetBenchArgs, FleetCommand, FleetReadArgs, FleetSetupArgs, FleetStatusArgs, TriggerArgs,
};
use crate::exit::{usage, Failure};
use crate::fleet_args::nats_options;
use snbuf_console::Table;
use snbuf_live::fleet_rows;

pub fn run(cmd: FleetCommand) -> anyhow::Result<()> {
    match cmd {
        FleetCommand::Status(args) => status(&args),
        FleetCommand::Events(args) => events(&args),
        FleetCommand::Bench(args) => bench(&args),
        FleetCommand::Setup(args) => setup(&args),
        FleetCommand::Keys { dir } => keys(&dir),
    }
}

/// `snbuf fleet keys DIR`: a user NKey per role, and the public keys for the servers.
fn keys(dir: &std::path::Path) -> anyhow::Result<()> {
    let k = snbuf_fleet::roles::keys(dir)
        .map_err(|e| anyhow::Error::new(Failure(format!("{}: {e}", dir.display()))))?;
    for s in &k.seeds {
        println!("{}", s.display());
    }
    println!(
        "{}  (public keys: the servers' environment for deploy/nats-secure.conf)",
        k.public_env.display()
    );
    Ok(())
}

fn fleet_error(e: snbuf_fleet::FleetError) -> anyhow::Error {
    anyhow::Error::new(Failure(e.to_string()))
}

fn status(status_args: &FleetStatusArgs) -> anyhow::Result<()> {
    let args = &status_args.read;
    let opts = nats_options(&args.nats, &args.nats_auth)?;
    if status_args.watch && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return snbuf_live::fleet_status(&opts);
    }
    let units = snbuf_fleet::fleet_status(&opts).map_err(fleet_error)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&units)?);
        return Ok(());
    }
    if units.is_empty() {
        println!("no unit has reported to {} yet", args.nats);
        return Ok(());
    }
    let mut t = Table::new(&fleet_rows::HEADER);
    for u in &units {
        t.row(fleet_rows::unit_cells(u));
    }
    print!("{}", t.render());
    let missing = units.iter().filter(|u| u.missing).count();
    if missing > 0 {
        println!("{missing} unit(s) stopped reporting (no heartbeat for 3 s)");
    }
    Ok(())
}

fn events(args: &FleetReadArgs) -> anyhow::Result<()> {
    let opts = nats_options(&args.nats, &args.nats_auth)?;
    let events = snbuf_fleet::recent_events(&opts, 10_000, Duration::from_millis(500))
        .map_err(fleet_error)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&events)?);
        return Ok(());
    }
    for e in &events {
        println!("{}", e.line());
    }
    Ok(())
}

fn bench(args: &FleetBenchArgs) -> anyhow::Result<()> {
    let opts = nats_options(&args.nats, &args.nats_auth)?;
    eprintln!(
        "snbuf fleet bench: {} units, {} triggers every {:?}, on {}",
        args.units, args.triggers, args.interval, args.nats
    );
    let r = snbuf_fleet::delivery_bench::run(
        &opts,
        args.units as usize,
        args.triggers as usize,
        args.interval,
    )
    .map_err(fleet_error)?;
    println!(
        "trigger delivery to {} units, {} triggers: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (mean {:.2} ms); {} of {} deliveries",
        r.units,
        r.triggers,
        r.p50_ms,
        r.p99_ms,
        r.max_ms,
        r.mean_ms,
        r.delivered,
        r.units * r.triggers
    );
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&r)? + "\n")?;
        eprintln!("wrote {}", path.display());
    }
    if r.delivered < (r.units * r.triggers) as u64 {
        return Err(anyhow::Error::new(Failure(format!(
            "{} deliveries were lost",
            (r.units * r.triggers) as u64 - r.delivered
        ))));
    }
    Ok(())
}

/// `snbuf trigger --nats`: one trigger for every unit.
pub fn trigger(args: &TriggerArgs, url: &str) -> anyhow::Result<()> {
    if args.wait {
        return Err(usage(
            "--wait works with --socket (one server); with --nats, watch `snbuf fleet status`",
        ));
    }
    let opts = nats_options(url, &args.nats_auth)?;
    let now = now_unix_ns();
    let (at_unix_ns, at_ticks) = match args.at.as_str() {
        "now" => (Some(now), None),
        // A wall-clock instant: what a retry of a trigger sent for `now` gives, to keep its window.
        t if t.starts_with("unix:") => (
            Some(t["unix:".len()..].parse::<u64>().map_err(|_| {
                usage(format!(
                    "--at '{t}': expected unix:NANOSECONDS since the Unix epoch"
                ))
            })?),
            None,
        ),
        t => (
            None,
            Some(t.parse::<u64>().map_err(|_| {
                usage(format!(
                    "--at '{t}': expected `now` or a timestamp in ticks"
                ))
            })?),
        ),
    };
    let trigger_id = match &args.burst_id {
        Some(id) => {
            snbuf_burst::check_burst_id(id).map_err(|e| usage(format!("--burst-id: {e}")))?;
            id.clone()
        }
        None => format!("trigger-{now}"),
    };
    let t = TriggerMessage {
        schema: SCHEMA,
        trigger_id: trigger_id.clone(),
        at_unix_ns,
        at_ticks,
        pre_s: args.pre.map(|d| d.as_secs_f64()),
        post_s: args.post.map(|d| d.as_secs_f64()),
        issued_unix_ns: now,
    };
    let accepted = match snbuf_fleet::broadcast_trigger(&opts, &t) {
        Ok(a) => a,
        Err(not) => return Err(not_acknowledged(&t, url, args, not)),
    };
    if accepted.found_by_lookup {
        println!(
            "accepted: trigger {} is in the fleet's trigger stream (sequence {}, read via server {}): its acknowledgement was lost, the trigger was not; every unit records it once or reports it missed",
            accepted.trigger_id, accepted.stream_sequence, accepted.server
        );
        return Ok(());
    }
    println!(
        "accepted: trigger {} stored by the fleet's NATS via server {} (stream sequence {}, {} attempt(s){}); every unit records it once or reports it missed",
        accepted.trigger_id,
        accepted.server,
        accepted.stream_sequence,
        accepted.attempts,
        if accepted.duplicate {
            "; an earlier attempt had stored it: kept once"
        } else {
            ""
        }
    );
    Ok(())
}

/// A trigger whose publish was not acknowledged: what its look-up in the stream found, and the
/// command that sends it again safely (same id, same window: units record it once).
fn not_acknowledged(
    t: &TriggerMessage,
    url: &str,
    args: &TriggerArgs,
    not: snbuf_fleet::NotAcknowledged,
) -> anyhow::Error {
    let url = url
        .split(',')
        .map(snbuf_fleet::connect::without_password)
        .collect::<Vec<_>>()
        .join(",");
    let mut retry = format!(
        "snbuf trigger --nats {url} --burst-id {} --at {}",
        t.trigger_id,
        match (t.at_ticks, t.at_unix_ns) {
            (Some(ticks), _) => ticks.to_string(),
            (None, Some(ns)) => format!("unix:{ns}"),
            (None, None) => "now".into(),
        }
    );
    for (flag, v) in [("--pre", args.pre), ("--post", args.post)] {
        if let Some(d) = v {
            retry += &format!(" {flag} {}s", d.as_secs_f64());
        }
    }
    for (flag, v) in [
        ("--nats-creds", &args.nats_auth.nats_creds),
        ("--nats-nkey", &args.nats_auth.nats_nkey),
        ("--nats-ca", &args.nats_auth.nats_ca),
    ] {
        if let Some(p) = v {
            retry += &format!(" {flag} {}", p.display());
        }
    }
    let what = match &not.lookup {
        snbuf_fleet::TriggerLookup::NotStored => format!(
            "trigger {} is NOT stored: the fleet's trigger stream does not hold it",
            t.trigger_id
        ),
        snbuf_fleet::TriggerLookup::Unknown(why) => format!(
            "trigger {}: UNKNOWN whether it was stored ({why})",
            t.trigger_id
        ),
        snbuf_fleet::TriggerLookup::Stored { .. } => unreachable!("a stored trigger is accepted"),
    };
    let error = not.error.to_string();
    if error.contains(snbuf_fleet::connect::REFUSED) {
        // Sending it again with the same credentials would be refused again.
        return anyhow::Error::new(Failure(format!("{what}; {error}")));
    }
    anyhow::Error::new(Failure(format!(
        "{what}; {error}. Send it again, safely (the same id is recorded once): {retry}"
    )))
}

/// `snbuf fleet setup`: the fleet's streams created, or changed to the settings given.
fn setup(args: &FleetSetupArgs) -> anyhow::Result<()> {
    let opts = nats_options(&args.nats, &args.nats_auth)?;
    for line in snbuf_fleet::client::setup_streams(&opts).map_err(fleet_error)? {
        println!("{line}");
    }
    Ok(())
}
