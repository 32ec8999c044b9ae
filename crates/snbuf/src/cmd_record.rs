//! `snbuf record`: emulate links, buffer, trigger, persist the window, verify, summarise.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A link emulation later than this behind its schedule is reported: at the default rates it
/// sleeps 1 ms between rounds, so a few ms is normal scheduling.
const SOURCE_LAG_WORTH_SAYING_S: f64 = 0.010;

use anyhow::Context;
use snbuf_daq::{record, FrameType, Payload, Progress, RecordConfig, RecordError};
use snbuf_persist::fault::FaultPlan;
use snbuf_persist::{cpu, medium, Method, PageSize, SyncMode};
use snbuf_units::{Bytes, Rate};

use crate::cli::RecordArgs;
use crate::exit::{usage, Failure};

/// `--method auto`: mapped non-temporal stores where the medium is persistent memory (DAX).
/// Elsewhere O_DIRECT when each writer thread has at most two links, io_uring when writers are
/// fewer. Why: one synchronous writer per link already keeps as many writes in flight as there
/// are links, and costs less CPU per byte than io_uring's copy into registered buffers (keep-up
/// on this project's disk: 1.96 GiB/s direct against 1.21 GiB/s uring, BENCHMARKS.md); a writer
/// that serves many links needs io_uring's queue to keep the device busy. Says why.
fn choose_method(
    requested: &str,
    output: &Path,
    links: u32,
    writers: usize,
) -> anyhow::Result<(Method, String)> {
    if requested != "auto" {
        let m = requested
            .parse::<Method>()
            .map_err(|e| usage(e.to_string()))?;
        if !m.compiled_in() {
            return Err(usage(format!(
                "method {m} is not in this build; rebuild with `--features pmdk`"
            )));
        }
        return Ok((m, "chosen with --method".into()));
    }
    let m = medium::probe(output).with_context(|| format!("probe {}", output.display()))?;
    if m.dax {
        return Ok((
            Method::Nt,
            format!(
                "{} is DAX (persistent memory): non-temporal stores + fence",
                m.fs_type
            ),
        ));
    }
    if writers * 2 >= links as usize {
        return Ok((
            Method::Direct,
            format!(
                "{} is not DAX; {writers} writers for {links} links keep enough writes in flight: O_DIRECT and fdatasync",
                m.fs_type
            ),
        ));
    }
    match snbuf_persist::backends::uring::available() {
        Ok(()) => Ok((
            Method::Uring,
            format!(
                "{} is not DAX; {writers} writers for {links} links need a queue each: io_uring with O_DIRECT and fdatasync",
                m.fs_type
            ),
        )),
        Err(why) => Ok((
            Method::Direct,
            format!("{} is not DAX and {why}: O_DIRECT and fdatasync", m.fs_type),
        )),
    }
}

/// `20261121T233500Z`, from the system clock (UTC), for burst ids.
fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The recorder's configuration from the command line (and its config file). Refuses bad input
/// before anything runs, and then leaves nothing behind: an output directory it had to create
/// for probing the medium is removed again.
pub fn config_from_args(args: &RecordArgs) -> anyhow::Result<(RecordConfig, String)> {
    let args = &crate::config_file::merge(args)?;
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from("./snbuf-data"));
    for (flag, path) in [("--json", &args.json), ("--status-file", &args.status_file)] {
        if let Some(path) = path {
            check_parent_dir(flag, path)?;
        }
    }
    let created = !output.exists();
    std::fs::create_dir_all(&output)
        .map_err(|e| usage(format!("--output {}: {e}", output.display())))?;
    let result = build_config(args, output.clone());
    if result.is_err() && created {
        let _ = std::fs::remove_dir(&output);
    }
    result
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

