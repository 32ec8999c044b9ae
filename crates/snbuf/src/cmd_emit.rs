//! `snbuf emit`: sends a detector's frames over UDP until its duration ends or it is stopped,
//! with a line a second and a per-link digest of what it sent.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::Context;
use snbuf_frames::FrameType;
use snbuf_quantity::Rate;
use snbuf_readout::emit::{emit, EmitConfig};
use snbuf_readout::Payload;

use crate::cli::EmitArgs;
use crate::exit::usage;

/// Checks the options, says what it will send, sends until the duration ends or a signal
/// comes, and says what it sent.
pub fn run(args: &EmitArgs) -> anyhow::Result<()> {
    let config = config_from(args)?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, stop.clone()).context("install a signal handler")?;
    }
    print_plan(args, &config);
    let fb = config.frame_type.frame_bytes() as f64;
    let report = emit(&config, &stop, |sent, elapsed| {
        eprintln!(
            "  {:5.1} s  {} frames sent, {}",
            elapsed.as_secs_f64(),
            sent,
            Rate(sent as f64 * fb / elapsed.as_secs_f64().max(1e-3))
        );
    })?;
    print_report(args, &report);
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(())
}

/// The sender's configuration from the options, each checked (a usage error naming it).
fn config_from(args: &EmitArgs) -> anyhow::Result<EmitConfig> {
    let to = args
        .to
        .strip_prefix("udp://")
        .ok_or_else(|| usage(format!("--to '{}': expected udp://HOST:PORT", args.to)))?;
    let to: std::net::SocketAddr = std::net::ToSocketAddrs::to_socket_addrs(to)
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            usage(format!(
                "--to '{}': not a HOST:PORT this machine can resolve",
                args.to
            ))
        })?;
    let frame_type: FrameType = args
        .frame
        .parse()
        .map_err(|e: snbuf_frames::FrameTypeError| usage(e.to_string()))?;
    let rate = match &args.rate_per_link {
        Some(r) => snbuf_quantity::parse_rate_bytes_per_s(r)
            .map_err(|e| usage(format!("--rate-per-link: {e}")))? as f64,
        None => frame_type.native_bytes_per_s(),
    };
    if rate <= 0.0 {
        return Err(usage("--rate-per-link must be more than 0"));
    }
    let payloads: Vec<Payload> = if args.replay.is_empty() {
        vec![Payload::Emulated; args.links.unwrap_or(1) as usize]
    } else {
        if args.links.is_some_and(|l| l as usize != args.replay.len()) {
            return Err(usage(format!(
                "--links {} with {} --replay file(s): one recording per link",
                args.links.unwrap_or(0),
                args.replay.len()
            )));
        }
        args.replay
            .iter()
            .map(|p| {
                let data = std::fs::read(p)
                    .map_err(|e| usage(format!("--replay {}: {e}", p.display())))?;
                let payload = Payload::Replay(Arc::new(data));
                snbuf_readout::FrameGen::new(frame_type, 0, &payload)
                    .map_err(|e| usage(format!("--replay {}: {e}", p.display())))?;
                Ok(payload)
            })
            .collect::<anyhow::Result<_>>()?
    };
    if payloads.is_empty() {
        return Err(usage("--links must be at least 1"));
    }
    let links = payloads.len();
    if links > 1 && frame_type.layout().header != snbuf_frames::HeaderKind::DaqEth {
        return Err(usage(format!(
            "{frame_type} frames have no stream_id to route by: send one link, or wibeth, tdeeth or daphneeth-stream"
        )));
    }
    let streams: Vec<u8> = if args.streams.is_empty() {
        (0..links).map(|l| l as u8).collect()
    } else if args.streams.len() == links {
        args.streams.clone()
    } else {
        return Err(usage(format!(
            "--streams gives {} stream(s) for {links} link(s): one per link",
            args.streams.len()
        )));
    };
    if let Some(path) = &args.json {
        crate::args::check_parent_dir("--json", path)?;
    }
    let config = EmitConfig {
        to,
        frame_type,
        payloads,
        streams,
        frames_per_s_per_link: rate / frame_type.frame_bytes() as f64,
        clock_offset_s: args.clock_offset,
        duration: args.duration,
        digest: args.digest,
        cpu: Some(match args.cpu {
            Some(c) => {
                if !snbuf_platform::cpu::allowed_cpus().contains(&c) {
                    return Err(usage(format!("--cpu {c}: not a CPU this process may use")));
                }
                c
            }
            None => *snbuf_platform::cpu::allowed_cpus().last().unwrap_or(&0),
        }),
        gso: args.gso,
    };
    assert_eq!(
        config.payloads.len(),
        config.streams.len(),
        "a stream per link"
    );
    config.check().map_err(|e| usage(e.to_string()))?;
    Ok(config)
}

/// What will be sent, where, on which clock.
fn print_plan(args: &EmitArgs, config: &EmitConfig) {
    let (frame_type, to, links) = (config.frame_type, config.to, config.payloads.len());
    let clock = snbuf_frames::DetectorClock::of(frame_type);
    let step = clock.frame_step_ticks(config.frames_per_s_per_link);
    let tpf = frame_type.ticks_per_frame();
    eprintln!(
        "snbuf emit: {links} link(s) of {frame_type} at {} each to udp://{to}{}",
        Rate(clock.frames_per_s(step) * frame_type.frame_bytes() as f64),
        match args.duration {
            Some(d) => format!(" for {:.1} s", d.as_secs_f64()),
            None => ", until Ctrl-C".into(),
        }
    );
    eprintln!(
        "  detector clock {} MHz{}; a frame every {step} ticks ({})",
        clock.hz() as f64 / 1e6,
        if args.clock_offset != 0.0 {
            format!(", {:+.3} s from the wall clock", args.clock_offset)
        } else {
            String::new()
        },
        snbuf_frames::clock::step_words(step, tpf)
    );
}

/// What was sent: totals, and with --digest each link's digest.
fn print_report(args: &EmitArgs, report: &snbuf_readout::emit::EmitReport) {
    println!(
        "sent {} frames in {:.1} s: {} (most {:.0} ms behind schedule){}",
        report.links.iter().map(|l| l.frames).sum::<u64>(),
        report.seconds,
        Rate(report.bytes_per_s),
        report.max_lag_s * 1e3,
        if report.send_errors > 0 {
            format!(
                "; {} datagrams refused (nobody listening?)",
                report.send_errors
            )
        } else {
            String::new()
        }
    );
    if let Some(why) = &report.gso_refused {
        println!("  GSO off: {why}; one datagram per message");
    }
    if args.digest {
        for l in &report.links {
            println!(
                "  link {} stream {}: {} frames, timestamps {}..{}, crc32c {:08x}",
                l.link,
                l.stream_id
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "-".into()),
                l.frames,
                l.first_timestamp.unwrap_or(0),
                l.last_timestamp.unwrap_or(0),
                l.crc32c.unwrap_or(0)
            );
        }
    }
}
