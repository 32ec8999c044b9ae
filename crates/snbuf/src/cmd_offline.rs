//! `snbuf convert`, `inspect` and `extract`: a burst for the people and tools that analyse it.

use std::path::Path;

use serde_json::json;
use snbuf_burst::{BurstReader, End, ReadError};
use snbuf_quantity::Bytes;

use crate::cli::{ConvertArgs, ExtractArgs, InspectArgs};
use crate::exit::{read_error, usage, Failure};
use crate::table::Table;

fn open(dir: &Path) -> anyhow::Result<BurstReader> {
    if !dir.is_dir() {
        return Err(usage(format!("{}: not a burst directory", dir.display())));
    }
    BurstReader::open(dir).map_err(read_error)
}

pub fn extract(args: &ExtractArgs) -> anyhow::Result<()> {
    let burst = open(&args.burst_dir)?;
    if args.out.exists() {
        return Err(usage(format!(
            "{} exists: snbuf does not write over a file",
            args.out.display()
        )));
    }
    if args
        .out
        .parent()
        .is_some_and(|p| !p.as_os_str().is_empty() && !p.is_dir())
    {
        return Err(usage(format!(
            "--out {}: its directory does not exist",
            args.out.display()
        )));
    }
    let (from, to) = (args.from.unwrap_or(0), args.to.unwrap_or(u64::MAX));
    if from >= to {
        return Err(usage(format!("--from {from} is not before --to {to}")));
    }
    let got =
        snbuf_offline::extract(&burst, args.link, &args.out, from, to).map_err(|e| match e {
            snbuf_offline::ExtractError::Read(r) => read_error(r),
            snbuf_offline::ExtractError::Exists(_) => usage(e.to_string()),
            snbuf_offline::ExtractError::Empty { .. } => {
                let held = burst
                    .manifest
                    .links
                    .iter()
                    .find(|l| l.link == args.link)
                    .and_then(|l| Some((l.data.first_timestamp?, l.data.last_timestamp?)));
                match held {
                    Some((first, last)) => usage(format!(
                        "{e}: the link holds timestamps {first}..={last} (`snbuf inspect` shows them)"
                    )),
                    None => anyhow::Error::new(Failure(format!("{e}: the link recorded no frame"))),
                }
            }
            other => anyhow::Error::new(other),
        })?;
    eprintln!(
        "link {}: {} frames ({}) of {}, timestamps {}..{}, to {}",
        args.link,
        got.frames,
        Bytes(got.bytes),
        burst
            .manifest
            .frame
            .as_ref()
            .map(|f| f.frame_type.as_str())
            .unwrap_or("?"),
        got.first_timestamp.map_or("-".into(), |t| t.to_string()),
        got.last_timestamp.map_or("-".into(), |t| t.to_string()),
        args.out.display()
    );
    Ok(())
}

fn end_text(end: &End) -> String {
    match end {
        End::Clean { zero_tail_bytes } if *zero_tail_bytes > 0 => {
            format!("clean ({} of zeros after)", Bytes(*zero_tail_bytes))
        }
        End::Clean { .. } => "clean".into(),
        other => format!("{other:?}"),
    }
}

