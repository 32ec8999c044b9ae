//! `snbuf serve`, `snbuf trigger`, `snbuf status`: a unit that records on demand, and its clients.

use std::io::Write as _;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use snbuf_daq::control::{request, ControlError, Server};
use snbuf_daq::{RecordError, Unit};
use snbuf_units::{Bytes, Rate};

use crate::cli::{ServeArgs, StatusArgs, TriggerArgs};
use crate::exit::{usage, Failure};

pub fn serve(args: ServeArgs) -> anyhow::Result<()> {
    keep_large_allocations_off_the_heap();
    // Checked before anything starts: a bad fleet option must not leave a half-started unit.
    let fleet = match &args.nats {
        Some(url) => Some((
            crate::cmd_fleet::nats_options(url, &args.nats_auth)?,
            crate::cmd_fleet::unit_id(args.unit.as_deref())?,
        )),
        None => None,
    };
    if let Some(socket) = &args.socket {
        crate::cmd_record::check_parent_dir("--socket", socket)?;
    }
    let export = match &args.export_to {
        Some(url) => Some(crate::cmd_export::options(
            url,
            &crate::config_file::merge(&args.record)?
                .s3
                .unwrap_or_default(),
            args.export_rate.as_deref(),
            16 << 20,
            args.delete_after_verify,
        )?),
        None => {
            if args.export_rate.is_some() || args.delete_after_verify {
                return Err(usage(
                    "--export-rate and --delete-after-verify need --export-to",
                ));
            }
            None
        }
    };
    let (mut config, why) = crate::cmd_record::config_from_args(&args.record)?;
    if args.record.burst_id.is_none() {
        config.burst_id = format!("burst-{}", config.burst_id);
    }
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(|| config.output_dir.join("snbuf.sock"));
    let unit = Unit::start(&config).map_err(|e| match e {
        RecordError::Config(m) => usage(m),
        other => anyhow::Error::new(other),
    })?;
    let server = std::sync::Arc::new(Server::bind(unit, &socket)?);
    let log: std::sync::Arc<dyn Fn(&str) + Send + Sync> = std::sync::Arc::new(|line: &str| {
        let _ = writeln!(std::io::stderr(), "  {line}");
    });
    let exporter = match export {
        Some((dest, opts)) => {
            match snbuf_export::probe(&dest) {
                Ok(()) => eprintln!("  export to {}", dest.describe()),
                Err(e) => eprintln!(
                    "  export: {} is unreachable ({e}); recording locally, exports are tried again every 10 s",
                    dest.describe()
                ),
            }
            let q = std::sync::Arc::new(snbuf_export::queue::ExportQueue::start(
                dest,
                opts,
                log.clone(),
            )?);
            crate::cmd_export::follow_bursts(&server, q.clone())?;
            Some(q)
        }
        None => None,
    };
    let extra: snbuf_daq::metrics::ExtraMetrics = match &exporter {
        Some(q) => {
            let q = q.clone();
            std::sync::Arc::new(move || q.metrics_text())
        }
        None => std::sync::Arc::new(String::new),
    };
    let metrics = match args.metrics {
        Some(addr) => Some(
            snbuf_daq::metrics::serve(addr, server.clone(), extra).map_err(|e| {
                // Nothing ran yet: leave no socket behind.
                let _ = std::fs::remove_file(&socket);
                usage(format!("--metrics {addr}: {e}"))
            })?,
        ),
        None => None,
    };
    let fb = config.frame_type.frame_bytes() as f64;
    eprintln!(
        "snbuf serve: {} links of {} at {} each, buffer {:.1} s ({}), method {} ({why})",
        config.links,
        config.frame_type,
        Rate(config.frames_per_s_per_link * fb),
        config.buffer.as_secs_f64(),
        Bytes(server.unit().buffer_memory_bytes()),
        config.method
    );
    eprintln!(
        "  control socket {} (mode 0600); bursts go to {}",
        socket.display(),
        config.output_dir.display()
    );
    eprintln!(
        "  trigger with: snbuf trigger --socket {} --wait",
        socket.display()
    );
    if let Some(addr) = metrics {
        eprintln!("  metrics at http://{addr}/metrics");
    }
    // Held for the life of the server: dropping it stops the fleet link.
    let _fleet_link = match fleet {
        Some((opts, id)) => {
            let url = opts.url.clone();
            let (link, unreachable) = snbuf_fleet::UnitLink::start(
                opts,
                id.clone(),
                server.clone(),
                exporter.clone().map(|q| {
                    std::sync::Arc::new(ExporterReport(q))
                        as std::sync::Arc<dyn snbuf_fleet::unit_link::ExportReporter>
                }),
                log.clone(),
            )?;
            match unreachable {
                Some(e) => eprintln!("  fleet: {e}"),
                None => eprintln!("  fleet: unit {id} on {url}"),
            }
            Some(link)
        }
        None => None,
    };
    // A unit outlives its terminal: once stderr is gone (closed pipe, logged-out session), log
    // lines are dropped rather than ending the recorder, as eprintln! would by panicking.
    server.run(|line| {
        let _ = writeln!(std::io::stderr(), "  {line}");
    });
    let _ = writeln!(std::io::stderr(), "snbuf serve: stopped");
    Ok(())
}

