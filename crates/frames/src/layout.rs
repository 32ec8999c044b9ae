//! Where a frame type keeps its timestamp, sequence number and identity, and how to read and
//! (for an emulator or a replay) write them, byte for byte as DUNE defines them. Little-endian;
//! bit fields count from the lowest bit of their word.
//!
//! - DAQEthHeader (WIBEth, TDEEth, DAPHNE Ethernet stream), 16 bytes: word 0 (u64) is
//!   version 0-5, det_id 6-11, crate_id 12-21, slot_id 22-25, stream_id 26-33, reserved 34-39,
//!   seq_id 40-51 (+1 per frame, wraps at 4096), block_length 52-63; word 1 is the timestamp.
//! - WIB2 frame (12 to a superchunk), 472 bytes: word 0 (u32) is version 0-5, detector_id 6-11,
//!   crate 12-21, slot 22-24, unused 25, link 26-31; the timestamp's low u32 at bytes 4..8, its
//!   high u32 at 8..12.
//! - ProtoDUNE WIB frame (12 to a superchunk), 464 bytes: word 0 (u32) is sof 0-7, version
//!   8-12, fiber 13-15, crate 16-20, slot 21-23; the u64 at bytes 8..16 holds the timestamp,
//!   whose bit 63 (`z`) says whether it has 63 bits (z = 0) or 48 bits followed by a 15-bit
//!   WIB counter (z = 1).
//!
//! A superchunk's frames each carry their own timestamp, `ticks_per_subframe` apart.

/// Where the timestamp is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampField {
    /// A u64 at this byte offset (of every subframe).
    U64 { offset: usize },
    /// WIB2: low u32 at bytes 4..8, high u32 at 8..12.
    Wib2,
    /// ProtoDUNE WIB: a u64 at 8..16 with the `z` flag in bit 63.
    Wib1,
}

/// Which header carries identity and sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderKind {
    /// DAQEthHeader: identity, a 12-bit sequence number.
    DaqEth,
    /// WIB2 frame header: identity, no sequence number.
    Wib2,
    /// ProtoDUNE WIB header: identity, no sequence number.
    Wib1,
    /// Nothing but the timestamp (custom frames).
    None,
}

/// The DAQEthHeader's sequence number counts modulo this.
pub const SEQUENCE_MODULUS: u64 = 1 << 12;

/// What a frame says of where it comes from. Fields a header does not have are 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Identity {
    pub version: u8,
    pub det_id: u8,
    pub crate_id: u16,
    pub slot_id: u8,
    /// DAQEthHeader stream_id; WIB2 link; ProtoDUNE WIB fiber.
    pub stream_id: u8,
}

/// A frame type's layout (see the module comment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameLayout {
    /// Bytes of one stored frame (a whole superchunk).
    pub frame_bytes: u32,
    /// Detector frames in one stored frame: 12 in a superchunk, else 1.
    pub subframes: u32,
    /// Ticks from one stored frame to the next.
    pub ticks_per_frame: u64,
    pub clock_hz: u64,
    pub timestamp: TimestampField,
    pub header: HeaderKind,
}

/// Why a frame's timestamps are not what its layout promises.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("subframe {subframe} has timestamp {found}, {expected} was due")]
pub struct SubframeMismatch {
    pub subframe: u32,
    pub found: u64,
    pub expected: u64,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}
/// Where a detector header keeps a frame's identity: its first word (`word_bytes`, little
/// endian) and each field's (lowest bit, bits). WIB1 has no detector id; its first byte is the
/// start-of-frame mark, written with the identity.
struct IdentityBits {
    word_bytes: usize,
    version: (u32, u32),
    det_id: Option<(u32, u32)>,
    crate_id: (u32, u32),
    slot_id: (u32, u32),
    stream_id: (u32, u32),
    start_of_frame: Option<(u32, u32, u64)>,
}

impl IdentityBits {
    /// The fields of `header`, as DUNE's detdataformats lay them out; None for custom frames.
    fn of(header: HeaderKind) -> Option<IdentityBits> {
        let daq = |word_bytes, slot_bits, stream_bits| IdentityBits {
            word_bytes,
            version: (0, 6),
            det_id: Some((6, 6)),
            crate_id: (12, 10),
            slot_id: (22, slot_bits),
            stream_id: (26, stream_bits),
            start_of_frame: None,
        };
        match header {
            HeaderKind::DaqEth => Some(daq(8, 4, 8)),
            HeaderKind::Wib2 => Some(daq(4, 3, 6)),
            HeaderKind::Wib1 => Some(IdentityBits {
                word_bytes: 4,
                version: (8, 5),
                det_id: None,
                crate_id: (16, 5),
                slot_id: (21, 3),
                stream_id: (13, 3),
                start_of_frame: Some((0, 8, WIB1_SOF)),
            }),
            HeaderKind::None => None,
        }
    }

