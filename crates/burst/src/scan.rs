//! The reader: walks a link file chunk by chunk and says what it holds.
//!
//! `scan` is the single reader behind `verify` and `recover`. It reads through `ReadAt` (a byte
//! slice in tests, a file otherwise: a burst file can be far larger than memory), never panics on
//! any input, and classifies what it finds: the longest prefix of valid, sequence-contiguous
//! chunks (what recovery keeps), then where and why that prefix ends.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use serde::Serialize;

use snbuf_frames::FrameLayout;

use crate::chunk::{ChunkHeader, HeaderError, HEADER_BYTES};

/// Random-access reads of a file or a byte slice.
pub trait ReadAt {
    fn len_bytes(&self) -> u64;
    fn read_exact_at_offset(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
}

impl ReadAt for [u8] {
    fn len_bytes(&self) -> u64 {
        self.len() as u64
    }
    fn read_exact_at_offset(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start =
            usize::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        let src = start
            .checked_add(buf.len())
            .and_then(|end| self.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

impl ReadAt for File {
    fn len_bytes(&self) -> u64 {
        self.metadata().map(|m| m.len()).unwrap_or(0)
    }
    fn read_exact_at_offset(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_exact_at(buf, offset)
    }
}

/// A valid chunk of the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ChunkSeen {
    pub offset: u64,
    /// Where the payload starts, from the chunk's start (64 in format version 1, the header
    /// block in version 2).
    pub payload_offset: u64,
    pub sequence: u64,
    pub first_timestamp: u64,
    pub last_timestamp: u64,
    pub frame_count: u32,
    pub payload_bytes: u32,
    pub stride_bytes: u32,
}

/// How the valid prefix ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum End {
    /// At the end of the file, or where only zeros (unused preallocated space) follow.
    Clean { zero_tail_bytes: u64 },
    /// Non-zero bytes follow that are not a complete valid chunk: what a crash mid-write leaves.
    TornTail {
        offset: u64,
        bytes: u64,
        why: String,
    },
    /// A complete chunk whose header or payload checksum fails, or that breaks the sequence.
    BadChunk {
        offset: u64,
        bytes: u64,
        why: String,
    },
    /// Written by a newer snbuf: nothing past here is interpreted (or changed).
    FutureVersion { offset: u64, version: u16 },
}

/// A break in the timestamps: frames the data does not have. Not corruption, but reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TimestampGap {
    /// The last timestamp present before the gap, and the first after it.
    pub after_timestamp: u64,
    pub resume_timestamp: u64,
    pub missing_frames: u64,
    /// The chunk where it was seen (inside it when `inside_chunk`).
    pub sequence: u64,
    pub inside_chunk: bool,
}

impl TimestampGap {
    /// One line for a person.
    pub fn describe(&self) -> String {
        format!(
            "gap of {} frame(s) after timestamp {}, resuming at {}{}",
            self.missing_frames,
            self.after_timestamp,
            self.resume_timestamp,
            if self.inside_chunk {
                " (inside a chunk)"
            } else {
                ""
            }
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ScanReport {
    pub file_bytes: u64,
    pub chunks: Vec<ChunkSeen>,
    /// Offset just past the last valid chunk of the prefix.
    pub valid_bytes: u64,
    pub end: End,
    pub gaps: Vec<TimestampGap>,
    /// Valid-looking chunks found after the prefix ended (after a bad payload the stride is still
    /// trusted): reported by verify, never returned as data by recover.
    pub chunks_after_end: u64,
}

impl ScanReport {
    /// What the valid prefix holds, as the manifest records it.
    pub fn data(&self) -> crate::manifest::LinkData {
        let d = crate::manifest::LinkData {
            chunks: self.chunks.len() as u64,
            frames: self.frames(),
            payload_bytes: self.payload_bytes(),
            file_bytes: self.valid_bytes,
            first_timestamp: self.first_timestamp(),
            last_timestamp: self.last_timestamp(),
        };
        debug_assert!(
            d.payload_bytes <= d.file_bytes && (d.chunks == 0) == (d.file_bytes == 0),
            "the valid prefix is whole chunks, each payload inside its stride: {d:?}"
        );
        d
    }

    pub fn frames(&self) -> u64 {
        self.chunks.iter().map(|c| c.frame_count as u64).sum()
    }
    pub fn payload_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.payload_bytes as u64).sum()
    }
    pub fn first_timestamp(&self) -> Option<u64> {
        self.chunks.first().map(|c| c.first_timestamp)
    }
    pub fn last_timestamp(&self) -> Option<u64> {
        self.chunks.last().map(|c| c.last_timestamp)
    }
    pub fn is_clean(&self) -> bool {
        matches!(self.end, End::Clean { .. })
    }
}

/// What the scanner expects of a link's chunks.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expect {
    /// The link id every chunk must carry.
    pub link: Option<u32>,
    /// Ticks from one frame's timestamp to the next (the frame type's step), for gap detection.
    pub frame_step_ticks: Option<u64>,
    /// Where the frames keep their timestamps: when given, the timestamps inside every frame
    /// must agree with its chunk's header.
    pub frame: Option<FrameLayout>,
}

/// Reads a whole link file. I/O errors (not data problems) are returned as errors.
///
/// One piece: the reader's state over one file (offset, expected sequence, timestamps), which
/// every branch updates in the same report.
pub fn scan<R: ReadAt + ?Sized>(r: &R, expect: Expect) -> io::Result<ScanReport> {
    let len = r.len_bytes();
    let mut report = ScanReport {
        file_bytes: len,
        chunks: Vec::new(),
        valid_bytes: 0,
        end: End::Clean { zero_tail_bytes: 0 },
        gaps: Vec::new(),
        chunks_after_end: 0,
    };
    let mut offset = 0u64;
    let mut header_bytes = [0u8; HEADER_BYTES];
    let mut payload = Vec::new();
    loop {
        debug_assert_eq!(
            offset, report.valid_bytes,
            "the scan goes on where the valid prefix ends"
        );
        if offset >= len {
            report.end = End::Clean { zero_tail_bytes: 0 };
            break;
        }
        let avail = (len - offset).min(HEADER_BYTES as u64) as usize;
        r.read_exact_at_offset(&mut header_bytes[..avail], offset)?;
        let header = match ChunkHeader::decode(&header_bytes[..avail]) {
            Ok(h) => h,
            Err(e) => {
                report.end = end_without_header(r, offset, len, e)?;
                break;
            }
        };
        let stride = header.stride_bytes as u64;
        // What `decode` checked, and what the loop relies on: the scan advances by a whole
        // chunk, and the timestamps and frame count below never underflow.
        debug_assert!(
            stride >= header.chunk_bytes() as u64 && header.chunk_bytes() > HEADER_BYTES,
            "a decoded chunk has a header and a payload, inside its stride"
        );
        debug_assert!(
            header.frame_count > 0 && header.first_timestamp <= header.last_timestamp,
            "a decoded chunk has frames, in time order"
        );
        let bad = |why: String| End::BadChunk {
            offset,
            bytes: stride.min(len - offset),
            why,
        };
        if let Some(link) = expect.link {
            if header.link != link {
                report.end = bad(format!(
                    "chunk of link {} in the file of link {link}",
                    header.link
                ));
                break;
            }
        }
        let expected_seq = report.chunks.len() as u64;
        if header.sequence != expected_seq {
            report.end = bad(format!(
                "sequence {} where {expected_seq} was due",
                header.sequence
            ));
            break;
        }
        if offset + stride > len {
            report.end = End::TornTail {
                offset,
                bytes: len - offset,
                why: format!(
                    "chunk needs {stride} B, the file has {} B left",
                    len - offset
                ),
            };
            break;
        }
        payload.resize(header.payload_bytes as usize, 0);
        debug_assert!(
            offset + header.payload_offset() + payload.len() as u64 <= len,
            "the payload checksummed lies inside the file"
        );
        r.read_exact_at_offset(&mut payload, offset + header.payload_offset())?;
        let crc = crate::chunk::crc32c(&payload);
        if crc != header.payload_crc32c {
            let why = format!(
                "payload checksum mismatch (stored {:#010x}, computed {crc:#010x})",
                header.payload_crc32c
            );
            report.end = if is_zero_or_end(r, offset + stride, len)? {
                // The last chunk, half written: what a crash leaves, not corruption.
                End::TornTail {
                    offset,
                    bytes: stride,
                    why,
                }
            } else {
                End::BadChunk {
                    offset,
                    bytes: stride,
                    why,
                }
            };
            report.chunks_after_end = count_valid_after(r, offset + stride, len)?;
            break;
        }
        if let Some(layout) = &expect.frame {
            if let Err(why) = frames_agree(layout, &header, &payload) {
                report.end = End::BadChunk {
                    offset,
                    bytes: stride,
                    why,
                };
                report.chunks_after_end = count_valid_after(r, offset + stride, len)?;
                break;
            }
        }
        if let Some(ticks_per_frame) = expect.frame_step_ticks.filter(|&s| s > 0) {
            let span = (header.frame_count as u64 - 1).saturating_mul(ticks_per_frame);
            if header.last_timestamp - header.first_timestamp != span {
                report.gaps.push(TimestampGap {
                    after_timestamp: header.first_timestamp,
                    resume_timestamp: header.last_timestamp,
                    missing_frames: ((header.last_timestamp - header.first_timestamp)
                        / ticks_per_frame)
                        .saturating_sub(header.frame_count as u64 - 1),
                    sequence: header.sequence,
                    inside_chunk: true,
                });
            }
            if let Some(prev) = report.chunks.last() {
                if header.first_timestamp != prev.last_timestamp.wrapping_add(ticks_per_frame) {
                    report.gaps.push(TimestampGap {
                        after_timestamp: prev.last_timestamp,
                        resume_timestamp: header.first_timestamp,
                        missing_frames: (header
                            .first_timestamp
                            .saturating_sub(prev.last_timestamp)
                            / ticks_per_frame)
                            .saturating_sub(1),
                        sequence: header.sequence,
                        inside_chunk: false,
                    });
                }
            }
        }
        debug_assert_eq!(
            header.sequence, expected_seq,
            "the prefix's sequence numbers count up by one"
        );
        report.chunks.push(ChunkSeen {
            offset,
            payload_offset: header.payload_offset(),
            sequence: header.sequence,
            first_timestamp: header.first_timestamp,
            last_timestamp: header.last_timestamp,
            frame_count: header.frame_count,
            payload_bytes: header.payload_bytes,
            stride_bytes: header.stride_bytes,
        });
        offset += stride;
        report.valid_bytes = offset;
    }
    if let End::Clean { zero_tail_bytes } = &mut report.end {
        *zero_tail_bytes = len - report.valid_bytes;
    }
    debug_assert!(
        report.valid_bytes <= len
            && report
                .chunks
                .last()
                .map_or(0, |c| c.offset + c.stride_bytes as u64)
                == report.valid_bytes,
        "the valid prefix ends at its last chunk's stride, inside the file"
    );
    debug_assert!(
        report
            .chunks
            .windows(2)
            .all(|w| w[1].offset == w[0].offset + w[0].stride_bytes as u64),
        "each chunk starts where the one before it ends"
    );
    debug_assert!(
        match &report.end {
            End::Clean { zero_tail_bytes } => report.valid_bytes + zero_tail_bytes == len,
            End::TornTail { offset, .. }
            | End::BadChunk { offset, .. }
            | End::FutureVersion { offset, .. } => *offset == report.valid_bytes,
        },
        "the end is reported where the valid prefix ends"
    );
    debug_assert!(
        report
            .gaps
            .iter()
            .all(|g| g.sequence < report.chunks.len() as u64),
        "a gap is reported only in a chunk that was kept"
    );
    Ok(report)
}

/// Checks a chunk's frames (its checksum already holds) against its header: frames of the
/// layout's size, every superchunk's detector frames in step, each frame after the one before,
/// the first at the header's first timestamp and the last at its last. A chunk that fails was
/// written with the wrong header or from the wrong bytes: not data to keep.
fn frames_agree(layout: &FrameLayout, h: &ChunkHeader, payload: &[u8]) -> Result<(), String> {
    debug_assert_eq!(
        payload.len(),
        h.payload_bytes as usize,
        "the chunk's whole payload"
    );
    if h.frame_bytes != layout.frame_bytes {
        return Err(format!(
            "frames of {} B where the frame type's are {} B",
            h.frame_bytes, layout.frame_bytes
        ));
    }
    debug_assert!(
        payload.len().is_multiple_of(h.frame_bytes as usize),
        "a decoded payload is whole frames: none is left unchecked"
    );
    let mut prev: Option<u64> = None;
    for (k, frame) in payload.chunks_exact(h.frame_bytes as usize).enumerate() {
        let ts = layout
            .checked_timestamp(frame)
            .map_err(|e| format!("frame {k}: {e}"))?;
        if prev.is_some_and(|p| ts <= p) {
            return Err(format!(
                "frame {k}'s timestamp {ts} does not follow the frame before it ({})",
                prev.unwrap_or(0)
            ));
        }
        if k == 0 && ts != h.first_timestamp {
            return Err(format!(
                "frame 0's timestamp {ts} disagrees with its chunk header (first {})",
                h.first_timestamp
            ));
        }
        prev = Some(ts);
    }
    match prev {
        Some(last) if last != h.last_timestamp => Err(format!(
            "the last frame's timestamp {last} disagrees with its chunk header (last {})",
            h.last_timestamp
        )),
        _ => Ok(()),
    }
}

/// Classifies the bytes at `offset` when no valid header starts there.
fn end_without_header<R: ReadAt + ?Sized>(
    r: &R,
    offset: u64,
    len: u64,
    e: HeaderError,
) -> io::Result<End> {
    debug_assert!(offset < len, "a header was looked for inside the file");
    if let HeaderError::FutureVersion(version) = e {
        return Ok(End::FutureVersion { offset, version });
    }
    if is_zero_or_end(r, offset, len)? {
        return Ok(End::Clean {
            zero_tail_bytes: len - offset,
        });
    }
    let nonzero_end = last_nonzero_end(r, offset, len)?;
    let why = e.to_string();
    Ok(match e {
        // A header that checks out structurally but not by checksum, followed by more data, is
        // damage; anything else (missing magic, short header) is the remains of a torn write.
        HeaderError::HeaderCrc { .. }
        | HeaderError::Inconsistent(_)
        | HeaderError::BadVersion(_)
            if !is_zero_or_end(r, offset + HEADER_BYTES as u64, len)?
                && nonzero_end - offset > 4096 =>
        {
            End::BadChunk {
                offset,
                bytes: nonzero_end - offset,
                why,
            }
        }
        _ => End::TornTail {
            offset,
            bytes: nonzero_end - offset,
            why,
        },
    })
}

const SCAN_BLOCK: usize = 1 << 20;

/// True when every byte from `offset` to `len` is zero.
fn is_zero_or_end<R: ReadAt + ?Sized>(r: &R, mut offset: u64, len: u64) -> io::Result<bool> {
    let mut buf = vec![0u8; SCAN_BLOCK];
    while offset < len {
        let n = (len - offset).min(SCAN_BLOCK as u64) as usize;
        r.read_exact_at_offset(&mut buf[..n], offset)?;
        if buf[..n].iter().any(|&b| b != 0) {
            return Ok(false);
        }
        offset += n as u64;
        debug_assert!(n > 0 && offset <= len, "the walk advances inside the file");
    }
    Ok(true)
}

/// The offset just past the last non-zero byte in `[offset, len)` (`offset` if none).
fn last_nonzero_end<R: ReadAt + ?Sized>(r: &R, offset: u64, len: u64) -> io::Result<u64> {
    debug_assert!(offset <= len, "a region of the file");
    let mut buf = vec![0u8; SCAN_BLOCK];
    let mut end = offset;
    let mut at = offset;
    while at < len {
        let n = (len - at).min(SCAN_BLOCK as u64) as usize;
        r.read_exact_at_offset(&mut buf[..n], at)?;
        if let Some(i) = buf[..n].iter().rposition(|&b| b != 0) {
            end = at + i as u64 + 1;
        }
        at += n as u64;
    }
    debug_assert!(
        (offset..=len).contains(&end),
        "the end found lies in the region"
    );
    Ok(end)
}

/// Counts chunks with valid headers and payloads after `offset` (stride-walked), for reports.
fn count_valid_after<R: ReadAt + ?Sized>(r: &R, mut offset: u64, len: u64) -> io::Result<u64> {
    let mut n = 0;
    let mut h = [0u8; HEADER_BYTES];
    while offset + HEADER_BYTES as u64 <= len {
        r.read_exact_at_offset(&mut h, offset)?;
        let Ok(header) = ChunkHeader::decode(&h) else {
            break;
        };
        debug_assert!(
            header.stride_bytes as usize > HEADER_BYTES,
            "a decoded chunk's stride moves the walk on"
        );
        if offset + header.stride_bytes as u64 > len {
            break;
        }
        let mut p = vec![0u8; header.payload_bytes as usize];
        r.read_exact_at_offset(&mut p, offset + header.payload_offset())?;
        if crate::chunk::crc32c(&p) == header.payload_crc32c {
            n += 1;
        }
        offset += header.stride_bytes as u64;
    }
    Ok(n)
}
