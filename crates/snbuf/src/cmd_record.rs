//! `snbuf record`: emulate links, buffer, trigger, persist the window, verify, summarise.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A link emulation later than this behind its schedule is reported: at the default rates it
/// sleeps 1 ms between rounds, so a few ms is normal scheduling.
const SOURCE_LAG_WORTH_SAYING_S: f64 = 0.010;

use anyhow::Context;
use snbuf_persist::fault::FaultPlan;
use snbuf_persist::{cpu, medium, PageSize, SyncMode};
use snbuf_readout::{FrameType, Payload};
use snbuf_unit::{record, Progress, RecordConfig, Source};
use snbuf_units::{Bytes, Rate};

use crate::cli::RecordArgs;
use crate::exit::{usage, Failure};
use crate::write_plan::{plan_writes, Reasons, WritePlan};

/// A recorder error for the command line: the user's mistake (exit 2) or the machine's (exit 1).
pub fn record_error(e: snbuf_unit::RecordError) -> anyhow::Error {
    if e.is_usage() {
        usage(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

/// The recorder's configuration from the command line (and its config file). Refuses bad input
/// before anything runs, and then leaves nothing behind: an output directory it had to create
/// for probing the medium is removed again.
pub fn config_from_args(args: &RecordArgs) -> anyhow::Result<(RecordConfig, Reasons)> {
    let args = &crate::config_file::merge(args)?;
    let outputs = if args.output.is_empty() {
        vec![PathBuf::from("./snbuf-data")]
    } else {
        args.output.clone()
    };
    for (flag, path) in [("--json", &args.json), ("--status-file", &args.status_file)] {
        if let Some(path) = path {
            check_parent_dir(flag, path)?;
        }
    }
    let mut created = Vec::new();
    let mut result = Ok(());
    for output in &outputs {
        if !output.exists() {
            created.push(output.clone());
        }
        if let Err(e) = std::fs::create_dir_all(output) {
            result = Err(usage(format!("--output {}: {e}", output.display())));
            break;
        }
    }
    let result = result
        .and_then(|()| distinct_outputs(&outputs))
        .and_then(|()| build_config(args, outputs.clone()));
    if result.is_err() {
        for output in created.iter().rev() {
            let _ = std::fs::remove_dir(output);
        }
    }
    result
}

/// Two outputs that are one directory would put two links' files in one place and count its
/// space twice: refused.
fn distinct_outputs(outputs: &[PathBuf]) -> anyhow::Result<()> {
    let mut seen = Vec::new();
    for o in outputs {
        let real = std::fs::canonicalize(o)
            .map_err(|e| usage(format!("--output {}: {e}", o.display())))?;
        if seen.contains(&real) {
            return Err(usage(format!(
                "--output {} is given twice (as {})",
                o.display(),
                real.display()
            )));
        }
        seen.push(real);
    }
    Ok(())
}

/// A file snbuf will write at the end must have somewhere to go: refused now, not after a run.
pub fn check_parent_dir(flag: &str, path: &Path) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(usage(format!(
            "{flag} {}: {} is not a directory",
            path.display(),
            parent.display()
        )));
    }
    Ok(())
}

fn build_config(
    args: &RecordArgs,
    mut outputs: Vec<PathBuf>,
) -> anyhow::Result<(RecordConfig, Reasons)> {
    let output = outputs.remove(0);
    let more_outputs = outputs;
    let dune = args.profile.as_deref() == Some("dune");
    if let Some(p) = args.profile.as_deref().filter(|p| *p != "dune") {
        return Err(usage(format!("unknown profile '{p}' (known: dune)")));
    }
    let frame_type: FrameType = args
        .frame
        .as_deref()
        .unwrap_or("protodune-wib")
        .parse()
        .map_err(|e: snbuf_frames::FrameTypeError| usage(e.to_string()))?;
    let fb = frame_type.frame_bytes() as f64;
    // The paper's unit: 10 links at the detector's own rate, 10 s buffer, 100 s after the
    // trigger. A network or replayed stream of a DUNE frame type runs at the type's own rate, so
    // its buffer holds `--buffer` seconds of real data; the emulator on defaults is a sub-sampled
    // detector at 20 MB/s a link, which a laptop's disk keeps up with.
    let real_stream =
        args.source.as_deref().is_some_and(|s| s != "emulate") || args.replay.is_some();
    let dune_type = frame_type.fragment_type().is_some();
    let rate_bytes_per_s = match (&args.rate_per_link, dune || (real_stream && dune_type)) {
        (Some(r), _) => snbuf_units::parse_rate_bytes_per_s(r)
            .map_err(|e| usage(format!("--rate-per-link: {e}")))? as f64,
        (None, true) => frame_type.native_bytes_per_s(),
        (None, false) => 20e6,
    };
    if rate_bytes_per_s <= 0.0 {
        return Err(usage("--rate-per-link must be more than 0"));
    }
    let pick = |v: Option<Duration>, dune_v: u64, default: Duration| {
        v.unwrap_or(if dune {
            Duration::from_secs(dune_v)
        } else {
            default
        })
    };
    let buffer = pick(args.buffer, 10, Duration::from_secs(3));
    let pre = pick(args.pre, 10, Duration::from_secs(2));
    let post = pick(args.post, 100, Duration::from_secs(3));
    let cpus = match &args.cpus {
        Some(list) => cpu::parse_cpu_list(list).map_err(|e| usage(e.to_string()))?,
        None => cpu::allowed_cpus(),
    };
    let links = args.links.unwrap_or(10);
    let WritePlan {
        method,
        why_method: why,
        writers,
        why_writers,
    } = plan_writes(
        args.method.as_deref().unwrap_or("auto"),
        args.writers,
        &output,
        links,
        1 + more_outputs.len(),
        cpus.len(),
    )?;
    if args.method.as_deref().unwrap_or("auto") == "auto" {
        // One method serves every output: auto picks it from the home's medium, which is only
        // right if the others are the same kind.
        let dax = |o: &Path| medium::probe(o).map(|m| m.dax).unwrap_or(false);
        if let Some(other) = more_outputs.iter().find(|o| dax(o) != dax(&output)) {
            return Err(usage(format!(
                "--output {} and {} are different kinds of media (DAX and not): choose --method",
                output.display(),
                other.display()
            )));
        }
    }
    let frames_per_s = rate_bytes_per_s / fb;
    let source = source_from_args(args, frame_type, links)?;
    let chunk_frames = args
        .chunk_frames
        .unwrap_or_else(|| snbuf_unit::chunking::default_chunk_frames(fb as u64));
    let config = RecordConfig {
        frame_type,
        links,
        frames_per_s_per_link: frames_per_s,
        buffer,
        pre,
        post,
        trigger_after: args
            .trigger_after
            .unwrap_or(pre.max(Duration::from_secs(1)) + Duration::from_secs(1))
            .max(pre),
        method,
        sync_mode: SyncMode::Fdatasync,
        output_dir: output,
        more_outputs,
        burst_id: args.burst_id.clone().unwrap_or_else(|| {
            format!(
                "{}-{}",
                snbuf_units::utc_stamp(snbuf_units::now_unix_ns() / 1_000_000_000),
                std::process::id()
            )
        }),
        writers,
        cpus,
        // Huge pages unless asked otherwise: the writers and links walk the rings sequentially
        // (measured: 20% less CPU for the whole recorder on io_uring, BENCHMARKS.md); where the
        // kernel grants none, the rings get 4 KiB pages and the summary says so.
        page_size: if args.page_size == Some(4 << 10) {
            PageSize::Small4K
        } else {
            PageSize::Huge2M
        },
        chunk_frames,
        chunks_per_persist: args.chunks_per_persist.unwrap_or(8),
        source,
        run_number: args.run,
        unit_id: Some(crate::cmd_fleet::unit_id(args.unit.as_deref())?),
        source_ids: args.source_ids.clone(),
        status_file: args.status_file.clone(),
        faults: args
            .inject_fault
            .iter()
            .map(|f| FaultPlan::parse(f).map_err(|e| usage(format!("--inject-fault: {e}"))))
            .collect::<anyhow::Result<_>>()?,
        completion_deadline: args
            .completion_deadline
            .unwrap_or(snbuf_persist::sink::DEFAULT_COMPLETION_DEADLINE),
    };
    config.validate().map_err(|e| usage(e.to_string()))?;
    Ok((
        config,
        Reasons {
            method: why,
            writers: why_writers,
        },
    ))
}

/// Where the links' frames come from: emulated (or replayed), or the network.
fn source_from_args(
    args: &RecordArgs,
    frame_type: FrameType,
    links: u32,
) -> anyhow::Result<Source> {
    let spec = args.source.as_deref().unwrap_or("emulate");
    let udp_only = [
        ("--streams", !args.streams.is_empty()),
        ("--header-version", args.header_version.is_some()),
        ("--rcvbuf", args.rcvbuf.is_some()),
        ("--gro", args.gro.is_some()),
    ];
    if spec == "emulate" {
        if let Some((flag, _)) = udp_only.iter().find(|(_, given)| *given) {
            return Err(usage(format!("{flag} needs --source udp://ADDR:PORT")));
        }
        let payload = match &args.replay {
            Some(path) => {
                let data = std::fs::read(path)
                    .map_err(|e| usage(format!("--replay {}: {e}", path.display())))?;
                let p = Payload::Replay(Arc::new(data));
                // Refused now (empty, not whole frames of this type), not at the links' start.
                snbuf_readout::FrameGen::new(frame_type, 0, &p)
                    .map_err(|e| usage(format!("--replay {}: {e}", path.display())))?;
                p
            }
            None => Payload::Emulated,
        };
        return Ok(Source::Emulated {
            payload,
            gaps: None,
        });
    }
    let Some(addr) = spec.strip_prefix("udp://") else {
        return Err(usage(format!(
            "--source '{spec}': expected `emulate` or udp://ADDR:PORT"
        )));
    };
    if args.replay.is_some() {
        return Err(usage("--replay goes with --source emulate (snbuf emit --replay sends a recording over the network)"));
    }
    let bind: std::net::SocketAddr = addr.parse().map_err(|_| {
        usage(format!(
            "--source {spec}: '{addr}' is not ADDR:PORT (127.0.0.1:5000, [::]:5000)"
        ))
    })?;
    let routes = if args.streams.is_empty() {
        snbuf_readout::udp::UdpSource::default_routes(links)
    } else if args.streams.len() != links as usize {
        return Err(usage(format!(
            "--streams gives {} stream(s) for {links} link(s): one per link",
            args.streams.len()
        )));
    } else {
        args.streams.iter().copied().zip(0..links).collect()
    };
    let header_version = match args.header_version.as_deref() {
        None => Some(snbuf_readout::framegen::EMULATED_HEADER_VERSION),
        Some("any") => None,
        Some(v) => Some(
            v.parse::<u8>()
                .ok()
                .filter(|v| *v < 64)
                .ok_or_else(|| usage(format!("--header-version '{v}': 0 to 63, or any")))?,
        ),
    };
    Ok(Source::Udp(snbuf_readout::udp::UdpSource {
        bind,
        routes,
        header_version,
        rcvbuf_bytes: args.rcvbuf.unwrap_or(16 << 20) as usize,
        gro: args.gro.unwrap_or(true),
    }))
}

pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    let (config, why) = config_from_args(&args)?;
    let why_writers = why.writers;
    let why = why.method;
    let fb = config.frame_type.frame_bytes() as f64;
    let total_rate = config.link_bytes_per_s() * config.links as f64;
    eprintln!(
        "snbuf record: {} links of {} ({} each, {} in total), buffer {:.1} s ({} of DRAM)",
        config.links,
        config.frame_type,
        Rate(config.link_bytes_per_s()),
        Rate(total_rate),
        config.buffer.as_secs_f64(),
        Bytes(config.buffer_frames() * fb as u64 * config.links as u64)
    );
    eprintln!("  {}", clock_line(&config));
    eprintln!(
        "  trigger after {:.1} s, window {:.1} s before to {:.1} s after; method {} ({why})",
        config.trigger_after.as_secs_f64(),
        config.pre.as_secs_f64(),
        config.post.as_secs_f64(),
        config.method
    );
    eprintln!(
        "  {} writer thread(s) for {} link(s) ({}), on CPUs {:?} after the links' first",
        config.writers, config.links, why_writers, config.cpus
    );
    let nodes = snbuf_persist::numa::nodes();
    let outputs: Vec<String> = config
        .outputs()
        .iter()
        .map(|o| match snbuf_persist::numa::node_of_path(o) {
            Some(n) => format!("{} (NUMA node {n})", o.display()),
            None => format!("{} (no NUMA node known)", o.display()),
        })
        .collect();
    eprintln!(
        "  output{} {}; {}",
        if outputs.len() > 1 { "s" } else { "" },
        outputs.join(", "),
        if nodes.len() < 2 {
            "one NUMA node: nothing to place"
        } else {
            "each writer runs on its device's node where known"
        }
    );
    let mut last: Option<(Duration, u64, u64)> = None;
    let report = record(&config, |p: &Progress| {
        let frames_in: u64 = p.links.iter().map(|l| l.frames_in).sum();
        let frames_out: u64 = p.links.iter().map(|l| l.durable_frames).sum();
        // Rates over the last interval (since the start for the first line).
        let (t0, i0, o0) = last.unwrap_or((Duration::ZERO, 0, 0));
        let dt = (p.elapsed - t0).as_secs_f64().max(1e-3);
        let (in_rate, out_rate) = ((frames_in - i0) as f64 * fb / dt, (frames_out - o0) as f64 * fb / dt);
        last = Some((p.elapsed, frames_in, frames_out));
        // How close the worst link is to losing data: its unwritten backlog against its buffer.
        let fill = p.links.iter().map(|l| l.backlog_frames).max().unwrap_or(0) as f64 / config.buffer_frames() as f64;
        let backlog: u64 = p.links.iter().map(|l| l.backlog_frames).sum();
        let lost: u64 = p.links.iter().map(|l| l.lost_frames).sum();
        let mut line = format!(
            "  {:5.1} s {:9}  in {:>12}  out {:>12}  backlog {:>10} ({:3.0}% of buffer)  lost {lost}",
            p.elapsed.as_secs_f64(),
            p.phase,
            Rate(in_rate).to_string(),
            Rate(out_rate).to_string(),
            Bytes(backlog * fb as u64).to_string(),
            fill * 100.0
        );
        let lossy: Vec<String> = p.links.iter().filter(|l| l.lost_frames > 0 || l.failed).map(|l| {
            format!("{}:{}{}", l.link, l.lost_frames, if l.failed { " FAILED" } else { "" })
        }).collect();
        if !lossy.is_empty() {
            line.push_str(&format!("  (by link: {})", lossy.join(" ")));
        }
        eprintln!("{line}");
    })
    .map_err(record_error)?;

    let m = &report.manifest;
    println!("burst {} ({:?})", report.burst_dir.display(), m.state);
    println!(
        "  window      {:.3} s before to {:.3} s after the trigger: ticks {}..{} around {} ({} frame type, {} MHz clock)",
        report.window.pre_s.unwrap_or(0.0),
        report.window.post_s.unwrap_or(0.0),
        report.window.window_start_timestamp,
        report.window.window_end_timestamp,
        report.window.trigger_timestamp,
        m.frame
            .as_ref()
            .map(|f| f.frame_type.as_str())
            .unwrap_or("?"),
        config.clock().hz() as f64 / 1e6
    );
    if let Some(s) = report.window.not_buffered_s {
        println!(
            "  not held    the window's first {s:.3} s had left the latency buffers: counted lost"
        );
    }
    println!(
        "  recorded    {} frames, {} in {} files",
        report.frames_recorded,
        Bytes(report.frames_recorded * report.frame_bytes as u64),
        m.links.len()
    );
    println!(
        "  lost        {} frames{}",
        report.lost_frames,
        if report.lost_frames > 0 {
            " (counted per link in the manifest)"
        } else {
            ""
        }
    );
    if let Some(ingest) = &report.ingest {
        let sum =
            |f: fn(&snbuf_readout::udp::IngestSnapshot) -> u64| ingest.iter().map(f).sum::<u64>();
        println!(
            "  ingest      {} frames received, {} dropped by the kernel, {} datagrams refused, {} frames missing by timestamp (socket buffer {}; {})",
            sum(|g| g.frames),
            sum(|g| g.kernel_drops),
            sum(|g| g.dropped()),
            sum(|g| g.timestamp_gap_frames),
            report
                .ingest_rcvbuf_bytes
                .map(|b| Bytes(b as u64).to_string())
                .unwrap_or_else(|| "?".into()),
            match report.ingest_gro {
                Some(true) => format!(
                    "GRO on, {:.1} frames per receive",
                    sum(|g| g.frames) as f64 / sum(|g| g.receives).max(1) as f64
                ),
                _ => "GRO off".to_string(),
            }
        );
    }
    if report.skipped_at_source > 0 {
        println!(
            "  source      fell {} frames per link behind its schedule",
            report.skipped_at_source
        );
    }
    if report.source_max_lag_s > SOURCE_LAG_WORTH_SAYING_S {
        println!(
            "  source      ran up to {:.0} ms late while recording (the links were slower than set)",
            report.source_max_lag_s * 1e3
        );
    }
    println!("  input       {}", Rate(report.input_bytes_per_s));
    println!(
        "  output      {} (durable, trigger to last chunk)",
        Rate(report.output_bytes_per_s)
    );
    println!(
        "  CPU         {:.2} core-s per GiB recorded (writers {:.2} s, {} {:.2} s, other threads {:.2} s: io_uring's kernel workers, the main thread)",
        report.cpu_core_s_per_gib(),
        report.writer_cpu_s,
        if report.ingest.is_some() {
            "network receive"
        } else {
            "link emulation"
        },
        report.source_cpu_s,
        report.other_cpu_s()
    );
    if let (Some(source), Some(unit)) = (
        report.source_cpu_core_s_per_gib(),
        report.unit_cpu_core_s_per_gib(),
    ) {
        println!(
            "              {} {source:.3} core-s per GiB it took in; the whole unit {unit:.3} core-s per GiB from {} to durable",
            if report.ingest.is_some() { "receive" } else { "emulation" },
            if report.ingest.is_some() { "the network" } else { "the links" },
        );
    }
    let chunks: u64 = m.links.iter().map(|l| l.data.chunks).sum();
    println!(
        "  writers     {} thread(s) for {} link(s) ({why_writers}); {} of {} chunks written straight from the latency buffers{}",
        report.writers,
        m.links.len(),
        report.chunks_from_source,
        chunks,
        if report.chunks_from_source > 0 {
            " (no CPU copy)"
        } else {
            ""
        }
    );
    println!(
        "  method      {} ({}){}",
        m.method,
        report.durability,
        if report.survives_power_loss {
            ""
        } else {
            ": the output medium keeps data in RAM only, nothing survives power loss"
        }
    );
    println!(
        "  files       {}",
        if report.prepared_ahead {
            "prepared before the trigger"
        } else {
            "opened at the trigger (the window was larger than prepared, or none was ready)"
        }
    );
    println!(
        "  buffers     {} of DRAM on {} pages{}",
        Bytes(report.buffer_memory_bytes),
        report
            .buffer_page_bytes
            .map(|b| Bytes(b).to_string())
            .unwrap_or_else(|| "?".into()),
        numa_placement(&report.buffer_nodes)
    );
    for l in m.links.iter().filter(|l| l.error.is_some()) {
        println!(
            "  link {} FAILED: {}",
            l.link,
            l.error.as_deref().unwrap_or("")
        );
    }
    println!(
        "  verify      {}",
        if report.verify.valid {
            "valid".to_string()
        } else {
            format!("NOT VALID: {:?}", report.verify.problems)
        }
    );
    if let Some(path) = &args.json {
        write_json(path, &report).with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    let failed = m.links.iter().filter(|l| l.error.is_some()).count();
    if !report.verify.valid {
        Err(anyhow::Error::new(Failure(format!(
            "{}: the burst does not verify",
            report.burst_dir.display()
        ))))
    } else if failed > 0 {
        Err(anyhow::Error::new(Failure(format!(
            "{}: {failed} of {} links failed (above); what they recorded before is valid",
            report.burst_dir.display(),
            m.links.len()
        ))))
    } else {
        Ok(())
    }
}

/// What a second is for this unit, and how its links sample the detector.
pub fn clock_line(config: &snbuf_unit::RecordConfig) -> String {
    format!(
        "detector clock {} MHz (a second of every window is {} ticks); a link's frames {} ticks apart: {}",
        config.clock().hz() as f64 / 1e6,
        config.clock().hz(),
        config.frame_step_ticks(),
        step_words(config.frame_step_ticks(), config.frame_type.ticks_per_frame())
    )
}

/// What frames `step` ticks apart are for a frame type whose own are `tpf` apart.
pub fn step_words(step: u64, tpf: u64) -> String {
    if step == tpf {
        "the frame type's own rate".to_string()
    } else if step > tpf {
        format!(
            "a sub-sampled detector, 1 frame in {:.1}",
            step as f64 / tpf as f64
        )
    } else {
        format!(
            "{:.2}x the frame type's own rate (frames overlap in time: a storage test, not a detector)",
            tpf as f64 / step as f64
        )
    }
}

fn write_json(path: &PathBuf, r: &snbuf_unit::RecordReport) -> std::io::Result<()> {
    let v = serde_json::json!({
        "burst_dir": r.burst_dir,
        "state": r.manifest.state,
        "trigger": r.window,
        "frame": r.manifest.frame,
        "frame_bytes": r.frame_bytes,
        "frames_recorded": r.frames_recorded,
        "lost_frames": r.lost_frames,
        "input_bytes_per_s": r.input_bytes_per_s,
        "output_bytes_per_s": r.output_bytes_per_s,
        "method": r.manifest.method,
        "durability": r.durability,
        "survives_power_loss": r.survives_power_loss,
        "prepared_ahead": r.prepared_ahead,
        "window_cut_to_bytes_per_link": r.window_cut_to_bytes_per_link,
        "buffer_memory_bytes": r.buffer_memory_bytes,
        "buffer_page_bytes": r.buffer_page_bytes,
        "buffer_numa_nodes": r.buffer_nodes,
        "skipped_at_source_per_link": r.skipped_at_source,
        "source_max_lag_s": r.source_max_lag_s,
        "writer_cpu_s": r.writer_cpu_s,
        "writers": r.writers,
        "chunks_from_source": r.chunks_from_source,
        "source_cpu_s": r.source_cpu_s,
        "source_bytes": r.source_bytes,
        "source_cpu_core_s_per_gib": r.source_cpu_core_s_per_gib(),
        "unit_cpu_core_s_per_gib": r.unit_cpu_core_s_per_gib(),
        "process_cpu_s": r.process_cpu_s,
        "other_cpu_s": r.other_cpu_s(),
        "cpu_core_s_per_gib": r.cpu_core_s_per_gib(),
        "links": r.manifest.links,
        "ingest": r.ingest,
        "ingest_gro": r.ingest_gro,
        "ingest_rcvbuf_bytes": r.ingest_rcvbuf_bytes,
        "valid": r.verify.valid,
        "problems": r.verify.problems,
    });
    std::fs::write(
        path,
        serde_json::to_string_pretty(&v).expect("serialises") + "\n",
    )
}

/// Where the links' buffers were placed, for the summary: nothing on a one-node machine.
fn numa_placement(nodes: &[Option<u32>]) -> String {
    if nodes.iter().all(Option::is_none) {
        return String::new();
    }
    let per_link: Vec<String> = nodes
        .iter()
        .map(|n| n.map_or("default".into(), |n| n.to_string()))
        .collect();
    format!(
        ", on the NUMA nodes of their outputs (per link: {})",
        per_link.join(" ")
    )
}
