//! A lossless codec for DUNE's frames, for the bytes a unit sends to central storage. DUNE's
//! data is mostly noise on a steady baseline, packed 14 (or 12) bits a sample: general-purpose
//! compressors see little of it through the packing, while each channel's first differences
//! carry a few bits a sample. So, frame by frame of one link:
//! - every byte that is no ADC value (the frame's headers) is kept verbatim;
//! - each channel's samples are predicted from its previous sample (or its baseline, where its
//!   noise is white), and the residuals Rice-coded with a parameter that follows the channel's
//!   noise, both chosen a frame at a time from the frame before (`rice`); the codes' quotients
//!   and their low bits are stored apart, so that a core reads many at once (`frame_model`,
//!   `unary`, `low_bits`, with vector instructions where the CPU has them: `kernel`);
//! - a frame the codec cannot model (a custom frame type, a length not the type's) is stored
//!   raw, never refused, and so is one that would not get smaller.
//!
//! An encoded chunk (`encode`): magic `SNBC`, format version (2; format 1's chunks are still
//! read), the frame type's name, the frame
//! length, the raw length and the CRC-32C of the raw bytes, then each frame with a byte saying
//! how it is stored, then any bytes after the last whole frame, raw. `decode` checks the CRC of
//! what it rebuilt against the one stored, so a decode is right bit for bit or an error.

mod bits;
mod frame_model;
mod kernel;
mod low_bits;
mod packed14;
mod rice;
mod unary;

use snbuf_frames::adc::AdcShape;
use snbuf_frames::FrameType;

use frame_model::{Format, FrameModel};
pub use kernel::InstructionSet;

const MAGIC: &[u8; 4] = b"SNBC";

/// How one frame is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Stored {
    /// Its bytes as they are.
    Raw = 0,
    /// Headers verbatim, then its samples coded (`frame_model`), preceded by their length.
    Modeled = 1,
}

#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("not an snbuf-coded chunk (no SNBC magic)")]
    NotCoded,
    #[error("coded by a newer snbuf (format {0}; this one reads formats 1 and 2)")]
    Version(u8),
    #[error("format {0}, which no snbuf wrote: a corrupt chunk")]
    NoSuchVersion(u8),
    #[error("frame type {0:?} is not one this snbuf knows")]
    FrameType(String),
    #[error("the coded chunk ends early, or its frame {frame} is corrupt")]
    Truncated { frame: u64 },
    #[error("frame {frame} is stored in an unknown way ({how})")]
    Storage { frame: u64, how: u8 },
    #[error("the decoded bytes do not match their CRC-32C (stored {stored:#010x}, got {got:#010x}): a corrupt chunk")]
    Checksum { stored: u32, got: u32 },
    #[error("{0} bytes after the end of the coded chunk")]
    Trailing(usize),
}

/// `raw`, frames of `frame_type` back to back (any bytes after the last whole frame kept as
/// they are), coded, with the fastest kernel this CPU runs.
pub fn encode(frame_type: FrameType, raw: &[u8]) -> Vec<u8> {
    encode_with(InstructionSet::detect(), frame_type, raw)
}

/// `encode` with `kernel` (one this CPU runs: `InstructionSet::detect` or `InstructionSet::Portable`); the
/// bytes are the same whichever.
pub fn encode_with(kernel: InstructionSet, frame_type: FrameType, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(kernel, frame_type, raw, &mut out);
    out
}

