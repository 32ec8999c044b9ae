//! A link file in a third of its bytes, for the way to central storage: `export --codec frames`
//! writes each link file as `<file>.snbl`, and every reader here opens one as the link file it
//! stands for (`open_link_file`), byte for byte.
//!
//! The coded file follows the link file's own structure: each valid chunk's header as it is,
//! its payload (frames) through the frame codec (`snbuf_codec`, which keeps every header byte of
//! a frame and checks what it decodes against the CRC-32C of the raw bytes), and every other
//! byte (a torn tail, zeros after the last chunk) as it is. Layout: magic `SNBL`, a format
//! version, the frame type's name; then records, each a kind byte and a u32 length
//! (little-endian) before its bytes (`RAW`: bytes of the link file as they are; `CODED`: a
//! coded payload); then `END`, the link file's length (u64) and its CRC-32C. A decode is the
//! link file exactly or an error.

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use snbuf_frames::FrameType;

use crate::scan::{scan, Expect};

const MAGIC: &[u8; 4] = b"SNBL";
const VERSION: u8 = 1;
/// The coded file's name suffix: `link-0000.dat.snbl` holds `link-0000.dat`.
pub const SUFFIX: &str = ".snbl";
/// The codec `export --codec frames` writes, as manifests name it: its number is the newest
/// payload format (`snbuf_codec`) this snbuf writes, so that a reader that knows only older
/// formats says "coded by a newer snbuf" of the whole copy rather than finding every chunk
/// damaged.
pub const CODEC_NAME: &str = "snbuf-frames-2";
/// The codecs a manifest may name that this snbuf reads: `snbuf-frames-1` wrote format-1
/// payloads only, and the decoder reads both formats.
pub const CODECS_READ: [&str; 2] = ["snbuf-frames-1", CODEC_NAME];

/// Record kinds.
const RAW: u8 = 0;
const CODED: u8 = 1;
const END: u8 = 0xff;
/// Raw bytes go in records of at most this many.
const RAW_RECORD_BYTES: u64 = 1 << 20;

/// Why a coded link file does not decode.
#[derive(Debug, thiserror::Error)]
pub enum CodedLinkError {
    #[error("{path}: {cause}")]
    Io { path: PathBuf, cause: io::Error },
    #[error("{path}: a corrupt coded link file: {why}")]
    Corrupt { path: PathBuf, why: String },
    /// Written by a newer snbuf: not damage, and never read as zeros.
    #[error("{path}: {why}; upgrade snbuf to read it")]
    Newer { path: PathBuf, why: String },
}

/// What coding a link file did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coded {
    pub raw_bytes: u64,
    pub coded_bytes: u64,
    pub raw_crc32c: u32,
}

