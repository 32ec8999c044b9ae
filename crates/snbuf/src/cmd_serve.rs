//! `snbuf serve`, `snbuf trigger`, `snbuf status`: a unit that records on demand, and its clients.

use std::time::{Duration, Instant};

use snbuf_quantity::{Bytes, Rate};
use snbuf_service::{policy, Service, ServiceConfig};
use snbuf_unit::protocol::{At, Request, TriggerReply, TriggerRequest, UnitStatus};
use snbuf_unit::server::control::ControlError;

use crate::cli::{ServeArgs, StatusArgs, TriggerArgs};
use crate::exit::{usage, Failure};

/// Parses `serve`'s options into a service, checked before anything starts (a bad fleet or
/// export option must not leave a half-started unit), and runs it.
pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    crate::logging::init(args.log_format);
    snbuf_platform::memory::keep_large_allocations_off_the_heap();
    let fleet = match args.nats.as_ref() {
        Some(servers) => Some((
            crate::fleet_args::nats_options(servers, &args.nats_auth)?,
            crate::fleet_args::unit_id(args.unit.options.unit.as_deref())?,
        )),
        None => None,
    };
    if let Some(socket) = &args.socket {
        crate::args::check_parent_dir("--socket", socket)?;
    }
    let export = match &args.export_to {
        Some(url) => Some(crate::export_setup::options(
            url,
            &args.s3.clone().unwrap_or_default(),
            args.export_rate.as_deref(),
            policy::EXPORT_PART_BYTES,
            args.delete_after_verify,
            args.export_codec.unwrap_or_default(),
        )?),
        None if args.export_rate.is_some()
            || args.delete_after_verify
            || args.export_codec.is_some() =>
        {
            return Err(usage(
                "--export-rate, --export-codec and --delete-after-verify need --export-to",
            ));
        }
        None => None,
    };
    let (mut unit, reasons) = crate::unit_config::config_from_args(&args.unit, None)?;
    unit.burst_id = policy::burst_prefix(args.unit.options.burst_id.as_deref(), &unit.burst_id);
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(|| unit.output_dir.join("snbuf.sock"));
    let drain_timeout = args
        .drain_timeout
        .unwrap_or_else(|| policy::default_drain_timeout(&unit));
    let service = Service::start(ServiceConfig {
        unit,
        reasons,
        socket,
        metrics: args.metrics,
        export,
        fleet,
        drain_timeout,
    })
    .map_err(|e| {
        if e.is_usage() {
            usage(e.to_string())
        } else {
            anyhow::Error::new(e)
        }
    })?;
    // A unit outlives its terminal: once stderr is gone (closed pipe, logged-out session), log
    // lines are dropped rather than ending the recorder (logging::QuietStderr).
    service.run();
    Ok(())
}

fn ask<T: serde::de::DeserializeOwned>(
    socket: &std::path::Path,
    req: &Request,
) -> anyhow::Result<T> {
    snbuf_unit::server::control::ask(socket, req).map_err(|e| match e {
        ControlError::NotRunning { .. } | ControlError::Refused(_) => {
            anyhow::Error::new(Failure(e.to_string()))
        }
        other => anyhow::Error::new(other),
    })
}

/// `snbuf trigger` to one server's socket (with --nats, `cmd_fleet::trigger` instead).
pub fn trigger(args: &TriggerArgs) -> anyhow::Result<()> {
    if let Some(id) = &args.cancel {
        let reply: snbuf_unit::protocol::CancelReply = ask(
            &args.socket,
            &Request::Cancel(snbuf_unit::protocol::CancelRequest {
                burst_id: id.clone(),
            }),
        )?;
        println!(
            "cancelled: burst {id} now ends at tick {} ({:.3} s of its window cut); it is sealed with what was written",
            reply.window_end_timestamp, reply.cut_s
        );
        if !args.wait {
            return Ok(());
        }
        // The second past the newest data, and a minute to persist, seal and verify.
        return wait_for_seal(args, id, Duration::from_secs(90));
    }
    let at = match args.at.as_str() {
        "now" => At::Word("now".into()),
        t => At::Ticks(t.parse::<u64>().map_err(|_| {
            usage(format!(
                "--at '{t}': expected `now` or a timestamp in ticks"
            ))
        })?),
    };
    if let Some(id) = &args.burst_id {
        snbuf_burst::check_burst_id(id).map_err(|e| usage(format!("--burst-id: {e}")))?;
    }
    let req = TriggerRequest {
        at: Some(at),
        pre_s: args.pre.map(|p| p.as_secs_f64()),
        post_s: args.post.map(|p| p.as_secs_f64()),
        burst_id: args.burst_id.clone(),
    };
    let reply: TriggerReply = ask(&args.socket, &Request::Trigger(req))?;
    print_trigger_reply(&reply);
    if !args.wait {
        return Ok(());
    }
    // Bounded: the window, the time to persist what a slow medium left behind (as long again),
    // and a minute to seal and verify.
    let limit = Duration::from_secs_f64(2.0 * reply.window_s.clamp(0.0, 86_400.0) + 60.0);
    wait_for_seal(args, &reply.burst_id, limit)?;
    // The rest of the window, in the burst that continues this one.
    match reply.joined.and_then(|j| j.continued_in) {
        Some(next) => wait_for_seal(args, &next, limit),
        None => Ok(()),
    }
}

