//! `snbuf export`: a sealed burst to an object store or a directory (`snbuf_export`).

use indicatif::ProgressBar;
use snbuf_export::export_burst;
use snbuf_quantity::{Bytes, Rate};

use crate::cli::ExportArgs;
use crate::exit::usage;
use crate::export_setup::{map_err, options};

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
        args.codec,
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
        let send_s = r.seconds - r.verify_seconds - r.coding_seconds;
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
