//! `snbuf bench codec`: snbuf's frame codec (crates/codec) beside the compressors a physicist
//! would otherwise reach for, on the same bytes, one core each: zstd (-1, -3, -19), xz and lz4
//! as their own command-line tools (single-threaded), and the HDF5 filters `hdf5plugin` brings
//! (bitshuffle with LZ4, Blosc2 with zstd after a bit or byte shuffle, zstd alone) through h5py,
//! on the frames as 16-bit words (what a shuffle sees best) and, for those `convert --to
//! dune-hdf5 --filter` could write, as DUNE's files hold them (a column of bytes): the
//! measurement `convert`'s filter was chosen by. For each: the coded size over the raw, and
//! encode and decode GiB/s
//! (raw bytes over wall time, the fastest of the passes). And the bound the codec's model
//! allows: the zero-order entropy of the channels' first differences, plus the header bytes
//! kept verbatim.
//!
//! Every decode is checked against the raw bytes (CRC-32C of what came back): a compressor that
//! does not give them back is a wrong result, not a figure. A peer not installed on this machine
//! is reported as such, not left out silently.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use snbuf_codec::InstructionSet;
use snbuf_frames::adc::AdcShape;
use snbuf_frames::FrameType;

use crate::error::BenchError;

/// What one run measures.
#[derive(Clone, Debug)]
pub struct CodecConfig {
    pub frame_type: FrameType,
    /// The frames, back to back.
    pub raw: Vec<u8>,
    /// Where they came from, for the results: `emulated (...)` or the file's path.
    pub source: String,
    /// Frames per chunk the codec codes (each chunk on its own, as export codes a link file's
    /// chunks); the peers take the whole input.
    pub chunk_frames: usize,
    /// Timed passes per compressor; the fastest is reported.
    pub passes: u32,
    /// A directory in which the run makes one of its own for the peers' files (that one removed
    /// after; nothing else there is touched).
    pub scratch: PathBuf,
}

/// What one result is.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// snbuf's codec.
    Codec,
    /// A general-purpose compressor or an HDF5 filter.
    Peer,
    /// The entropy bound of the codec's residuals: a size, no speed.
    Bound,
}

/// One compressor on the bytes.
#[derive(Clone, Debug, Serialize)]
pub struct CodecResult {
    pub compressor: String,
    pub kind: Kind,
    pub frame_type: String,
    pub source: String,
    pub raw_bytes: u64,
    /// The frames of each chunk the codec coded on its own (None: the whole input at once, as
    /// the peers take it).
    pub chunk_frames: Option<u64>,
    /// None where the compressor is not on this machine.
    pub coded_bytes: Option<u64>,
    /// Coded over raw bytes.
    pub ratio: Option<f64>,
    pub encode_gib_s: Option<f64>,
    pub decode_gib_s: Option<f64>,
    /// The decoded bytes were the raw ones (false also where it could not run).
    pub verified: bool,
    pub notes: Vec<String>,
}

impl CodecResult {
    fn new(c: &CodecConfig, compressor: &str, kind: Kind) -> CodecResult {
        CodecResult {
            compressor: compressor.to_string(),
            kind,
            frame_type: c.frame_type.name(),
            source: c.source.clone(),
            raw_bytes: c.raw.len() as u64,
            chunk_frames: None,
            coded_bytes: None,
            ratio: None,
            encode_gib_s: None,
            decode_gib_s: None,
            verified: false,
            notes: Vec::new(),
        }
    }

    fn sized(mut self, coded: u64) -> CodecResult {
        self.coded_bytes = Some(coded);
        self.ratio = Some(coded as f64 / self.raw_bytes.max(1) as f64);
        self
    }
}

/// A peer run as a command: its name, how it compresses and how it decompresses (stdin to
/// stdout, one thread).
struct ToolPeer {
    name: &'static str,
    compress: &'static [&'static str],
    decompress: &'static [&'static str],
}

const TOOLS: &[ToolPeer] = &[
    ToolPeer {
        name: "zstd -1",
        compress: &["zstd", "-1", "-T1", "-q", "-c"],
        decompress: &["zstd", "-d", "-q", "-c"],
    },
    ToolPeer {
        name: "zstd -3",
        compress: &["zstd", "-3", "-T1", "-q", "-c"],
        decompress: &["zstd", "-d", "-q", "-c"],
    },
    ToolPeer {
        name: "zstd -19",
        compress: &["zstd", "-19", "-T1", "-q", "-c"],
        decompress: &["zstd", "-d", "-q", "-c"],
    },
    ToolPeer {
        name: "xz -6",
        compress: &["xz", "-6", "-T1", "-c"],
        decompress: &["xz", "-d", "-c"],
    },
    ToolPeer {
        name: "lz4",
        compress: &["lz4", "-q", "-c"],
        decompress: &["lz4", "-d", "-q", "-c"],
    },
];

