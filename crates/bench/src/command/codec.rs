//! `snbuf bench codec`: the frames to measure on (emulated, every frame its own noise, or a
//! user's file), the run, a table of ratio and GiB/s, and the targets judged beside it.

use anyhow::Context;
use snbuf_console::{note, say};
use snbuf_frames::FrameType;
use snbuf_readout::framegen::{FrameGen, Payload};

use super::args::CodecArgs;
use super::runner::{run_suite, Suite};
use crate::codec::{self, CodecConfig, CodecResult, Kind};
use crate::{Machine, OpClock};
use snbuf_console::{usage, Table};

/// The most bytes of frames a run measures on: it holds them, their coded form and what comes
/// back, in memory.
const MAX_BYTES: u64 = 2 << 30;

pub fn run(args: CodecArgs) -> anyhow::Result<()> {
    let frame_type: FrameType = args
        .frame_type
        .parse()
        .map_err(|e| usage(format!("--frame-type {}: {e}", args.frame_type)))?;
    if args.passes == 0 || args.frames == 0 {
        return Err(usage("--passes and --frames must be at least 1"));
    }
    let frame_bytes = frame_type.frame_bytes() as usize;
    let (raw, source) = frames_to_measure(&args, frame_type)?;
    // The run makes a directory of its own in it.
    let scratch = args.scratch.clone().unwrap_or_else(|| {
        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        }
    });
    // (As coded: never more than the frames there are, so that the results say what ran.)
    let frames = raw.len() / frame_bytes;
    let chunk_frames = match args.chunk_frames {
        None => snbuf_unit::chunk_cuts::default_chunk_frames(frame_bytes as u64) as usize,
        Some(0) => frames,
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
    }
    .min(frames);
    let config = CodecConfig {
        frame_type,
        raw,
        source,
        chunk_frames,
        passes: args.passes,
        scratch,
    };
    note!(
        "snbuf bench codec: {} of {frame_type} frames ({}) coded in chunks of {chunk_frames} \
         frames, fastest of {} passes, one core each",
        snbuf_quantity::Bytes(config.raw.len() as u64),
        config.source,
        args.passes
    );
    let clock = OpClock::calibrate(std::time::Duration::from_millis(20));
    let machine = Machine::probe(&[], clock.describe(), env!("SNBUF_GIT_COMMIT"));
    let suite = Suite {
        name: "codec",
        steps: codec::steps(),
        machine: &machine,
        json: args.json.as_deref(),
        render,
        notes: |r| &r.notes,
        verified: Some((
            |r| r.coded_bytes.is_none() || r.verified,
            "a compressor did not give the raw bytes back",
        )),
        also: None,
    };
    let results = run_suite(suite, |step, out| {
        out.extend(codec::run(&config, step).context("bench codec")?);
        Ok(())
    })?;
    for line in targets(&results) {
        say!("{line}");
    }
    Ok(())
}

/// The frames a run measures on (`--input`'s whole frames, or emulated ones) and where they came
/// from; refused where they would be more than the run holds in memory.
fn frames_to_measure(args: &CodecArgs, frame_type: FrameType) -> anyhow::Result<(Vec<u8>, String)> {
    let frame_bytes = frame_type.frame_bytes() as usize;
    // The bytes are held in memory, twice or more: bounded, and said before anything is made
    // (an emulated link of a custom type makes a bank of `PAYLOAD_VARIANTS` frames).
    let bank_or_frames = args.frames.max(snbuf_readout::framegen::PAYLOAD_VARIANTS);
    let asked = match &args.input {
        Some(path) => std::fs::metadata(path)
            .with_context(|| format!("{}", path.display()))?
            .len(),
        None => bank_or_frames.saturating_mul(frame_bytes as u64),
    };
    if asked > MAX_BYTES {
        return Err(usage(format!(
            "{} of frames to measure: more than the {} this bench holds in memory (fewer --frames, or a part of --input: head -c)",
            snbuf_quantity::Bytes(asked),
            snbuf_quantity::Bytes(MAX_BYTES)
        )));
    }
    Ok(match &args.input {
        Some(path) => {
            let mut raw = std::fs::read(path).with_context(|| format!("{}", path.display()))?;
            raw.truncate(raw.len() / frame_bytes * frame_bytes);
            if raw.is_empty() {
                return Err(usage(format!(
                    "{}: not one whole {frame_type} frame of {frame_bytes} B",
                    path.display()
                )));
            }
            (raw, path.display().to_string())
        }
        None => (
            emulated(frame_type, args.frames)?,
            format!(
                "emulated, {} frames, every frame its own noise",
                args.frames
            ),
        ),
    })
}