/// Writes the link file `src` (frames of `frame_type`, link `link`) coded to `dst`.
pub fn encode_link_file(
    src: &Path,
    frame_type: FrameType,
    link: u32,
    dst: &Path,
) -> Result<Coded, CodedLinkError> {
    let io_src = |cause| CodedLinkError::Io {
        path: src.to_path_buf(),
        cause,
    };
    let io_dst = |cause| CodedLinkError::Io {
        path: dst.to_path_buf(),
        cause,
    };
    let file = File::open(src).map_err(io_src)?;
    let len = file.metadata().map_err(io_src)?.len();
    // Every valid chunk, whatever else the file holds: the rest goes as it is.
    let report = scan(
        &file,
        Expect {
            link: Some(link),
            frame_step_ticks: None,
            frame: None,
        },
    )
    .map_err(io_src)?;
    let mut out = Counting::new(BufWriter::new(File::create(dst).map_err(io_dst)?));
    write_header(&mut out, frame_type).map_err(io_dst)?;
    let mut crc = 0u32;
    let mut at = 0u64;
    let mut buf = Vec::new();
    // (One buffer for every payload coded: memory mapped and zeroed once, not per chunk.)
    let (kernel, mut payload) = (snbuf_codec::InstructionSet::detect(), Vec::new());
    for c in &report.chunks {
        let payload_at = c.offset + c.payload_offset;
        let payload_end = payload_at + c.payload_bytes as u64;
        for (from, to, coded) in [(at, payload_at, false), (payload_at, payload_end, true)] {
            buf.resize((to - from) as usize, 0);
            file.read_exact_at(&mut buf, from).map_err(io_src)?;
            crc = crc32c::crc32c_append(crc, &buf);
            if coded {
                snbuf_codec::encode_into(kernel, frame_type, &buf, &mut payload);
                record(&mut out, CODED, &payload).map_err(io_dst)?;
            } else {
                raw_records(&mut out, &buf).map_err(io_dst)?;
            }
        }
        at = payload_end;
    }
    while at < len {
        let n = RAW_RECORD_BYTES.min(len - at);
        buf.resize(n as usize, 0);
        file.read_exact_at(&mut buf, at).map_err(io_src)?;
        crc = crc32c::crc32c_append(crc, &buf);
        record(&mut out, RAW, &buf).map_err(io_dst)?;
        at += n;
    }
    write_end(&mut out, len, crc).map_err(io_dst)?;
    let coded_bytes = out.bytes;
    let f = out.inner.into_inner().map_err(|e| io_dst(e.into_error()))?;
    // Flushed whole before it is sent: an error here is the export's, not a short object's.
    f.sync_all().map_err(io_dst)?;
    Ok(Coded {
        raw_bytes: len,
        coded_bytes,
        raw_crc32c: crc,
    })
}

/// The coded file's header: its magic, version and frame type.
fn write_header(out: &mut impl Write, frame_type: FrameType) -> std::io::Result<()> {
    let name = frame_type.name();
    assert!(
        name.len() <= u8::MAX as usize,
        "a frame type's name fits its length byte"
    );
    out.write_all(MAGIC)?;
    out.write_all(&[VERSION, name.len() as u8])?;
    out.write_all(name.as_bytes())
}

/// The coded file's end: the length and CRC-32C of the raw file it holds, which a decode checks.
fn write_end(out: &mut impl Write, raw_bytes: u64, raw_crc32c: u32) -> std::io::Result<()> {
    out.write_all(&[END])?;
    out.write_all(&raw_bytes.to_le_bytes())?;
    out.write_all(&raw_crc32c.to_le_bytes())
}

/// A writer that counts what it wrote.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Counting<W> {
    fn new(inner: W) -> Counting<W> {
        Counting { inner, bytes: 0 }
    }
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(b)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn record(out: &mut impl Write, kind: u8, bytes: &[u8]) -> io::Result<()> {
    let len = u32::try_from(bytes.len()).expect("a record fits 4 GiB");
    out.write_all(&[kind])?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(bytes)
}

fn raw_records(out: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    for piece in bytes.chunks(RAW_RECORD_BYTES as usize) {
        record(out, RAW, piece)?;
    }
    Ok(())
}

/// What a decode does with a record that does not decode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDamage {
    /// Fails: the coded file is the link file exactly or an error (an export's check before
    /// it sends a file).
    Refuse,
    /// Goes on, as a reader of the raw file would: a payload that does not decode becomes as
    /// many zeros (its chunk then fails its CRC-32C, exactly as a damaged chunk of the raw file
    /// does), and the link file ends where the records can no longer be told apart (a torn
    /// tail). The chunks around the damage still read.
    KeepReading,
}

/// What a decode gave: the link file's length, and whether any record was damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub len: u64,
    pub damaged: bool,
}

/// The most zeros written for a payload that does not decode: many times what any coded
/// payload shrinks to, so that a damaged length asks for no gigabytes.
const MAX_ZEROS_PER_CODED_BYTE: u64 = 64;

/// A coded link file read front to back, never past its end (a hostile length allocates
/// nothing).
struct CodedReader<'a> {
    path: &'a Path,
    r: io::BufReader<File>,
    /// Bytes not yet taken.
    left: u64,
}