    /// The header's first word of `frame`.
    fn word(&self, frame: &[u8]) -> u64 {
        match self.word_bytes {
            8 => u64_at(frame, 0),
            4 => u32_at(frame, 0) as u64,
            n => unreachable!("a {n}-byte header word"),
        }
    }
}

/// `bits` bits of `word` from bit `lo`.
fn field(word: u64, lo: u32, bits: u32) -> u64 {
    debug_assert!(
        bits > 0 && bits < 64 && lo + bits <= 64,
        "a field of a header word"
    );
    (word >> lo) & ((1u64 << bits) - 1)
}
fn with_field(word: u64, lo: u32, bits: u32, value: u64) -> u64 {
    debug_assert!(
        bits > 0 && bits < 64 && lo + bits <= 64,
        "a field of a header word"
    );
    let mask = ((1u64 << bits) - 1) << lo;
    (word & !mask) | ((value << lo) & mask)
}

/// ProtoDUNE WIB: bit 63 of the timestamp word.
const WIB1_Z: u64 = 1 << 63;

impl FrameLayout {
    pub fn subframe_bytes(&self) -> usize {
        debug_assert!(
            self.subframes > 0 && self.frame_bytes.is_multiple_of(self.subframes),
            "a frame is whole subframes"
        );
        (self.frame_bytes / self.subframes) as usize
    }

    pub fn ticks_per_subframe(&self) -> u64 {
        debug_assert!(
            self.subframes == 1 || self.ticks_per_frame.is_multiple_of(self.subframes as u64),
            "subframes are evenly spaced in time"
        );
        self.ticks_per_frame / self.subframes as u64
    }

    /// The timestamp of a detector frame (one subframe's bytes).
    pub fn subframe_timestamp(&self, sub: &[u8]) -> u64 {
        match self.timestamp {
            TimestampField::U64 { offset } => u64_at(sub, offset),
            TimestampField::Wib2 => u32_at(sub, 4) as u64 | (u32_at(sub, 8) as u64) << 32,
            TimestampField::Wib1 => {
                let w = u64_at(sub, 8);
                if w & WIB1_Z != 0 {
                    w & ((1 << 48) - 1)
                } else {
                    w & !WIB1_Z
                }
            }
        }
    }

    fn write_subframe_timestamp(&self, sub: &mut [u8], ts: u64) {
        match self.timestamp {
            TimestampField::U64 { offset } => {
                sub[offset..offset + 8].copy_from_slice(&ts.to_le_bytes())
            }
            TimestampField::Wib2 => {
                sub[4..8].copy_from_slice(&(ts as u32).to_le_bytes());
                sub[8..12].copy_from_slice(&((ts >> 32) as u32).to_le_bytes());
            }
            TimestampField::Wib1 => {
                let old = u64_at(sub, 8);
                let w = if old & WIB1_Z != 0 {
                    // A 48-bit timestamp beside a WIB counter that stays.
                    (old & !((1 << 48) - 1)) | (ts & ((1 << 48) - 1))
                } else {
                    ts & !WIB1_Z
                };
                sub[8..16].copy_from_slice(&w.to_le_bytes());
            }
        }
    }

    /// The frame's timestamp: its first detector frame's.
    pub fn timestamp(&self, frame: &[u8]) -> u64 {
        self.subframe_timestamp(frame)
    }

    /// The timestamps of every detector frame in a stored frame.
    pub fn subframe_timestamps<'a>(&'a self, frame: &'a [u8]) -> impl Iterator<Item = u64> + 'a {
        frame
            .chunks_exact(self.subframe_bytes())
            .map(|sub| self.subframe_timestamp(sub))
    }

    /// The frame's timestamp, checked: in a superchunk every detector frame must follow the
    /// one before by `ticks_per_subframe`.
    pub fn checked_timestamp(&self, frame: &[u8]) -> Result<u64, SubframeMismatch> {
        let first = self.timestamp(frame);
        let step = self.ticks_per_subframe();
        for (k, ts) in self.subframe_timestamps(frame).enumerate().skip(1) {
            let expected = first.wrapping_add(k as u64 * step);
            if ts != expected {
                return Err(SubframeMismatch {
                    subframe: k as u32,
                    found: ts,
                    expected,
                });
            }
        }
        Ok(first)
    }

    /// Writes `ts` as the frame's timestamp, and `ts + k * ticks_per_subframe` into detector
    /// frame k of a superchunk. Nothing else changes.
    pub fn write_timestamp(&self, frame: &mut [u8], ts: u64) {
        let step = self.ticks_per_subframe();
        let bytes = self.subframe_bytes();
        // (A piece of a frame would keep stale timestamps in its last subframe.)
        assert!(
            frame.len().is_multiple_of(bytes),
            "timestamps are written into whole subframes"
        );
        for (k, sub) in frame.chunks_exact_mut(bytes).enumerate() {
            self.write_subframe_timestamp(sub, ts.wrapping_add(k as u64 * step));
        }
    }