/// How an HDF5 file holds the frames (`codec_hdf5.py`'s LAYOUT).
#[derive(Clone, Copy)]
enum Hdf5Layout {
    /// 16-bit words, a row a frame: what a shuffling filter sees best.
    Words,
    /// One column of bytes, as DUNE's files hold a fragment: what `convert --filter` writes.
    Bytes,
}

impl Hdf5Layout {
    fn arg(self) -> &'static str {
        match self {
            Hdf5Layout::Words => "words",
            Hdf5Layout::Bytes => "bytes",
        }
    }
}

/// The HDF5 filters, measured by `codec_hdf5.py` (h5py and hdf5plugin): on frames as words,
/// and, for the filters `convert` could write, as DUNE's byte datasets.
const HDF5_FILTERS: &[(&str, Hdf5Layout)] = &[
    ("bitshuffle-lz4", Hdf5Layout::Words),
    ("blosc2-zstd-bitshuffle", Hdf5Layout::Words),
    ("blosc2-zstd-shuffle", Hdf5Layout::Words),
    ("zstd", Hdf5Layout::Words),
    ("blosc-zstd", Hdf5Layout::Bytes),
    ("zstd", Hdf5Layout::Bytes),
    ("bitshuffle-lz4", Hdf5Layout::Bytes),
];

/// The kernels the codec is measured with: the fastest this CPU runs (whose row the targets
/// are judged on), and the portable one where that is another.
fn kernels() -> Vec<InstructionSet> {
    let fastest = InstructionSet::detect();
    let mut kernels = vec![fastest];
    if fastest != InstructionSet::Portable {
        kernels.push(InstructionSet::Portable);
    }
    kernels
}

/// Steps a run reports: the codec's kernels, the bound, each tool and each filter.
pub fn steps() -> u64 {
    kernels().len() as u64 + 1 + TOOLS.len() as u64 + HDF5_FILTERS.len() as u64
}

/// Measures every compressor on `c.raw`, reporting each as it starts.
pub fn run(c: &CodecConfig, step: &mut dyn FnMut(&str)) -> Result<Vec<CodecResult>, BenchError> {
    assert!(c.passes > 0, "at least one pass");
    let own = c
        .scratch
        .join(format!("snbuf-bench-codec-{}", std::process::id()));
    // Its own directory, new: what it removes after is only what it made.
    std::fs::create_dir(&own).map_err(|e| io_error(&own, e))?;
    let c = &CodecConfig {
        scratch: own,
        ..c.clone()
    };
    let raw_path = c.scratch.join("raw.bin");
    std::fs::write(&raw_path, &c.raw).map_err(|e| io_error(&raw_path, e))?;
    let raw_crc = crc32c::crc32c(&c.raw);
    let mut out = Vec::new();
    for kernel in kernels() {
        let name = format!("snbuf codec ({kernel})");
        step(&name);
        out.push(codec(c, kernel, &name));
    }
    step("entropy bound");
    out.push(bound(c));
    for tool in TOOLS {
        step(tool.name);
        out.push(tool_peer(c, tool, &raw_path, raw_crc));
    }
    for &(filter, layout) in HDF5_FILTERS {
        let name = match layout {
            Hdf5Layout::Words => format!("hdf5 {filter}"),
            Hdf5Layout::Bytes => format!("hdf5 {filter}, byte dataset"),
        };
        step(&name);
        out.push(hdf5_peer(c, filter, layout, &name, &raw_path));
    }
    let _ = std::fs::remove_dir_all(&c.scratch);
    Ok(out)
}