impl CodedReader<'_> {
    fn open(path: &Path) -> Result<CodedReader<'_>, CodedLinkError> {
        let io_err = |cause| CodedLinkError::Io {
            path: path.to_path_buf(),
            cause,
        };
        let file = File::open(path).map_err(io_err)?;
        let left = file.metadata().map_err(io_err)?.len();
        Ok(CodedReader {
            path,
            r: io::BufReader::new(file),
            left,
        })
    }

    fn corrupt(&self, why: String) -> CodedLinkError {
        CodedLinkError::Corrupt {
            path: self.path.to_path_buf(),
            why,
        }
    }

    fn newer(&self, why: String) -> CodedLinkError {
        CodedLinkError::Newer {
            path: self.path.to_path_buf(),
            why,
        }
    }

    fn take(&mut self, n: usize) -> Result<Vec<u8>, CodedLinkError> {
        if n as u64 > self.left {
            return Err(self.corrupt("it ends early".into()));
        }
        self.left -= n as u64;
        let mut b = vec![0u8; n];
        self.r
            .read_exact(&mut b)
            .map_err(|cause| CodedLinkError::Io {
                path: self.path.to_path_buf(),
                cause,
            })?;
        Ok(b)
    }

    /// The magic, the format version and the frame type.
    fn head(&mut self) -> Result<FrameType, CodedLinkError> {
        if self.take(4)? != MAGIC {
            return Err(self.corrupt("no SNBL magic".into()));
        }
        let head = self.take(2)?;
        if head[0] > VERSION {
            let why = format!(
                "coded in file format {} (this snbuf reads {VERSION})",
                head[0]
            );
            return Err(self.newer(why));
        }
        if head[0] != VERSION {
            return Err(self.corrupt(format!("file format {}", head[0])));
        }
        let name = String::from_utf8_lossy(&self.take(head[1] as usize)?).into_owned();
        name.parse()
            .map_err(|_| self.corrupt(format!("frame type {name:?} unknown")))
    }

    /// The next record's kind and bytes; None at `END`.
    fn record(&mut self) -> Result<Option<(u8, Vec<u8>)>, CodedLinkError> {
        let kind = self.take(1)?[0];
        if kind == END {
            return Ok(None);
        }
        let n = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        Ok(Some((kind, self.take(n)?)))
    }

    /// After `END`: the link file's length and CRC-32C as coded, and whether the file holds
    /// bytes after them.
    fn end(&mut self) -> Result<(u64, u32, bool), CodedLinkError> {
        let tail = self.take(12)?;
        let len = u64::from_le_bytes(tail[..8].try_into().expect("8 bytes"));
        let crc = u32::from_le_bytes(tail[8..].try_into().expect("4 bytes"));
        Ok((len, crc, self.left > 0))
    }
}

/// Decodes the coded link file `src` into `dst` (a writer of the link file's bytes, from its
/// start). Every coded payload is checked against its CRC, and the whole against the link
/// file's; a record that fails goes as `on_damage` says.
pub fn decode_link_file(
    src: &Path,
    dst: &mut impl Write,
    on_damage: OnDamage,
) -> Result<Decoded, CodedLinkError> {
    let mut r = CodedReader::open(src)?;
    let frame_type = r.head()?;
    let keep_reading = on_damage == OnDamage::KeepReading;
    // Where the records can no longer be told apart, a reader's link file ends.
    let cut = |e: CodedLinkError, len| match e {
        CodedLinkError::Corrupt { .. } if keep_reading => Ok(Decoded { len, damaged: true }),
        e => Err(e),
    };
    let (mut len, mut crc, mut damaged) = (0u64, 0u32, false);
    loop {
        let (kind, bytes) = match r.record() {
            Ok(Some(record)) => record,
            Ok(None) => break,
            Err(e) => return cut(e, len),
        };
        let raw = match (kind, keep_reading) {
            (RAW, _) => bytes,
            (CODED, _) => match (snbuf_codec::decode(&bytes), keep_reading) {
                (Ok((t, raw)), _) if t == frame_type => raw,
                // A format this snbuf does not know is no damage: never read as zeros.
                (Err(e @ snbuf_codec::DecodeError::Version(_)), _) => {
                    return Err(r.newer(e.to_string()))
                }
                (Ok((t, _)), false) => {
                    let why = format!("a payload of {t} in a file of {frame_type}");
                    return Err(r.corrupt(why));
                }
                (Err(e), false) => return Err(r.corrupt(e.to_string())),
                // As many zeros as it held: its chunk fails its CRC, as in a raw file.
                _ => {
                    damaged = true;
                    vec![0u8; claimed_raw_len(&bytes).unwrap_or(0) as usize]
                }
            },
            (_, true) => return Ok(Decoded { len, damaged: true }),
            (other, false) => return Err(r.corrupt(format!("record kind {other}"))),
        };
        crc = crc32c::crc32c_append(crc, &raw);
        len += raw.len() as u64;
        dst.write_all(&raw).map_err(|cause| CodedLinkError::Io {
            path: PathBuf::from(format!(
                "{} decoded into the temporary directory ($TMPDIR)",
                src.display()
            )),
            cause,
        })?;
    }
    let (want_len, want_crc, trailing) = match r.end() {
        Ok(end) => end,
        Err(e) => return cut(e, len),
    };
    let whole = (want_len, want_crc) == (len, crc) && !trailing;
    if !whole && !keep_reading {
        return Err(r.corrupt(if trailing {
            "bytes after its end".into()
        } else {
            format!("it decodes to {len} B of CRC-32C {crc:#010x}, not the {want_len} B of {want_crc:#010x} it was")
        }));
    }
    Ok(Decoded {
        len,
        damaged: damaged || !whole,
    })
}