/// `frames` of link 0's emulated `t`, each frame's noise its own.
fn emulated(t: FrameType, frames: u64) -> anyhow::Result<Vec<u8>> {
    let mut g = FrameGen::new(t, 0, &Payload::Emulated)
        .context("an emulated link")?
        .unrepeated();
    let step = t.ticks_per_frame();
    let mut raw = Vec::with_capacity(frames as usize * t.frame_bytes() as usize);
    for k in 0..frames {
        raw.extend_from_slice(g.frame_at((1_000_000 + k) * step));
    }
    Ok(raw)
}

fn render(results: &[CodecResult]) -> String {
    let mut t = Table::new(&[
        ("compressor", false),
        ("coded", true),
        ("of raw", true),
        ("encode GiB/s", true),
        ("decode GiB/s", true),
        ("checked", false),
    ]);
    let or_dash = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    for r in results {
        t.row(vec![
            r.compressor.clone(),
            r.coded_bytes
                .map_or("-".into(), |b| snbuf_quantity::Bytes(b).to_string()),
            r.ratio
                .map_or("-".into(), |x| format!("{:.1} %", 100.0 * x)),
            or_dash(r.encode_gib_s, 3),
            or_dash(r.decode_gib_s, 3),
            match (r.kind, r.coded_bytes, r.verified) {
                (Kind::Bound, _, _) => "bound".into(),
                (_, None, _) => "not run".into(),
                (_, Some(_), true) => "ok".into(),
                (_, Some(_), false) => "WRONG".into(),
            },
        ]);
    }
    t.render()
}

/// The codec's targets (issue 52), judged on these results: size at most 40 % of raw and within
/// 10 % of the bound, 1.5 times smaller than the best peer, encode 1 GiB/s, decode 1.5 GiB/s.
pub fn targets(results: &[CodecResult]) -> Vec<String> {
    let Some(codec) = results.iter().find(|r| r.kind == Kind::Codec) else {
        return vec![];
    };
    let ratio = codec.ratio.unwrap_or(f64::INFINITY);
    let verdict = |ok: bool| if ok { "pass" } else { "FAIL" };
    let mut out = vec![format!(
        "target: coded at most 40 % of raw: {:.1} %, {}",
        100.0 * ratio,
        verdict(ratio <= 0.40)
    )];
    if let Some(bound) = results
        .iter()
        .find(|r| r.kind == Kind::Bound)
        .and_then(|r| r.ratio)
    {
        out.push(format!(
            "target: within 10 % of the bound ({:.1} %): {:.2}x it, {}",
            100.0 * bound,
            ratio / bound,
            verdict(ratio <= 1.10 * bound)
        ));
    }
    let best_peer = results
        .iter()
        .filter(|r| r.kind == Kind::Peer && r.verified)
        .filter_map(|r| r.ratio.map(|x| (x, &r.compressor)))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((peer, name)) = best_peer {
        out.push(format!(
            "target: 1.5x smaller than the best peer ({name}, {:.1} %): {:.2}x, {}",
            100.0 * peer,
            peer / ratio,
            verdict(peer / ratio >= 1.5)
        ));
    }
    let (enc, dec) = (
        codec.encode_gib_s.unwrap_or(0.0),
        codec.decode_gib_s.unwrap_or(0.0),
    );
    out.push(format!(
        "target: encode at least 1 GiB/s: {enc:.3}, {}",
        verdict(enc >= 1.0)
    ));
    out.push(format!(
        "target: decode at least 1.5 GiB/s: {dec:.3}, {}",
        verdict(dec >= 1.5)
    ));
    out
}