/// One piece: the inspection's lines in the order they print.
pub fn inspect(args: &InspectArgs) -> anyhow::Result<()> {
    let burst = open(&args.burst_dir)?;
    let m = &burst.manifest;
    let links: Vec<u32> = match args.link {
        Some(l) => vec![l],
        None => burst.links(),
    };
    let layout = burst.layout;
    let mut out_links = Vec::new();
    if !args.json {
        println!(
            "burst {} in {}: {:?}, {} ({} B a frame, {} ticks at {} Hz), run {}, unit {}",
            m.burst_id,
            burst.dir.display(),
            m.state,
            m.frame
                .as_ref()
                .map(|f| f.frame_type.as_str())
                .unwrap_or("?"),
            layout.frame_bytes,
            layout.ticks_per_frame,
            layout.clock_hz,
            m.run_number.map_or("-".into(), |r| r.to_string()),
            m.unit.as_deref().unwrap_or("-"),
        );
        if let Some(t) = &m.trigger {
            println!(
                "window [{}, {}) around trigger {}; method {}, durability {}",
                t.window_start_timestamp,
                t.window_end_timestamp,
                t.trigger_timestamp,
                m.method,
                m.durability
            );
        }
    }
    let mut payload = Vec::new();
    for link in links {
        let reader = burst.link(link).map_err(read_error)?;
        let record = m.links.iter().find(|l| l.link == link);
        let chunks: Vec<_> = reader
            .chunks()
            .iter()
            .filter(|c| args.chunk.is_none_or(|k| c.sequence == k))
            .collect();
        if !args.json {
            let id = record.and_then(|r| r.identity.as_ref());
            println!(
                "\nlink {link} ({}): {} chunks, {} frames, lost {}, end {}{}",
                reader.path.display(),
                reader.chunks().len(),
                reader.report.frames(),
                record.map_or(0, |r| r.lost_frames),
                end_text(reader.end()),
                id.map_or(String::new(), |i| format!(
                    "; det {} crate {} slot {} stream {}, source id {}",
                    i.det_id, i.crate_id, i.slot_id, i.stream_id, i.source_id
                )),
            );
        }
        let mut t = Table::new(&[
            ("chunk", true),
            ("offset", true),
            ("first ts", true),
            ("last ts", true),
            ("frames", true),
            ("bytes", true),
            ("crc", false),
        ]);
        let mut json_chunks = Vec::new();
        for c in chunks {
            // Read again, so that the CRC shown is the one checked now.
            let crc = match reader.read_chunk(c, &mut payload) {
                Ok(_) => "ok",
                Err(ReadError::Changed { .. }) => "BAD",
                Err(e) => return Err(anyhow::Error::new(e)),
            };
            t.row(vec![
                c.sequence.to_string(),
                c.offset.to_string(),
                c.first_timestamp.to_string(),
                c.last_timestamp.to_string(),
                c.frame_count.to_string(),
                Bytes(c.payload_bytes as u64).to_string(),
                crc.into(),
            ]);
            let mut frames = Vec::new();
            if args.frames && crc == "ok" {
                for (k, f) in payload
                    .chunks_exact(layout.frame_bytes as usize)
                    .enumerate()
                {
                    let id = layout.identity(f);
                    frames.push(json!({
                        "frame": k,
                        "timestamp": layout.timestamp(f),
                        "seq_id": layout.sequence(f),
                        "det_id": id.map(|i| i.det_id),
                        "crate_id": id.map(|i| i.crate_id),
                        "slot_id": id.map(|i| i.slot_id),
                        "stream_id": id.map(|i| i.stream_id),
                        "hex": args.hex.then(|| hex(&f[..f.len().min(64)])),
                    }));
                }
            }
            json_chunks.push(json!({
                "sequence": c.sequence, "offset": c.offset,
                "first_timestamp": c.first_timestamp, "last_timestamp": c.last_timestamp,
                "frame_count": c.frame_count, "payload_bytes": c.payload_bytes,
                "stride_bytes": c.stride_bytes, "crc": crc,
                "frames": args.frames.then_some(frames),
            }));
        }
        if !args.json {
            print!("{}", t.render());
            if args.frames {
                for c in &json_chunks {
                    println!("chunk {}:", c["sequence"]);
                    for f in c["frames"].as_array().into_iter().flatten() {
                        let v = |k: &str| f[k].as_u64().map_or("-".into(), |x| x.to_string());
                        println!(
                            "  frame {:>4}  ts {}  seq_id {}  det {} crate {} slot {} stream {}",
                            v("frame"),
                            v("timestamp"),
                            v("seq_id"),
                            v("det_id"),
                            v("crate_id"),
                            v("slot_id"),
                            v("stream_id")
                        );
                        if let Some(h) = f["hex"].as_str() {
                            println!("    {h}");
                        }
                    }
                }
            }
        }
        out_links.push(json!({
            "link": link, "file": reader.path.display().to_string(),
            "identity": record.and_then(|r| r.identity.as_ref()).map(|i| serde_json::to_value(i).ok()),
            "end": format!("{:?}", reader.end()), "chunks": json_chunks,
        }));
    }
    if args.json {
        let v = json!({ "manifest": m, "links": out_links });
        println!("{}", serde_json::to_string_pretty(&v)?);
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(not(feature = "hdf5"))]
pub fn convert(_: &ConvertArgs) -> anyhow::Result<()> {
    Err(anyhow::Error::new(crate::exit::Failure(
        "this snbuf was built without HDF5: build it with `cargo build --release --features hdf5` \
         (Debian: apt-get install libhdf5-dev)"
            .into(),
    )))
}

#[cfg(feature = "hdf5")]
pub fn convert(args: &ConvertArgs) -> anyhow::Result<()> {
    use snbuf_offline::hdf5::{convert, ConvertError, ConvertOptions};
    let burst = open(&args.burst_dir)?;
    if let Some(p) = &args.json {
        crate::args::check_parent_dir("--json", p)?;
    }
    if args.out_dir.exists() && !args.out_dir.is_dir() {
        return Err(usage(format!(
            "{}: not a directory",
            args.out_dir.display()
        )));
    }
    let window = burst.manifest.trigger.clone().ok_or_else(|| {
        usage(format!(
            "{}: the burst has no trigger window",
            burst.dir.display()
        ))
    })?;
    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| usage(format!("{}: {e}", args.out_dir.display())))?;
    let ticks_per_s = burst.layout.clock_hz as f64;
    let slice_ticks = ((args.slice.as_secs_f64() * ticks_per_s) as u64).max(1);
    let opts = ConvertOptions {
        out_dir: args.out_dir.clone(),
        slice_ticks,
        max_file_bytes: args.max_file_size,
        operational_environment: args.operational_environment.clone(),
        offline_data_stream: args.offline_data_stream.clone(),
        run_was_for_test_purposes: args.test_run,
    };
    let bar = crate::progress::bar(1);
    let started = std::time::Instant::now();
    let done = convert(&burst, &opts, &mut |done, total| {
        bar.set_length(total.max(1));
        bar.set_position(done);
    })
    .map_err(|e| match e {
        ConvertError::Exists(_) | ConvertError::NoWindow(_) => usage(e.to_string()),
        ConvertError::Read(r) => read_error(r),
        other => anyhow::Error::new(other),
    })?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "converted {} to {} file(s): {} records of {:.3} s, {} fragments, {} frames ({}), {} \
         fragments incomplete ({} frames missing), {:.1} s",
        burst.dir.display(),
        done.files.len(),
        done.records,
        args.slice.as_secs_f64(),
        done.fragments,
        done.frames,
        Bytes(done.bytes),
        done.incomplete_fragments,
        done.missing_frames,
        secs
    );
    for f in &done.files {
        println!("{}", f.display());
    }
    if let Some(p) = &args.json {
        let v = json!({
            "burst": burst.dir.display().to_string(),
            "window_start_timestamp": window.window_start_timestamp,
            "window_end_timestamp": window.window_end_timestamp,
            "slice_ticks": slice_ticks,
            "files": done.files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>(),
            "records": done.records, "fragments": done.fragments, "frames": done.frames,
            "bytes": done.bytes, "incomplete_fragments": done.incomplete_fragments,
            "missing_frames": done.missing_frames, "seconds": secs,
        });
        std::fs::write(p, serde_json::to_string_pretty(&v)? + "\n")?;
    }
    Ok(())
}