/// The raw length a coded payload says it has (its `snbuf_codec` header), if it can be read and
/// is within `MAX_ZEROS_PER_CODED_BYTE` of its coded length.
fn claimed_raw_len(coded: &[u8]) -> Option<u64> {
    let name_len = *coded.get(5)? as usize;
    let at = 4 + 1 + 1 + name_len + 4;
    let raw = u64::from_le_bytes(coded.get(at..at + 8)?.try_into().ok()?);
    (raw <= coded.len() as u64 * MAX_ZEROS_PER_CODED_BYTE).then_some(raw)
}

/// Link file `name` of the burst in `dir`, to read: the file itself, or its coded form (`name` +
/// `SUFFIX`, as an export wrote it) decoded into an unnamed temporary file (O_TMPFILE in the
/// temporary directory, gone when closed). Which, where both are there: the coded form in a
/// copy whose manifest says `coded` (a codec of `CODECS_READ`, else an error), else the file.
pub fn open_link_file(dir: &Path, name: &str, codec: Option<&str>) -> Result<File, CodedLinkError> {
    let path = dir.join(name);
    let coded = dir.join(format!("{name}{SUFFIX}"));
    if let Some(codec) = codec.filter(|c| !CODECS_READ.contains(c)) {
        let why = format!(
            "a copy coded by {codec:?} (this snbuf reads {})",
            CODECS_READ.join(", ")
        );
        return Err(CodedLinkError::Newer { path: coded, why });
    }
    let read_coded = coded.exists() && (codec.is_some() || !path.exists());
    if !read_coded {
        return File::open(&path).map_err(|cause| CodedLinkError::Io { path, cause });
    }
    let tmp_dir = std::env::temp_dir();
    let tmp = tempfile_in(&tmp_dir).map_err(|cause| CodedLinkError::Io {
        path: PathBuf::from(format!(
            "{} (decoding {} into the temporary directory, $TMPDIR)",
            tmp_dir.display(),
            coded.display()
        )),
        cause,
    })?;
    let mut w = BufWriter::new(&tmp);
    let decoded = decode_link_file(&coded, &mut w, OnDamage::KeepReading)?;
    if decoded.damaged {
        tracing::warn!(file = %coded.display(), "coded link file damaged: what does not decode reads as a chunk that fails its checks, or as the file's end");
    }
    w.flush().map_err(|cause| CodedLinkError::Io {
        path: tmp_dir,
        cause,
    })?;
    drop(w);
    Ok(tmp)
}

/// An unnamed file in `dir`, read and written, gone when closed.
fn tempfile_in(dir: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_TMPFILE)
        .mode(0o600)
        .open(dir)
}
