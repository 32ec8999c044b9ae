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
    eprintln!(
        "snbuf export: {} to {}{}",
        args.burst_dir.display(),
        dest.describe(),
        rate.map(|r| format!(" at most {}", Rate(r as f64)))
            .unwrap_or_default()
    );
    let bar = ProgressBar::new(snbuf_export::burst_bytes(&args.burst_dir));
    let r = export_burst(&args.burst_dir, &dest, &opts, |sent| bar.set_position(sent))
        .map_err(map_err)?;
    bar.finish_and_clear();
    let raw = (args.raw_compare)
        .then(|| compare_with_raw(args, &dest, &r))
        .transpose()?;
    if args.json {
        let mut v = serde_json::to_value(&r)?;
        if let Some((bytes, secs)) = raw {
            v["raw_upload_bytes"] = bytes.into();
            v["raw_upload_seconds"] = secs.into();
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        say_exported(&r);
    }
    Ok(())
}

/// `--raw-compare`: the same files uploaded plainly, the two rates side by side (on stderr with
/// `--json`, whose stdout is the JSON alone). The raw upload's bytes and seconds.
fn compare_with_raw(
    args: &ExportArgs,
    dest: &snbuf_export::Destination,
    r: &snbuf_export::ExportReport,
) -> anyhow::Result<(u64, f64)> {
    let (bytes, secs) =
        snbuf_export::raw_upload(&args.burst_dir, dest, args.part_size).map_err(map_err)?;
    let export_rate = r.sending_bytes_per_s();
    let raw_rate = bytes as f64 / secs.max(1e-9);
    let line = format!(
        "export sent {} at {} (plus {:.1} s reading back); raw multipart upload of the same files, same client: {}; export / raw = {:.2}",
        Bytes(r.bytes_sent),
        Rate(export_rate),
        r.verify_seconds,
        Rate(raw_rate),
        export_rate / raw_rate
    );
    if args.json {
        eprintln!("{line}");
    } else {
        println!("{line}");
    }
    Ok((bytes, secs))
}

fn say_exported(r: &snbuf_export::ExportReport) {
    println!("{}", r.summary());
    if r.deleted {
        println!("removed the local copy {}", r.burst_dir);
    }
}