/// `encode_with` into `out` (emptied first): a caller coding chunk after chunk keeps one
/// buffer, rather than memory the kernel maps and zeroes anew for each.
pub fn encode_into(kernel: InstructionSet, frame_type: FrameType, raw: &[u8], out: &mut Vec<u8>) {
    let frame_bytes = frame_type.frame_bytes() as usize;
    let name = frame_type.name();
    assert!(
        name.len() <= u8::MAX as usize,
        "a frame type's name fits a byte's count"
    );
    out.clear();
    out.reserve(raw.len() / 2 + 64);
    out.extend_from_slice(MAGIC);
    out.push(Format::LATEST as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&(frame_bytes as u32).to_le_bytes());
    out.extend_from_slice(&(raw.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(raw).to_le_bytes());
    let mut model =
        AdcShape::of(frame_type).and_then(|shape| FrameModel::new(shape, frame_bytes, kernel));
    let whole = raw.len() / frame_bytes.max(1) * frame_bytes;
    let mut scratch = Vec::with_capacity(frame_bytes);
    for frame in raw[..whole].chunks_exact(frame_bytes.max(1)) {
        match model.as_mut() {
            Some(m) => {
                scratch.clear();
                m.encode(frame, &mut scratch);
                // The model's state has seen this frame either way: the decoder decodes it to
                // the same state, whichever way it is stored.
                if scratch.len() + 4 < frame_bytes {
                    out.push(Stored::Modeled as u8);
                    out.extend_from_slice(&(scratch.len() as u32).to_le_bytes());
                    out.extend_from_slice(&scratch);
                    continue;
                }
                out.push(Stored::Raw as u8);
                out.extend_from_slice(frame);
            }
            None => {
                out.push(Stored::Raw as u8);
                out.extend_from_slice(frame);
            }
        }
    }
    out.extend_from_slice(&raw[whole..]);
}

/// A reader of a coded chunk's fields, never past its end.
struct Fields<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.bytes.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(b)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// The frame type and raw bytes of a coded chunk, checked against the CRC it carries, decoded
/// with the fastest kernel this CPU runs.
pub fn decode(coded: &[u8]) -> Result<(FrameType, Vec<u8>), DecodeError> {
    decode_with(InstructionSet::detect(), coded)
}

/// `decode` with `kernel` (one this CPU runs); the frames are the same whichever.
pub fn decode_with(
    kernel: InstructionSet,
    coded: &[u8],
) -> Result<(FrameType, Vec<u8>), DecodeError> {
    let mut raw = Vec::new();
    let frame_type = decode_into(kernel, coded, &mut raw)?;
    Ok((frame_type, raw))
}

/// `decode_with` into `raw` (emptied first, and empty after an error: never frames whose CRC
/// did not match): a reader decoding chunk after chunk keeps one buffer.
pub fn decode_into(
    kernel: InstructionSet,
    coded: &[u8],
    raw: &mut Vec<u8>,
) -> Result<FrameType, DecodeError> {
    raw.clear();
    let decoded = decode_frames(kernel, coded, raw);
    if decoded.is_err() {
        raw.clear();
    }
    decoded
}

/// What a coded chunk's header says: its format, its frames' type and size, and the length and
/// CRC-32C of the raw bytes it holds.
struct CodedHeader {
    format: Format,
    frame_type: FrameType,
    frame_bytes: usize,
    raw_len: u64,
    stored_crc: u32,
}

impl CodedHeader {
    fn read(f: &mut Fields) -> Result<CodedHeader, DecodeError> {
        let early = DecodeError::Truncated { frame: 0 };
        if f.take(4) != Some(&MAGIC[..]) {
            return Err(DecodeError::NotCoded);
        }
        let version = f.take(1).ok_or(early.clone())?[0];
        let format = Format::of_version(version).ok_or(match version > Format::LATEST as u8 {
            true => DecodeError::Version(version),
            false => DecodeError::NoSuchVersion(version),
        })?;
        let name_len = f.take(1).ok_or(early.clone())?[0] as usize;
        let name = String::from_utf8_lossy(f.take(name_len).ok_or(early.clone())?).into_owned();
        let frame_type: FrameType = name
            .parse()
            .map_err(|_| DecodeError::FrameType(name.clone()))?;
        let frame_bytes = f.u32().ok_or(early.clone())? as usize;
        if frame_bytes != frame_type.frame_bytes() as usize || frame_bytes == 0 {
            return Err(DecodeError::FrameType(name));
        }
        let raw_len = f.u64().ok_or(early.clone())?;
        let stored_crc = f.u32().ok_or(early)?;
        Ok(CodedHeader {
            format,
            frame_type,
            frame_bytes,
            raw_len,
            stored_crc,
        })
    }
}

/// Whether `raw_len` bytes of frames `frame_bytes` long can be in `room` coded bytes, each
/// frame in the fewest its storage takes (a bit a sample, modeled): so that memory follows the
/// input, never a header's claim (hostile input cannot ask for gigabytes).
fn claim_fits(
    model: Option<&FrameModel>,
    format: Format,
    frame_bytes: usize,
    raw_len: u64,
    room: u64,
) -> bool {
    assert!(
        frame_bytes > 0,
        "a header's frame length is checked when read"
    );
    let (frames, tail) = (raw_len / frame_bytes as u64, raw_len % frame_bytes as u64);
    let least = 1 + model.map_or(frame_bytes, |m| {
        (4 + m.least_coded_bytes_of(format)).min(frame_bytes)
    });
    frames.saturating_mul(least as u64).saturating_add(tail) <= room
}

/// `decode_into`'s work, leaving in `raw` what it decoded before an error.
fn decode_frames(
    kernel: InstructionSet,
    coded: &[u8],
    raw: &mut Vec<u8>,
) -> Result<FrameType, DecodeError> {
    let mut f = Fields {
        bytes: coded,
        at: 0,
    };
    let CodedHeader {
        format,
        frame_type,
        frame_bytes,
        raw_len,
        stored_crc,
    } = CodedHeader::read(&mut f)?;
    // Never more than the coded bytes could hold: a frame takes at least a byte of them.
    let frames = raw_len / frame_bytes as u64;
    let tail = (raw_len % frame_bytes as u64) as usize;
    let mut model =
        AdcShape::of(frame_type).and_then(|shape| FrameModel::new(shape, frame_bytes, kernel));
    let room = (coded.len() - f.at) as u64;
    if !claim_fits(model.as_ref(), format, frame_bytes, raw_len, room) {
        return Err(DecodeError::Truncated { frame: 0 });
    }
    raw.reserve(frames as usize * frame_bytes + tail);
    // Only modeled frames are decoded into a frame of their own (custom frames may be large).
    let mut frame = vec![0u8; if model.is_some() { frame_bytes } else { 0 }];
    for n in 0..frames {
        let truncated = DecodeError::Truncated { frame: n };
        let how = f.take(1).ok_or(truncated.clone())?[0];
        match (how, model.as_mut()) {
            (h, _) if h == Stored::Raw as u8 => {
                let bytes = f.take(frame_bytes).ok_or(truncated)?;
                if let Some(m) = model.as_mut() {
                    m.observe(bytes);
                }
                raw.extend_from_slice(bytes);
            }
            (h, Some(m)) if h == Stored::Modeled as u8 => {
                let len = f.u32().ok_or(truncated.clone())? as usize;
                let body = f.take(len).ok_or(truncated.clone())?;
                m.decode(format, body, &mut frame).map_err(|_| truncated)?;
                raw.extend_from_slice(&frame);
            }
            (how, _) => return Err(DecodeError::Storage { frame: n, how }),
        }
    }
    raw.extend_from_slice(
        f.take(tail)
            .ok_or(DecodeError::Truncated { frame: frames })?,
    );
    if f.at != coded.len() {
        return Err(DecodeError::Trailing(coded.len() - f.at));
    }
    let got = crc32c::crc32c(raw);
    if got != stored_crc {
        return Err(DecodeError::Checksum {
            stored: stored_crc,
            got,
        });
    }
    Ok(frame_type)
}