    /// The frame's sequence number, for headers that have one (12 bits, wrapping).
    pub fn sequence(&self, frame: &[u8]) -> Option<u64> {
        match self.header {
            HeaderKind::DaqEth => Some(field(u64_at(frame, 0), 40, 12)),
            _ => None,
        }
    }

    /// Writes the sequence number (modulo `SEQUENCE_MODULUS`) where the header has one.
    pub fn write_sequence(&self, frame: &mut [u8], seq: u64) {
        if self.header == HeaderKind::DaqEth {
            let w = with_field(u64_at(frame, 0), 40, 12, seq % SEQUENCE_MODULUS);
            frame[..8].copy_from_slice(&w.to_le_bytes());
        }
    }

    /// Where the frame says it comes from (None for custom frames).
    pub fn identity(&self, frame: &[u8]) -> Option<Identity> {
        let bits = IdentityBits::of(self.header)?;
        let w = bits.word(frame);
        Some(Identity {
            version: field(w, bits.version.0, bits.version.1) as u8,
            det_id: bits.det_id.map_or(0, |(lo, n)| field(w, lo, n) as u8),
            crate_id: field(w, bits.crate_id.0, bits.crate_id.1) as u16,
            slot_id: field(w, bits.slot_id.0, bits.slot_id.1) as u8,
            stream_id: field(w, bits.stream_id.0, bits.stream_id.1) as u8,
        })
    }

    /// Writes `id` into every detector frame's header (fields wider than the header's are cut
    /// to its width). Custom frames have no header: nothing is written.
    pub fn write_identity(&self, frame: &mut [u8], id: &Identity) {
        let Some(bits) = IdentityBits::of(self.header) else {
            return;
        };
        let bytes = self.subframe_bytes();
        assert!(bytes >= bits.word_bytes, "a subframe holds its header word");
        for sub in frame.chunks_exact_mut(bytes) {
            let mut w = bits.word(sub);
            if let Some((lo, n, mark)) = bits.start_of_frame {
                w = with_field(w, lo, n, mark);
            }
            w = with_field(w, bits.version.0, bits.version.1, id.version as u64);
            if let Some((lo, n)) = bits.det_id {
                w = with_field(w, lo, n, id.det_id as u64);
            }
            w = with_field(w, bits.crate_id.0, bits.crate_id.1, id.crate_id as u64);
            w = with_field(w, bits.slot_id.0, bits.slot_id.1, id.slot_id as u64);
            w = with_field(w, bits.stream_id.0, bits.stream_id.1, id.stream_id as u64);
            sub[..bits.word_bytes].copy_from_slice(&w.to_le_bytes()[..bits.word_bytes]);
        }
    }

    /// The identity a link's frames carry when snbuf emulates `link`: distinct per link within
    /// each header's field widths (stream/link/fiber first, then slot, then crate).
    pub fn identity_for_link(&self, link: u32, det_id: u8, version: u8) -> Identity {
        // Custom frames carry no identity: the widths of DAQ Ethernet's serve.
        let bits = IdentityBits::of(self.header)
            .or_else(|| IdentityBits::of(HeaderKind::DaqEth))
            .expect("DAQ Ethernet has an identity");
        let (stream_bits, slot_bits) = (bits.stream_id.1, bits.slot_id.1);
        assert!(
            stream_bits + slot_bits < 32,
            "a link's stream and slot in its number"
        );
        let l = link as u64;
        Identity {
            version,
            det_id,
            stream_id: (l & ((1 << stream_bits) - 1)) as u8,
            slot_id: ((l >> stream_bits) & ((1 << slot_bits) - 1)) as u8,
            crate_id: (1 + (l >> (stream_bits + slot_bits))) as u16,
        }
    }

    /// Byte ranges of a frame that an emulator or replay rewrites (timestamps and sequence
    /// numbers): everything else of a replayed frame is the recording's own.
    pub fn rewritten_bytes(&self) -> Vec<std::ops::Range<usize>> {
        let mut v = Vec::new();
        for k in 0..self.subframes as usize {
            let base = k * self.subframe_bytes();
            match self.timestamp {
                TimestampField::U64 { offset } => v.push(base + offset..base + offset + 8),
                TimestampField::Wib2 => v.push(base + 4..base + 12),
                TimestampField::Wib1 => v.push(base + 8..base + 16),
            }
        }
        if self.header == HeaderKind::DaqEth {
            // seq_id: bits 40-51 of word 0, i.e. bytes 5 and 6.
            v.push(5..7);
        }
        let frame_bytes = self.frame_bytes as usize;
        debug_assert!(v.iter().all(|r| r.end <= frame_bytes), "bytes of the frame");
        v
    }
}

/// ProtoDUNE WIB start-of-frame byte.
pub const WIB1_SOF: u64 = 0x3C;
