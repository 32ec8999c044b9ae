//! `snbuf record`: emulate links, buffer, trigger, persist the window, verify, summarise.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use snbuf_quantity::{Bytes, Rate};
use snbuf_unit::{record, Progress};

use crate::cli::RecordArgs;
use crate::exit::Failure;
use crate::unit_config::{config_from_args, record_error};

pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        crate::args::check_parent_dir("--json", path)?;
    }
    let (config, why) = config_from_args(&args.unit, args.trigger_after)?;
    print_plan(&config, &why.method, &why.writers);
    // Bursts a unit left unsealed here when it stopped are recovered first (as `serve` does at
    // its start); a burst another unit is recording now is left alone.
    let hz = Some(config.clock().hz());
    for b in snbuf_unit::interrupted::recover_all(&config.output_dir, hz) {
        if b.state == snbuf_unit::protocol::OutcomeState::Error {
            eprintln!(
                "  {} was interrupted when its unit stopped and could not be recovered (left as it was): {}",
                b.burst_id,
                b.error.as_deref().unwrap_or("")
            );
            continue;
        }
        eprintln!(
            "  recovered {}: interrupted when its unit stopped; {} frames kept, {} lost, {}",
            b.burst_id,
            b.frames.unwrap_or(0),
            b.lost_frames.unwrap_or(0),
            match &b.error {
                None => "valid".to_string(),
                Some(why) => format!("NOT VALID: {why}"),
            }
        );
    }
    let fb = config.frame_type.frame_bytes() as f64;
    let mut last: Option<(Duration, u64, u64)> = None;
    let report = record(&config, |p: &Progress| {
        eprintln!("{}", progress_line(&config, fb, p, &mut last))
    })
    .map_err(record_error)?;
    print_summary(&config, &report, &why.writers);
    let m = &report.manifest;
    if let Some(path) = &args.json {
        write_json(path, &report).with_context(|| format!("write {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    let failed = m.links.iter().filter(|l| l.error.is_some()).count();
    if !report.verify.valid {
        Err(anyhow::Error::new(Failure(format!(
            "{}: the burst does not verify",
            report.result.burst_dir.display()
        ))))
    } else if failed > 0 {
        Err(anyhow::Error::new(Failure(format!(
            "{}: {failed} of {} links failed (above); what they recorded before is valid",
            report.result.burst_dir.display(),
            m.links.len()
        ))))
    } else {
        Ok(())
    }
}

/// What the recorder is about to do, and why, on stderr.
fn print_plan(config: &snbuf_unit::RecordConfig, why: &str, why_writers: &str) {
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
    eprintln!("  {}", config.clock_line());
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
    let nodes = snbuf_platform::numa::nodes();
    let outputs: Vec<String> = config
        .outputs()
        .iter()
        .map(|o| match snbuf_platform::numa::node_of_path(o) {
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
}

/// One progress line: rates over the last interval (since the start for the first), the worst
/// link's backlog against its buffer, what was lost and by which link.
fn progress_line(
    config: &snbuf_unit::RecordConfig,
    fb: f64,
    p: &Progress,
    last: &mut Option<(Duration, u64, u64)>,
) -> String {
    let frames_in: u64 = p.links.iter().map(|l| l.frames_in).sum();
    let frames_out: u64 = p.links.iter().map(|l| l.durable_frames).sum();
    // Rates over the last interval (since the start for the first line).
    let (t0, i0, o0) = last.unwrap_or((Duration::ZERO, 0, 0));
    let dt = (p.elapsed - t0).as_secs_f64().max(1e-3);
    let (in_rate, out_rate) = (
        (frames_in - i0) as f64 * fb / dt,
        (frames_out - o0) as f64 * fb / dt,
    );
    *last = Some((p.elapsed, frames_in, frames_out));
    // How close the worst link is to losing data: its unwritten backlog against its buffer.
    let fill = p.links.iter().map(|l| l.backlog_frames).max().unwrap_or(0) as f64
        / config.buffer_frames() as f64;
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
    let lossy: Vec<String> = p
        .links
        .iter()
        .filter(|l| l.lost_frames > 0 || l.failed)
        .map(|l| {
            format!(
                "{}:{}{}",
                l.link,
                l.lost_frames,
                if l.failed { " FAILED" } else { "" }
            )
        })
        .collect();
    if !lossy.is_empty() {
        line.push_str(&format!("  (by link: {})", lossy.join(" ")));
    }
    line
}

/// The burst's summary on stdout: window, what was recorded and lost, where the CPU went, how
/// it was written, and the verdict.
fn print_summary(
    config: &snbuf_unit::RecordConfig,
    report: &snbuf_unit::RecordSummary,
    why_writers: &str,
) {
    print_what_was_kept(config, report);
    print_where_the_cpu_went(report);
    print_how_it_was_written(report, why_writers);
}

/// The window, what of it was recorded and lost, and what the links delivered.
fn print_what_was_kept(config: &snbuf_unit::RecordConfig, report: &snbuf_unit::RecordSummary) {
    let m = &report.manifest;
    println!(
        "burst {} ({:?})",
        report.result.burst_dir.display(),
        m.state
    );
    println!(
        "  window      {:.3} s before to {:.3} s after the trigger: ticks {}..{} around {} ({} frame type, {} MHz clock)",
        report.result.trigger.pre_s.unwrap_or(0.0),
        report.result.trigger.post_s.unwrap_or(0.0),
        report.result.trigger.window_start_timestamp,
        report.result.trigger.window_end_timestamp,
        report.result.trigger.trigger_timestamp,
        m.frame
            .as_ref()
            .map(|f| f.frame_type.as_str())
            .unwrap_or("?"),
        config.clock().hz() as f64 / 1e6
    );
    if let Some(s) = report.result.trigger.not_buffered_s {
        println!(
            "  not held    the window's first {s:.3} s had left the latency buffers: counted lost"
        );
    }
    println!(
        "  recorded    {} frames, {} in {} files",
        report.result.frames_recorded,
        Bytes(report.result.frames_recorded * report.result.frame_bytes as u64),
        m.links.len()
    );
    println!(
        "  lost        {} frames{}",
        report.result.lost_frames,
        if report.result.lost_frames > 0 {
            " (counted per link in the manifest)"
        } else {
            ""
        }
    );
    if let Some(ingest) = &report.result.ingest {
        let sum =
            |f: fn(&snbuf_readout::udp::IngestSnapshot) -> u64| ingest.iter().map(f).sum::<u64>();
        println!(
            "  ingest      {} frames received, {} dropped by the kernel, {} datagrams refused, {} frames missing by timestamp (socket buffer {}; {})",
            sum(|g| g.frames),
            sum(|g| g.kernel_drops),
            sum(|g| g.dropped.total()),
            sum(|g| g.timestamp_gap_frames),
            report
                .result.ingest_rcvbuf_bytes
                .map(|b| Bytes(b as u64).to_string())
                .unwrap_or_else(|| "?".into()),
            match report.result.ingest_gro {
                Some(true) => format!(
                    "GRO on, {:.1} frames per receive",
                    sum(|g| g.frames) as f64 / sum(|g| g.receives).max(1) as f64
                ),
                _ => "GRO off".to_string(),
            }
        );
        println!(
            "  receiver    {}",
            snbuf_readout::udp::receiver_words(
                report.result.ingest_receive_cpu,
                report.ingest_nic.as_ref().map(|n| n.to_string()).as_deref(),
                std::time::Duration::from_secs_f64(report.result.ingest_nap_s.unwrap_or_default()),
            )
        );
    }
    if report.result.skipped_at_source_per_link > 0 {
        println!(
            "  source      fell {} frames per link behind its schedule",
            report.result.skipped_at_source_per_link
        );
    }
    if report.result.source_lag_worth_saying() {
        println!(
            "  source      ran up to {:.0} ms late while recording (the links were slower than set)",
            report.result.source_max_lag_s * 1e3
        );
    }
}

/// Rates in and out, and the CPU the recording cost, by thread.
fn print_where_the_cpu_went(report: &snbuf_unit::RecordSummary) {
    println!("  input       {}", Rate(report.result.input_bytes_per_s));
    println!(
        "  output      {} (durable, trigger to last chunk)",
        Rate(report.result.output_bytes_per_s)
    );
    println!(
        "  CPU         {:.2} core-s per GiB recorded (writers {:.2} s, {} {:.2} s, other threads {:.2} s: io_uring's kernel workers, the main thread)",
        report.result.cpu_core_s_per_gib,
        report.result.writer_cpu_s,
        if report.result.ingest.is_some() {
            "network receive"
        } else {
            "link emulation"
        },
        report.result.source_cpu_s,
        report.result.other_cpu_s
    );
    if let (Some(source), Some(unit)) = (
        report.result.source_cpu_core_s_per_gib,
        report.result.unit_cpu_core_s_per_gib,
    ) {
        println!(
            "              {} {source:.3} core-s per GiB it took in; the whole unit {unit:.3} core-s per GiB from {} to durable",
            if report.result.ingest.is_some() { "receive" } else { "emulation" },
            if report.result.ingest.is_some() { "the network" } else { "the links" },
        );
    }
}

/// How the window was written: writers, method, files, buffers, failed links, the verdict.
fn print_how_it_was_written(report: &snbuf_unit::RecordSummary, why_writers: &str) {
    let m = &report.manifest;
    let chunks: u64 = m.links.iter().map(|l| l.data.chunks).sum();
    println!(
        "  writers     {} thread(s) for {} link(s) ({why_writers}); {} of {} chunks written straight from the latency buffers{}",
        report.result.writers,
        m.links.len(),
        report.result.chunks_from_source,
        chunks,
        if report.result.chunks_from_source > 0 {
            " (no CPU copy)"
        } else {
            ""
        }
    );
    println!(
        "  method      {} ({}){}",
        m.method,
        report.result.durability,
        if report.result.survives_power_loss {
            ""
        } else {
            ": the output medium keeps data in RAM only, nothing survives power loss"
        }
    );
    println!(
        "  files       {}",
        if report.result.prepared_ahead {
            "prepared before the trigger"
        } else {
            "opened at the trigger (the window was larger than prepared, or none was ready)"
        }
    );
    println!(
        "  buffers     {} of DRAM on {} pages{}",
        Bytes(report.result.buffer_memory_bytes),
        report
            .result
            .buffer_page_bytes
            .map(|b| Bytes(b).to_string())
            .unwrap_or_else(|| "?".into()),
        numa_placement(&report.result.buffer_numa_nodes)
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
}

fn write_json(path: &PathBuf, r: &snbuf_unit::RecordSummary) -> std::io::Result<()> {
    std::fs::write(
        path,
        serde_json::to_string_pretty(&r.result).expect("serialises") + "\n",
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