fn ask(socket: &std::path::Path, req: &Value) -> anyhow::Result<Value> {
    let reply = request(socket, req).map_err(|e| match e {
        ControlError::NotRunning { .. } => anyhow::Error::new(Failure(e.to_string())),
        other => anyhow::Error::new(other),
    })?;
    if reply["ok"] != true {
        let msg = reply["error"]
            .as_str()
            .unwrap_or("refused without a reason")
            .to_string();
        return Err(anyhow::Error::new(Failure(format!(
            "the server refused: {msg}"
        ))));
    }
    Ok(reply)
}

pub fn trigger(args: &TriggerArgs) -> anyhow::Result<()> {
    if let Some(url) = &args.nats {
        return crate::cmd_fleet::trigger(args, url);
    }
    let at = match args.at.as_str() {
        "now" => json!("now"),
        t => json!(t.parse::<u64>().map_err(|_| usage(format!(
            "--at '{t}': expected `now` or a timestamp in ticks"
        )))?),
    };
    let mut req = json!({"cmd": "trigger", "at": at});
    if let Some(p) = args.pre {
        req["pre_s"] = json!(p.as_secs_f64());
    }
    if let Some(p) = args.post {
        req["post_s"] = json!(p.as_secs_f64());
    }
    if let Some(id) = &args.burst_id {
        snbuf_burst::burst_writer::check_burst_id(id)
            .map_err(|e| usage(format!("--burst-id: {e}")))?;
        req["burst_id"] = json!(id);
    }
    let reply = ask(&args.socket, &req)?;
    let id = reply["burst_id"].as_str().unwrap_or("?").to_string();
    println!(
        "accepted: burst {id}, window ticks {}..{}",
        reply["window"]["window_start_timestamp"], reply["window"]["window_end_timestamp"]
    );
    if !args.wait {
        return Ok(());
    }
    let started = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(200));
        let status = ask(&args.socket, &json!({"cmd": "status"}))?;
        if let Some(b) = status["bursts"]
            .as_array()
            .and_then(|v| v.iter().find(|b| b["burst_id"] == id.as_str()))
        {
            println!(
                "burst {id}: {} in {:.1} s, {} frames, {} lost, {}",
                b["state"].as_str().unwrap_or("?"),
                started.elapsed().as_secs_f64(),
                b["frames"],
                b["lost_frames"],
                if b["valid"] == true {
                    "valid"
                } else {
                    "NOT VALID"
                }
            );
            if b["valid"] == true {
                return Ok(());
            }
            let why = b["error"].as_str().unwrap_or("the burst does not verify");
            return Err(anyhow::Error::new(Failure(format!("burst {id}: {why}"))));
        }
    }
}

pub fn status(args: &StatusArgs) -> anyhow::Result<()> {
    let s = ask(&args.socket, &json!({"cmd": "status"}))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&s).expect("serialises"));
        return Ok(());
    }
    println!(
        "up {:.0} s: {} links of {} at {} each, buffer {:.1} s, method {}",
        s["uptime_s"].as_f64().unwrap_or(0.0),
        s["links"],
        s["frame_type"].as_str().unwrap_or("?"),
        Rate(s["rate_bytes_per_s_per_link"].as_f64().unwrap_or(0.0)),
        s["buffer_s"].as_f64().unwrap_or(0.0),
        s["method"].as_str().unwrap_or("?")
    );
    match s["recording"].as_array() {
        Some(links) => {
            let out: u64 = links.iter().filter_map(|l| l["frames_out"].as_u64()).sum();
            let lost: u64 = links.iter().filter_map(|l| l["lost_frames"].as_u64()).sum();
            println!("recording: {out} frames durable so far, {lost} lost");
            for l in links {
                println!(
                    "  link {}: {} chunks durable, up to timestamp {}{}",
                    l["link"],
                    l["durable_chunks"],
                    l["durable_until_timestamp"]
                        .as_u64()
                        .map(|t| t.to_string())
                        .unwrap_or_else(|| "-".into()),
                    if l["failed"] == true { ", FAILED" } else { "" }
                );
            }
        }
        None => println!(
            "idle: ready for a trigger (next burst's files: {})",
            s["next_burst"].as_str().unwrap_or("?")
        ),
    }
    for b in s["bursts"].as_array().into_iter().flatten() {
        println!(
            "  {}: {} frames, {} lost, {}",
            b["burst_id"].as_str().unwrap_or("?"),
            b["frames"],
            b["lost_frames"],
            if b["valid"] == true {
                "valid".to_string()
            } else {
                format!("NOT VALID {}", b["error"].as_str().unwrap_or(""))
            }
        );
    }
    Ok(())
}

/// A unit runs for months, and each burst allocates and frees buffers of a chunk or more (the
/// verify pass reads whole chunks). glibc serves such sizes with mmap until the first is freed,
/// then raises its threshold and serves them from per-thread heaps, where they fragment: resident
/// memory crept up ~70 KiB per burst in the soak run. A fixed threshold keeps them mapped and
/// returned to the system when freed, so memory stays flat (RELIABILITY.md, soak).
fn keep_large_allocations_off_the_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; called before the unit starts its threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
    }
}

/// The exporter as the fleet link sees it.
struct ExporterReport(std::sync::Arc<snbuf_export::queue::ExportQueue>);

impl snbuf_fleet::unit_link::ExportReporter for ExporterReport {
    fn progress(&self) -> Value {
        self.0.progress()
    }
    fn take_exported(&self) -> Vec<String> {
        self.0.take_exported()
    }
}