fn io_error(path: &Path, e: std::io::Error) -> BenchError {
    BenchError::Target {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

/// The fastest of `passes` runs of `f`, in seconds, and its last output.
fn fastest<T>(passes: u32, mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..passes {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed().as_secs_f64());
        last = Some(v);
    }
    (best, last.expect("at least one pass"))
}

fn gib_s(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64 / seconds
}

fn codec(c: &CodecConfig, kernel: InstructionSet, name: &str) -> CodecResult {
    assert!(c.chunk_frames > 0, "a chunk holds a frame");
    let chunk_bytes = c
        .chunk_frames
        .saturating_mul(c.frame_type.frame_bytes() as usize);
    let chunks: Vec<&[u8]> = c.raw.chunks(chunk_bytes).collect();
    // One buffer each way, kept across chunks and passes, as export keeps it: the codec's
    // time, not the kernel's mapping and zeroing of fresh memory. The coded chunks are kept
    // apart (as export writes them out) for the decode.
    let mut coded: Vec<Vec<u8>> = vec![Vec::new(); chunks.len()];
    let (encode_s, ()) = fastest(c.passes, || {
        for (raw, out) in chunks.iter().zip(&mut coded) {
            snbuf_codec::encode_into(kernel, c.frame_type, raw, out);
        }
    });
    // Each chunk decoded into one buffer, as export's read-back does (and checked by the CRC
    // each carries); then, untimed, all of them against the raw bytes.
    let mut bytes = Vec::new();
    let (decode_s, _) = fastest(c.passes, || {
        for one in &coded {
            let _ = snbuf_codec::decode_into(kernel, one, &mut bytes);
        }
    });
    let mut same = true;
    let decoded = coded.iter().zip(&chunks).try_for_each(|(one, raw)| {
        let t = snbuf_codec::decode_into(kernel, one, &mut bytes)?;
        if t != c.frame_type {
            return Err(snbuf_codec::DecodeError::FrameType(t.name().to_string()));
        }
        same &= bytes == *raw;
        Ok(())
    });
    let coded_bytes: usize = coded.iter().map(Vec::len).sum();
    let mut r = CodecResult::new(c, name, Kind::Codec).sized(coded_bytes as u64);
    r.chunk_frames = Some(c.chunk_frames as u64);
    r.encode_gib_s = Some(gib_s(c.raw.len(), encode_s));
    r.decode_gib_s = Some(gib_s(c.raw.len(), decode_s));
    match decoded {
        Ok(()) => r.verified = same,
        Err(e) => r
            .notes
            .push(format!("{name}: its own chunk did not decode: {e}")),
    }
    r
}

/// The codec's bound: every header byte as it is, and each sample at the zero-order entropy of
/// the first differences of its channel (one histogram over all channels), as the issue that
/// asked for the codec measured real data.
fn bound(c: &CodecConfig) -> CodecResult {
    let mut r = CodecResult::new(c, "entropy bound (first differences)", Kind::Bound);
    let frame_bytes = c.frame_type.frame_bytes() as usize;
    let Some(shape) = AdcShape::of(c.frame_type).filter(|_| frame_bytes > 0) else {
        r.notes
            .push(format!("{}: no ADC values to model", c.frame_type));
        return r;
    };
    let Some(adc) = shape.adc_ranges(frame_bytes) else {
        return r;
    };
    let adc_bytes: usize = adc.iter().map(|a| a.len()).sum();
    let frames = c.raw.len() / frame_bytes;
    let mut counts = std::collections::HashMap::<i32, u64>::new();
    let mut row = vec![0u16; shape.channels];
    let mut prev: Option<Vec<u16>> = None;
    for frame in c.raw.chunks_exact(frame_bytes) {
        for s in 0..shape.samples_per_frame {
            shape.sample(frame, s, &mut row);
            if let Some(p) = &prev {
                for (&v, &q) in row.iter().zip(p) {
                    *counts.entry(v as i32 - q as i32).or_default() += 1;
                }
            }
            prev = Some(row.clone());
        }
    }
    let n: u64 = counts.values().sum();
    let bits: f64 = counts
        .values()
        .map(|&k| {
            let p = k as f64 / n as f64;
            -p * p.log2()
        })
        .sum();
    let samples = (frames * shape.samples_per_frame * shape.channels) as f64;
    let headers = frames * (frame_bytes - adc_bytes) + c.raw.len() % frame_bytes;
    let coded = headers as f64 + samples * bits / 8.0;
    r.notes.push(format!(
        "{}: first differences carry {bits:.2} bits a sample of {} stored",
        c.frame_type,
        shape.bits()
    ));
    r.verified = true;
    r.sized(coded.round() as u64)
}

/// Runs `argv` with stdin from `input` and stdout to `output`; None when its program is not on
/// this machine.
fn pipe(
    argv: &[&str],
    input: &Path,
    output: &Path,
    deadline: Duration,
) -> Result<Option<()>, String> {
    let stdin = std::fs::File::open(input).map_err(|e| format!("{}: {e}", input.display()))?;
    let stdout = std::fs::File::create(output).map_err(|e| format!("{}: {e}", output.display()))?;
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .stdin(stdin)
        .stdout(stdout)
        .stderr(Stdio::inherit());
    match status_within(&mut cmd, deadline) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", argv[0])),
        Ok(s) if s.success() => Ok(Some(())),
        Ok(s) => Err(format!("{} exited {s}", argv.join(" "))),
    }
}

