//! `snbuf export`: a sealed burst to an object store or a directory (`snbuf_export`).

use indicatif::ProgressBar;
use snbuf_export::{export_burst, Destination, ExportError, ExportOptions};
use snbuf_units::{Bytes, Rate};

use crate::cli::ExportArgs;
use crate::exit::{usage, Failure};

/// The destination and options of an export, checked (as usage errors) before anything runs.
pub fn options(
    url: &str,
    s3: &snbuf_export::S3Settings,
    rate: Option<&str>,
    part_bytes: u64,
    delete_after_verify: bool,
) -> anyhow::Result<(Destination, ExportOptions)> {
    let rate = rate
        .map(|r| {
            snbuf_units::parse_rate_bytes_per_s(r)
                .map_err(|e| usage(format!("rate: {e}")))
                .and_then(|v| {
                    if v == 0 {
                        Err(usage("the export rate must be more than 0"))
                    } else {
                        Ok(v)
                    }
                })
        })
        .transpose()?;
    let dest = Destination::parse_with(url, s3).map_err(map_err)?;
    Ok((
        dest,
        ExportOptions {
            rate_bytes_per_s: rate,
            part_bytes,
            delete_after_verify,
        },
    ))
}

/// Queues for export every burst of `server` that ends from now on, and those an earlier run
/// left unexported (sealed, failed or recovered, without `export.json`).
pub fn follow_bursts(
    server: &std::sync::Arc<snbuf_unit::control::Server>,
    queue: std::sync::Arc<snbuf_export::queue::ExportQueue>,
) -> std::io::Result<()> {
    let out = server.unit().config().output_dir.clone();
    for e in std::fs::read_dir(&out)?.flatten() {
        let dir = e.path();
        if let Ok(m) = snbuf_burst::Manifest::read(&dir) {
            if m.state != snbuf_burst::BurstState::Recording
                && !dir.join(snbuf_export::EXPORTED).exists()
            {
                queue.push(dir);
            }
        }
    }
    let server = server.clone();
    let mut seen = server.recent_bursts().0;
    std::thread::Builder::new()
        .name("snbuf-export-follow".into())
        .spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let (total, recent) = server.recent_bursts();
            let new = (total - seen).min(recent.len() as u64) as usize;
            for b in &recent[recent.len() - new..] {
                // A burst that could not even be created has nothing to export.
                if b.state != "error" {
                    queue.push(out.join(&b.burst_id));
                }
            }
            seen = total;
        })?;
    Ok(())
}

pub fn run(args: &ExportArgs) -> anyhow::Result<()> {
    if !args.burst_dir.is_dir() {
        return Err(usage(format!(
            "{}: not a burst directory",
            args.burst_dir.display()
        )));
    }
    let s3 = match &args.config {
        Some(path) => crate::config_file::s3_settings(path)?,
        None => Default::default(),
    };
    let (dest, opts) = options(
        &args.to,
        &s3,
        args.rate.as_deref(),
        args.part_size,
        args.delete_after_verify,
    )?;
    let rate = opts.rate_bytes_per_s;
    let total: u64 = std::fs::read_dir(&args.burst_dir)
        .map(|d| {
            d.flatten()
                // Following symbolic links: a link's file on another output counts.
                .filter_map(|e| std::fs::metadata(e.path()).ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0);
    eprintln!(
        "snbuf export: {} to {}{}",
        args.burst_dir.display(),
        dest.describe(),
        rate.map(|r| format!(" at most {}", Rate(r as f64)))
            .unwrap_or_default()
    );
    let bar = ProgressBar::new(total);
    let r = export_burst(&args.burst_dir, &dest, &opts, |sent| bar.set_position(sent))
        .map_err(map_err)?;
    bar.finish_and_clear();
    let mut raw = None;
    if args.raw_compare {
        let (bytes, secs) =
            snbuf_export::raw_upload(&args.burst_dir, &dest, args.part_size).map_err(map_err)?;
        raw = Some((bytes, secs));
        let send_s = r.seconds - r.verify_seconds;
        let export_rate = r.bytes_sent as f64 / send_s.max(1e-9);
        let raw_rate = bytes as f64 / secs.max(1e-9);
        let line = format!(
            "export sent {} at {} (plus {:.1} s reading back); raw multipart upload of the same files, same client: {}; export / raw = {:.2}",
            Bytes(r.bytes_sent),
            Rate(export_rate),
            r.verify_seconds,
            Rate(raw_rate),
            export_rate / raw_rate
        );
        // With --json, stdout is the JSON alone; the comparison is in it too.
        if args.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }
    if args.json {
        let mut v = serde_json::to_value(&r)?;
        if let Some((bytes, secs)) = raw {
            v["raw_upload_bytes"] = bytes.into();
            v["raw_upload_seconds"] = secs.into();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "exported {} objects to {}: {} sent in {:.1} s ({}){}; every object read back and checked",
            r.objects.len(),
            r.destination,
            Bytes(r.bytes_sent),
            r.seconds,
            Rate(r.bytes_sent as f64 / r.seconds.max(1e-9)),
            if r.parts_resumed > 0 {
                format!(", {} part(s) already sent before", r.parts_resumed)
            } else {
                String::new()
            }
        );
        if r.deleted {
            println!("removed the local copy {}", r.burst_dir);
        }
    }
    Ok(())
}

fn map_err(e: ExportError) -> anyhow::Error {
    match e {
        ExportError::Usage(m) => usage(m),
        other => anyhow::Error::new(Failure(other.to_string())),
    }
}