/// What the unit answered a trigger: accepted, or joined (and where the rest of the window
/// goes), with what of the window is not recorded and why.
fn print_trigger_reply(reply: &TriggerReply) {
    let (id, w) = (&reply.burst_id, &reply.window);
    if let Some(j) = reply
        .joined
        .as_ref()
        .filter(|j| j.covered_end > j.covered_start)
    {
        println!(
            "joined burst {id}, being recorded: it records ticks {}..{} of this trigger's window ({:.3} s before to {:.3} s after {}); its end moved {:.3} s",
            j.covered_start,
            j.covered_end,
            w.pre_s.unwrap_or(0.0),
            w.post_s.unwrap_or(0.0),
            w.trigger_timestamp,
            j.extended_by_s
        );
        if let (Some(s), Some(why)) = (j.not_covered_s, &j.not_covered_why) {
            println!("  the last {s:.3} s of the window are not recorded: {why}");
        }
        if let Some(earlier) = &j.begins_in {
            println!(
                "  the window's part before tick {} is recorded in burst {earlier}, which this one continues",
                j.covered_start
            );
        }
        if let Some(next) = &j.continued_in {
            println!(
                "  the burst reached --max-burst: the window from tick {} on is recorded as the next burst, {next}, with no gap",
                j.covered_end
            );
        }
    } else if let Some(next) = reply.joined.as_ref().and_then(|j| j.continued_in.as_ref()) {
        println!(
            "joined: burst {id} reached --max-burst, and this trigger's window ({:.3} s before to {:.3} s after {}) is recorded in the next burst, {next}, which follows it with no gap",
            w.pre_s.unwrap_or(0.0),
            w.post_s.unwrap_or(0.0),
            w.trigger_timestamp
        );
    } else {
        println!(
        "accepted: burst {id}, window {:.3} s before to {:.3} s after the trigger ({:.3} s of the {} MHz detector clock): ticks {}..{} around {}",
        w.pre_s.unwrap_or(0.0),
        w.post_s.unwrap_or(0.0),
        reply.window_s,
        w.clock_hz.unwrap_or(0) as f64 / 1e6,
        w.window_start_timestamp,
        w.window_end_timestamp,
        w.trigger_timestamp
    );
    }
    if let Some(s) = w.not_buffered_s {
        println!(
            "  the window's first {s:.3} s had already left the latency buffers: recorded as lost"
        );
    }
    if let Some(cut) = &reply.cut {
        println!("  not all of the window fits: {cut}");
    }
}

/// Waits, at most `limit`, for burst `id` to be sealed and verified, and prints its outcome.
fn wait_for_seal(args: &TriggerArgs, id: &str, limit: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if started.elapsed() > limit {
            return Err(anyhow::Error::new(Failure(format!(
                "burst {id} was not sealed within {:.0} s; `snbuf status --socket {}` shows where it is",
                limit.as_secs_f64(),
                args.socket.display()
            ))));
        }
        std::thread::sleep(Duration::from_millis(200));
        let status: UnitStatus = ask(&args.socket, &Request::Status)?;
        if let Some(b) = status.bursts.iter().find(|b| b.burst_id == id) {
            println!(
                "burst {id}: {} in {:.1} s, {} frames, {} lost{}, {}",
                b.state,
                started.elapsed().as_secs_f64(),
                b.frames.unwrap_or(0),
                b.lost_frames.unwrap_or(0),
                match b.lost_s {
                    Some(s) if s > 0.0 => format!(" ({s:.3} s of the detector's clock)"),
                    _ => String::new(),
                },
                if b.valid { "valid" } else { "NOT VALID" }
            );
            if b.valid {
                return Ok(());
            }
            let why = b.error.as_deref().unwrap_or("the burst does not verify");
            return Err(anyhow::Error::new(Failure(format!("burst {id}: {why}"))));
        }
    }
}