/// The longest a peer may take on `bytes`: far slower than xz -6 (about 1 MB/s here), so that
/// only a hung tool reaches it.
fn peer_deadline(bytes: usize) -> Duration {
    Duration::from_secs(120 + bytes as u64 / 200_000)
}

/// Runs `cmd` to its end within `deadline`; past it the child is killed and that is an error.
fn status_within(cmd: &mut Command, deadline: Duration) -> std::io::Result<ExitStatus> {
    let mut child = cmd.spawn()?;
    let until = Instant::now() + deadline;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no end within {} s: killed", deadline.as_secs()),
            ));
        }
        // Fine enough not to blur a fast peer's time (lz4 takes tens of ms here).
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn tool_peer(c: &CodecConfig, tool: &ToolPeer, raw: &Path, raw_crc: u32) -> CodecResult {
    let mut r = CodecResult::new(c, tool.name, Kind::Peer);
    let coded = c.scratch.join("coded");
    let back = c.scratch.join("back");
    let deadline = peer_deadline(c.raw.len());
    let (encode_s, ran) = fastest(c.passes, || pipe(tool.compress, raw, &coded, deadline));
    match ran {
        Ok(Some(())) => {}
        Ok(None) => {
            r.notes
                .push(format!("{}: not installed here", tool.compress[0]));
            return r;
        }
        Err(e) => {
            r.notes.push(e);
            return r;
        }
    }
    let (decode_s, ran) = fastest(c.passes, || pipe(tool.decompress, &coded, &back, deadline));
    if let Err(e) = ran {
        r.notes.push(e);
        return r;
    }
    let size = std::fs::metadata(&coded).map(|m| m.len()).unwrap_or(0);
    r = r.sized(size);
    r.encode_gib_s = Some(gib_s(c.raw.len(), encode_s));
    r.decode_gib_s = Some(gib_s(c.raw.len(), decode_s));
    r.verified =
        std::fs::read(&back).is_ok_and(|b| crc32c::crc32c(&b) == raw_crc && b.len() == c.raw.len());
    r
}

/// The script that writes the frames through one HDF5 filter and reads them back.
const HDF5_SCRIPT: &str = include_str!("codec_hdf5.py");

/// What `codec_hdf5.py` prints.
#[derive(serde::Deserialize)]
struct Hdf5Measured {
    coded_bytes: u64,
    encode_s: f64,
    decode_s: f64,
    identical: bool,
}

fn hdf5_peer(
    c: &CodecConfig,
    filter: &str,
    layout: Hdf5Layout,
    name: &str,
    raw: &Path,
) -> CodecResult {
    let mut r = CodecResult::new(c, name, Kind::Peer);
    let frame_bytes = c.frame_type.frame_bytes().to_string();
    let passes = c.passes.to_string();
    let h5 = c.scratch.join("frames.h5");
    // Its output to files, not pipes: a child polled for its end must never block on a full
    // pipe.
    let (out_path, err_path) = (c.scratch.join("hdf5.out"), c.scratch.join("hdf5.err"));
    let files =
        std::fs::File::create(&out_path).and_then(|o| Ok((o, std::fs::File::create(&err_path)?)));
    let ran = files.and_then(|(o, e)| {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", HDF5_SCRIPT, filter, layout.arg()])
            .arg(raw)
            .arg(&h5)
            .args([frame_bytes.as_str(), passes.as_str()])
            .stdout(o)
            .stderr(e);
        status_within(&mut cmd, peer_deadline(c.raw.len()) * c.passes)
    });
    let status = match ran {
        Ok(s) => s,
        Err(e) => {
            r.notes.push(format!("python3: {e}"));
            return r;
        }
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    if !status.success() {
        let why = std::fs::read_to_string(&err_path).unwrap_or_default();
        let last = why.lines().last().unwrap_or("no message");
        r.notes.push(format!("{name}: not measured ({last})"));
        return r;
    }
    match serde_json::from_str::<Hdf5Measured>(stdout.trim()) {
        Ok(m) => {
            r = r.sized(m.coded_bytes);
            r.encode_gib_s = Some(gib_s(c.raw.len(), m.encode_s));
            r.decode_gib_s = Some(gib_s(c.raw.len(), m.decode_s));
            r.verified = m.identical;
        }
        Err(e) => r
            .notes
            .push(format!("{name}: unreadable result {stdout:?}: {e}")),
    }
    r
}