fn build_config(args: &RecordArgs, output: PathBuf) -> anyhow::Result<(RecordConfig, String)> {
    let dune = args.profile.as_deref() == Some("dune");
    if let Some(p) = args.profile.as_deref().filter(|p| *p != "dune") {
        return Err(usage(format!("unknown profile '{p}' (known: dune)")));
    }
    let frame_type: FrameType = args
        .frame
        .as_deref()
        .unwrap_or("protodune-wib")
        .parse()
        .map_err(|e: snbuf_daq::frame::FrameTypeError| usage(e.to_string()))?;
    let fb = frame_type.frame_bytes() as f64;
    // The paper's unit: 10 links at the detector's own rate, 10 s buffer, 100 s after the trigger.
    let rate_bytes_per_s = match (&args.rate_per_link, dune) {
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
        Some(list) => cpu::parse_cpu_list(list).map_err(usage)?,
        None => cpu::allowed_cpus(),
    };
    let links = args.links.unwrap_or(10);
    let writers = args.writers.unwrap_or(links as usize);
    let (method, why) = choose_method(
        args.method.as_deref().unwrap_or("auto"),
        &output,
        links,
        writers,
    )?;
    let payload = match &args.replay {
        Some(path) => {
            let data = std::fs::read(path)
                .map_err(|e| usage(format!("--replay {}: {e}", path.display())))?;
            if data.is_empty() {
                return Err(usage(format!(
                    "--replay {}: the file is empty",
                    path.display()
                )));
            }
            Payload::Replay(Arc::new(data))
        }
        None => Payload::Pattern,
    };
    let chunk_frames = args
        .chunk_frames
        .unwrap_or(((1 << 20) as f64 / fb).max(1.0) as u32);
    let config = RecordConfig {
        frame_type,
        links,
        frames_per_s_per_link: rate_bytes_per_s / fb,
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
        burst_id: args
            .burst_id
            .clone()
            .unwrap_or_else(|| format!("{}-{}", utc_stamp(), std::process::id())),
        writers,
        cpus,
        page_size: if args.page_size == Some(2 << 20) {
            PageSize::Huge2M
        } else {
            PageSize::Small4K
        },
        chunk_frames,
        chunks_per_persist: args.chunks_per_persist.unwrap_or(8),
        payload,
        gaps: None,
        status_file: args.status_file.clone(),
        faults: args
            .inject_fault
            .iter()
            .map(|f| FaultPlan::parse(f).map_err(|e| usage(format!("--inject-fault: {e}"))))
            .collect::<anyhow::Result<_>>()?,
    };
    config.validate().map_err(|e| usage(e.to_string()))?;
    Ok((config, why))
}

pub fn run(args: RecordArgs) -> anyhow::Result<()> {
    let (config, why) = config_from_args(&args)?;
    let fb = config.frame_type.frame_bytes() as f64;
    let total_rate = config.frames_per_s_per_link * fb * config.links as f64;
    eprintln!(
        "snbuf record: {} links of {} ({} each, {} in total), buffer {:.1} s ({} of DRAM)",
        config.links,
        config.frame_type,
        Rate(config.frames_per_s_per_link * fb),
        Rate(total_rate),
        config.buffer.as_secs_f64(),
        Bytes(config.buffer_frames() * fb as u64 * config.links as u64)
    );
    eprintln!(
        "  trigger after {:.1} s, window {:.1} s before to {:.1} s after; method {} ({why})",
        config.trigger_after.as_secs_f64(),
        config.pre.as_secs_f64(),
        config.post.as_secs_f64(),
        config.method
    );
    let mut last: Option<(Duration, u64, u64)> = None;
    let report = record(&config, |p: &Progress| {
        let frames_in: u64 = p.links.iter().map(|l| l.frames_in).sum();
        let frames_out: u64 = p.links.iter().map(|l| l.frames_out).sum();
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
    .map_err(|e| match e {
        RecordError::Config(m) => usage(m),
        other => anyhow::Error::new(other),
    })?;

    let m = &report.manifest;
    println!("burst {} ({:?})", report.burst_dir.display(), m.state);
    println!(
        "  window      ticks {}..{} around trigger {} ({} frame type)",
        report.window.window_start_timestamp,
        report.window.window_end_timestamp,
        report.window.trigger_timestamp,
        m.frame
            .as_ref()
            .map(|f| f.frame_type.as_str())
            .unwrap_or("?")
    );
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
        "  CPU         {:.2} core-s per GiB recorded (writers {:.2} s, link emulation {:.2} s)",
        report.cpu_core_s_per_gib(),
        report.writer_cpu_s,
        report.source_cpu_s
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
        "  buffers     {} of DRAM on {} pages",
        Bytes(report.buffer_memory_bytes),
        report
            .buffer_page_bytes
            .map(|b| Bytes(b).to_string())
            .unwrap_or_else(|| "?".into())
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

fn write_json(path: &PathBuf, r: &snbuf_daq::RecordReport) -> std::io::Result<()> {
    let v = serde_json::json!({
        "burst_dir": r.burst_dir,
        "state": r.manifest.state,
        "trigger": r.window,
        "frame_bytes": r.frame_bytes,
        "frames_recorded": r.frames_recorded,
        "lost_frames": r.lost_frames,
        "input_bytes_per_s": r.input_bytes_per_s,
        "output_bytes_per_s": r.output_bytes_per_s,
        "method": r.manifest.method,
        "durability": r.durability,
        "survives_power_loss": r.survives_power_loss,
        "prepared_ahead": r.prepared_ahead,
        "buffer_memory_bytes": r.buffer_memory_bytes,
        "buffer_page_bytes": r.buffer_page_bytes,
        "skipped_at_source_per_link": r.skipped_at_source,
        "source_max_lag_s": r.source_max_lag_s,
        "writer_cpu_s": r.writer_cpu_s,
        "source_cpu_s": r.source_cpu_s,
        "cpu_core_s_per_gib": r.cpu_core_s_per_gib(),
        "links": r.manifest.links,
        "valid": r.verify.valid,
        "problems": r.verify.problems,
    });
    std::fs::write(
        path,
        serde_json::to_string_pretty(&v).expect("serialises") + "\n",
    )
}