/// `status`'s network ingest lines: routing, socket buffer and GRO; where the receiver runs.
fn print_ingest(i: &snbuf_unit::protocol::IngestStatus) {
    let frames: u64 = i.links.iter().flatten().map(|l| l.frames).sum();
    let receives: u64 = i.links.iter().flatten().map(|l| l.receives).sum();
    println!(
        "ingest: {}; socket buffer {} per link; {}",
        i.routing,
        Bytes(i.rcvbuf_bytes as u64),
        match (&i.gro_refused, i.gro) {
            (Some(why), _) => format!("GRO off: {why}"),
            (None, true) => format!(
                "GRO on, {:.1} frames per receive",
                frames as f64 / receives.max(1) as f64
            ),
            (None, false) => "GRO off (--gro off)".into(),
        }
    );
    println!(
        "receiver: {}",
        snbuf_readout::udp::receiver_words(
            i.receive_cpu,
            i.nic.as_deref(),
            std::time::Duration::try_from_secs_f64(i.nap_s).unwrap_or_default(),
        )
    );
}

pub fn status(args: &StatusArgs) -> anyhow::Result<()> {
    if args.watch && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return snbuf_live::unit_status(&args.socket);
    }
    let s: UnitStatus = ask(&args.socket, &Request::Status)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s).expect("serialises"));
        return Ok(());
    }
    println!(
        "up {:.0} s: {}, frames {} ticks apart",
        s.uptime_s,
        s.summary(),
        s.frame_step_ticks
    );
    if let Some(i) = &s.ingest {
        print_ingest(i);
    }
    print_link_rates(&s);
    print_recording(&s);
    for b in &s.bursts {
        println!(
            "  {}: {} frames, {} lost, {}",
            b.burst_id,
            b.frames.unwrap_or(0),
            b.lost_frames.unwrap_or(0),
            if b.valid {
                "valid".to_string()
            } else {
                format!("NOT VALID {}", b.error.as_deref().unwrap_or(""))
            }
        );
    }
    Ok(())
}

/// Each link's measured rate and clock against what the unit was configured for, and what its
/// latency buffer holds.
fn print_link_rates(s: &UnitStatus) {
    for r in &s.link_rates {
        let measured = match (r.bytes_per_s, r.clock_ratio) {
            (Some(b), Some(c)) => format!(
                "{} ({:.2}x configured), clock {:.3}x the frame type's",
                Rate(b),
                r.rate_ratio.unwrap_or(0.0),
                c
            ),
            _ => "not measured yet".into(),
        };
        println!(
            "  link {}: {measured}; buffer holds {}{}",
            r.link,
            r.buffer_span_s.map_or("nothing".into(), |s| format!(
                "{s:.2} s of the detector's clock"
            )),
            if r.mismatch {
                "  MISMATCH: not the stream the unit was configured for"
            } else {
                ""
            }
        );
    }
}

/// The burst being recorded, link by link (what is durable so far), or that the unit is idle.
fn print_recording(s: &UnitStatus) {
    match &s.recording {
        Some(links) => {
            let out: u64 = links.iter().map(|l| l.frames_out).sum();
            let lost: u64 = links.iter().map(|l| l.counters.lost_frames).sum();
            println!("recording: {out} frames durable so far, {lost} lost");
            for l in links {
                println!(
                    "  link {}: {} chunks durable, up to timestamp {}{}",
                    l.counters.link,
                    l.counters.durable_chunks,
                    l.counters
                        .durable_until_timestamp
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into()),
                    if l.counters.failed { ", FAILED" } else { "" }
                );
            }
        }
        None => println!(
            "idle: ready for a trigger (next burst's files: {})",
            s.next_burst
        ),
    }
}
