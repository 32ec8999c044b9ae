//! `snbuf convert`, `inspect` and `extract` as the command line runs them: a burst for the
//! people and tools that analyse it, with each command's arguments (`args.rs`), its progress
//! and its table in human units. The binary only parses and calls.

mod args;

use snbuf_console::{note, say};
use std::path::Path;

use snbuf_burst::BurstReader;
use snbuf_console::{usage, Failure, Table};
use snbuf_quantity::Bytes;

use crate::inspect::{InspectOptions, InspectedLink};
pub use args::{ConvertArgs, ConvertTo, ExtractArgs, Hdf5Filter, InspectArgs};

/// A path that is not a burst, or a link it does not have, is the user's mistake (exit 2); any
/// other failure to read a burst is the run's (exit 1).
pub fn read_error(e: snbuf_burst::ReadError) -> anyhow::Error {
    use snbuf_burst::manifest::ManifestError;
    use snbuf_burst::ReadError;
    match e {
        ReadError::Manifest(ManifestError::Missing { .. })
        | ReadError::Manifest(ManifestError::Invalid { .. })
        | ReadError::NoSuchLink { .. }
        | ReadError::NoFrameType { .. } => usage(format!("{e} (is it a burst directory?)")),
        other => anyhow::Error::new(other),
    }
}

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
    let got = crate::extract(&burst, args.link, &args.out, from, to).map_err(|e| match e {
        crate::ExtractError::Read(r) => read_error(r),
        crate::ExtractError::Exists(_) => usage(e.to_string()),
        crate::ExtractError::Empty { .. } => {
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
    note!(
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
    if let Some(cut) = got.cut_short {
        return Err(anyhow::Error::new(Failure(format!(
            "link {}: its file is damaged at offset {} ({} valid-looking chunk(s) after it not read): {} holds only the frames before it; `snbuf verify {}` says what is wrong",
            args.link,
            cut.at_offset,
            cut.chunks_after,
            args.out.display(),
            args.burst_dir.display()
        ))));
    }
    Ok(())
}

/// `snbuf inspect`: the library's inspection (`crate::inspect`), printed, or as JSON.
pub fn inspect(args: &InspectArgs) -> anyhow::Result<()> {
    let burst = open(&args.burst_dir)?;
    let inspection = crate::inspect::inspect(
        &burst,
        InspectOptions {
            link: args.link,
            chunk: args.chunk,
            frames: args.frames,
            hex: args.hex,
        },
    )
    .map_err(read_error)?;
    if args.json {
        say!("{}", serde_json::to_string_pretty(&inspection)?);
        return Ok(());
    }
    print_burst_line(&burst);
    for link in &inspection.links {
        print_link(link);
    }
    Ok(())
}

/// The burst: its id, state, frame type and clock, run and unit, window and method.
fn print_burst_line(burst: &BurstReader) {
    let (m, layout) = (&burst.manifest, burst.layout);
    say!(
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
        say!(
            "window [{}, {}) around trigger {}; method {}, durability {}",
            t.window_start_timestamp,
            t.window_end_timestamp,
            t.trigger_timestamp,
            m.method,
            m.durability
        );
    }
}

/// A link: its file and identity, a table of its chunks, and with --frames each frame.
fn print_link(link: &InspectedLink) {
    say!(
        "\nlink {} ({}): {} chunks, {} frames, lost {}, end {}{}",
        link.link,
        link.file,
        link.valid_chunks,
        link.frames,
        link.lost_frames,
        link.end,
        link.identity.map_or(String::new(), |i| format!(
            "; det {} crate {} slot {} stream {}, source id {}",
            i.det_id, i.crate_id, i.slot_id, i.stream_id, i.source_id
        )),
    );
    let mut t = Table::new(&[
        ("chunk", true),
        ("offset", true),
        ("first ts", true),
        ("last ts", true),
        ("frames", true),
        ("bytes", true),
        ("crc", false),
    ]);
    for c in &link.chunks {
        t.row(vec![
            c.sequence.to_string(),
            c.offset.to_string(),
            c.first_timestamp.to_string(),
            c.last_timestamp.to_string(),
            c.frame_count.to_string(),
            Bytes(c.payload_bytes as u64).to_string(),
            c.crc.clone(),
        ]);
    }
    snbuf_console::out::say_text(&t.render());
    for c in link.chunks.iter().filter(|c| c.frames.is_some()) {
        say!("chunk {}:", c.sequence);
        for f in c.frames.iter().flatten() {
            let v = |x: Option<u64>| x.map_or("-".into(), |x| x.to_string());
            say!(
                "  frame {:>4}  ts {}  seq_id {}  det {} crate {} slot {} stream {}",
                f.frame,
                f.timestamp,
                v(f.seq_id),
                v(f.det_id.map(u64::from)),
                v(f.crate_id.map(u64::from)),
                v(f.slot_id.map(u64::from)),
                v(f.stream_id.map(u64::from))
            );
            if let Some(h) = &f.hex {
                say!("    {h}");
            }
        }
    }
}

#[cfg(not(feature = "hdf5"))]
pub fn convert(_: &ConvertArgs) -> anyhow::Result<()> {
    Err(anyhow::Error::new(Failure(
        "this snbuf was built without HDF5: build it with `cargo build --release --features hdf5` \
         (Debian: apt-get install libhdf5-dev)"
            .into(),
    )))
}

/// The burst's window, once the paths `convert` writes to are usable: a mistake in either is the
/// user's, said before anything is written.
#[cfg(feature = "hdf5")]
fn convertible(args: &ConvertArgs, burst: &BurstReader) -> anyhow::Result<snbuf_burst::Window> {
    if let Some(p) = &args.json {
        snbuf_quantity::values::check_parent_dir("--json", p).map_err(|e| usage(e.to_string()))?;
    }
    if args.out_dir.exists() && !args.out_dir.is_dir() {
        return Err(usage(format!(
            "{}: not a directory",
            args.out_dir.display()
        )));
    }
    burst.manifest.trigger.clone().ok_or_else(|| {
        usage(format!(
            "{}: the burst has no trigger window",
            burst.dir.display()
        ))
    })
}

#[cfg(feature = "hdf5")]
pub fn convert(args: &ConvertArgs) -> anyhow::Result<()> {
    use crate::hdf5::{convert, ConvertError, ConvertOptions};
    let burst = open(&args.burst_dir)?;
    let window = convertible(args, &burst)?;
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
        filter: args.filter,
    };
    let bar = snbuf_console::progress::bar(1);
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
    note!(
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
        say!("{}", f.display());
    }
    if let Some(p) = &args.json {
        let record = crate::hdf5::ConvertRecord {
            burst: burst.dir.clone(),
            window_start_timestamp: window.window_start_timestamp,
            window_end_timestamp: window.window_end_timestamp,
            slice_ticks,
            converted: done,
            seconds: secs,
        };
        std::fs::write(p, serde_json::to_string_pretty(&record)? + "\n")?;
    }
    Ok(())
}
