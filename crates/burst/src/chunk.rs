//! The chunk: a 64-byte header, padded to its header block, followed by whole frames: the unit
//! that is made durable and acknowledged. The layout is written down in docs/FORMAT.md and
//! pinned by golden tests (both versions).
//!
//! All integers are little-endian. The header carries its own header block size and stride
//! (header block + payload + padding to the medium's alignment), so a reader walks a file
//! without knowing how it was written.
//!
//! Version 1: the payload follows the 64 header bytes directly. Version 2: the header fills a
//! block of its own (`header_bytes`: 64 on memory, the direct-I/O alignment on block devices),
//! so a payload that is whole aligned blocks can be written straight from the latency buffer,
//! never copied by the CPU. Readers take both.

/// `SNBUFCHK`: the first 8 bytes of every chunk.
pub const MAGIC: [u8; 8] = *b"SNBUFCHK";
/// The layout version this code writes; it reads this one and every one before it.
pub const FORMAT_VERSION: u16 = 2;
/// The header's own bytes (its fields and checksum); the header block may be longer (v2).
pub const HEADER_BYTES: usize = 64;
/// The largest header block a version-2 header may declare: the u16 field's largest multiple of
/// 64 that is a power of two, above any direct-I/O alignment in use (512 B, 4 KiB).
pub const MAX_HEADER_BLOCK_BYTES: usize = 32 << 10;
/// Chunks on mapped memory start on 256 B boundaries (Optane's internal write unit); block
/// devices use their direct-I/O alignment.
pub const MAPPED_CHUNK_ALIGN_BYTES: u64 = 256;

const _: () = assert!(
    HEADER_BYTES.is_multiple_of(64),
    "the header fills whole cache lines"
);
const _: () = assert!((MAPPED_CHUNK_ALIGN_BYTES as usize).is_multiple_of(HEADER_BYTES));
const _: () = assert!(
    MAX_HEADER_BLOCK_BYTES <= u16::MAX as usize
        && MAX_HEADER_BLOCK_BYTES.is_multiple_of(HEADER_BYTES),
    "a header block size fits the header's u16 field"
);

/// Byte offsets of the header fields, each derived from the one before and its width, so that
/// the table in docs/FORMAT.md is the only place the layout is written out by hand.
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = MAGIC + 8;
    pub const HEADER_LEN: usize = VERSION + 2;
    pub const LINK: usize = HEADER_LEN + 2;
    pub const SEQUENCE: usize = LINK + 4;
    pub const FIRST_TS: usize = SEQUENCE + 8;
    pub const LAST_TS: usize = FIRST_TS + 8;
    pub const FRAME_COUNT: usize = LAST_TS + 8;
    pub const FRAME_BYTES: usize = FRAME_COUNT + 4;
    pub const PAYLOAD_BYTES: usize = FRAME_BYTES + 4;
    pub const PAYLOAD_CRC: usize = PAYLOAD_BYTES + 4;
    pub const STRIDE: usize = PAYLOAD_CRC + 4;
    pub const HEADER_CRC: usize = STRIDE + 4;
}

const _: () = assert!(
    at::HEADER_CRC + 4 == HEADER_BYTES,
    "the header checksum is the header's last field"
);
const _: () = assert!(
    at::SEQUENCE == 16 && at::FIRST_TS == 24 && at::STRIDE == 56,
    "the offsets docs/FORMAT.md gives"
);
const _: () = assert!(
    at::SEQUENCE.is_multiple_of(8) && at::FIRST_TS.is_multiple_of(8),
    "64-bit fields are naturally aligned"
);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// The layout version (`FORMAT_VERSION` for what this code writes).
    pub version: u16,
    /// Bytes from the chunk's start to its payload: 64 in version 1; in version 2 a multiple of
    /// 64 up to `MAX_HEADER_BLOCK_BYTES` (the header, then zeros).
    pub header_bytes: u16,
    pub link: u32,
    /// 0, 1, 2, … per link: a gap means a chunk is missing.
    pub sequence: u64,
    pub first_timestamp: u64,
    pub last_timestamp: u64,
    pub frame_count: u32,
    pub frame_bytes: u32,
    pub payload_bytes: u32,
    pub payload_crc32c: u32,
    /// Bytes from this chunk's start to the next chunk's start.
    pub stride_bytes: u32,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("no chunk here (bytes are {0})")]
    NoMagic(&'static str),
    #[error("header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderCrc { stored: u32, computed: u32 },
    #[error("format version {0} is newer than this snbuf understands ({FORMAT_VERSION})")]
    FutureVersion(u16),
    #[error("format version {0} is not a version snbuf ever wrote")]
    BadVersion(u16),
    #[error("inconsistent header: {0}")]
    Inconsistent(String),
    #[error("truncated: {have} of {need} bytes")]
    Truncated { have: usize, need: usize },
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    debug_assert!(
        at + 2 <= HEADER_BYTES && at.is_multiple_of(2),
        "a 16-bit field of the header, naturally aligned"
    );
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    debug_assert!(
        at + 4 <= HEADER_BYTES && at.is_multiple_of(4),
        "a 32-bit field of the header, naturally aligned"
    );
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    debug_assert!(
        at + 8 <= HEADER_BYTES && at.is_multiple_of(8),
        "a 64-bit field of the header, naturally aligned"
    );
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl ChunkHeader {
    /// The 64 header bytes, header checksum included.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[at::MAGIC..at::MAGIC + 8].copy_from_slice(&MAGIC);
        b[at::VERSION..at::VERSION + 2].copy_from_slice(&self.version.to_le_bytes());
        b[at::HEADER_LEN..at::HEADER_LEN + 2].copy_from_slice(&self.header_bytes.to_le_bytes());
        b[at::LINK..at::LINK + 4].copy_from_slice(&self.link.to_le_bytes());
        b[at::SEQUENCE..at::SEQUENCE + 8].copy_from_slice(&self.sequence.to_le_bytes());
        b[at::FIRST_TS..at::FIRST_TS + 8].copy_from_slice(&self.first_timestamp.to_le_bytes());
        b[at::LAST_TS..at::LAST_TS + 8].copy_from_slice(&self.last_timestamp.to_le_bytes());
        b[at::FRAME_COUNT..at::FRAME_COUNT + 4].copy_from_slice(&self.frame_count.to_le_bytes());
        b[at::FRAME_BYTES..at::FRAME_BYTES + 4].copy_from_slice(&self.frame_bytes.to_le_bytes());
        b[at::PAYLOAD_BYTES..at::PAYLOAD_BYTES + 4]
            .copy_from_slice(&self.payload_bytes.to_le_bytes());
        b[at::PAYLOAD_CRC..at::PAYLOAD_CRC + 4].copy_from_slice(&self.payload_crc32c.to_le_bytes());
        b[at::STRIDE..at::STRIDE + 4].copy_from_slice(&self.stride_bytes.to_le_bytes());
        let crc = crc32c(&b[..at::HEADER_CRC]);
        b[at::HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());
        debug_assert!(
            !matches!(ChunkHeader::decode(&b), Ok(h) if h != *self),
            "a header that decodes reads back as it was encoded"
        );
        b
    }

    /// Parses and checks a header. Any byte string gives a header or an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<Self, HeaderError> {
        if b.len() < HEADER_BYTES {
            return Err(HeaderError::Truncated {
                have: b.len(),
                need: HEADER_BYTES,
            });
        }
        if b[..8] != MAGIC {
            let what = if b[..HEADER_BYTES].iter().all(|&x| x == 0) {
                "zero"
            } else {
                "not a chunk header"
            };
            return Err(HeaderError::NoMagic(what));
        }
        let stored = u32_at(b, at::HEADER_CRC);
        let computed = crc32c(&b[..at::HEADER_CRC]);
        if stored != computed {
            return Err(HeaderError::HeaderCrc { stored, computed });
        }
        // Only a header whose checksum holds is believed about its version.
        let version = u16_at(b, at::VERSION);
        if version > FORMAT_VERSION {
            return Err(HeaderError::FutureVersion(version));
        }
        if version == 0 {
            return Err(HeaderError::BadVersion(version));
        }
        let h = ChunkHeader {
            version,
            header_bytes: u16_at(b, at::HEADER_LEN),
            link: u32_at(b, at::LINK),
            sequence: u64_at(b, at::SEQUENCE),
            first_timestamp: u64_at(b, at::FIRST_TS),
            last_timestamp: u64_at(b, at::LAST_TS),
            frame_count: u32_at(b, at::FRAME_COUNT),
            frame_bytes: u32_at(b, at::FRAME_BYTES),
            payload_bytes: u32_at(b, at::PAYLOAD_BYTES),
            payload_crc32c: u32_at(b, at::PAYLOAD_CRC),
            stride_bytes: u32_at(b, at::STRIDE),
        };
        h.check()?;
        debug_assert!(
            (1..=FORMAT_VERSION).contains(&h.version),
            "only a version this code reads is decoded"
        );
        debug_assert!(
            h.chunk_bytes() <= h.stride_bytes as usize,
            "a decoded chunk fits its stride"
        );
        Ok(h)
    }

    /// Relations every valid header satisfies (asserted on both sides: before writing, after
    /// reading).
    pub fn check(&self) -> Result<(), HeaderError> {
        let bad = |s: String| Err(HeaderError::Inconsistent(s));
        let hb = self.header_bytes as usize;
        let header_block_ok = match self.version {
            1 => hb == HEADER_BYTES,
            _ => {
                (HEADER_BYTES..=MAX_HEADER_BLOCK_BYTES).contains(&hb)
                    && hb.is_multiple_of(HEADER_BYTES)
            }
        };
        if !header_block_ok {
            return bad(format!(
                "a header block of {hb} B in format version {}",
                self.version
            ));
        }
        if self.frame_count == 0 || self.frame_bytes == 0 {
            return bad("no frames".into());
        }
        if self.frame_count as u64 * self.frame_bytes as u64 != self.payload_bytes as u64 {
            return bad(format!(
                "{} frames of {} B do not make {} B",
                self.frame_count, self.frame_bytes, self.payload_bytes
            ));
        }
        if (self.stride_bytes as u64) < (hb as u64 + self.payload_bytes as u64) {
            return bad(format!(
                "stride {} shorter than the chunk",
                self.stride_bytes
            ));
        }
        if self.last_timestamp < self.first_timestamp {
            return bad("last timestamp before the first".into());
        }
        debug_assert!(
            hb.is_multiple_of(HEADER_BYTES) && self.payload_bytes > 0,
            "a valid chunk is a header block of whole 64 B lines and a payload of some frames"
        );
        Ok(())
    }

    pub fn chunk_bytes(&self) -> usize {
        let bytes = self.header_bytes as usize + self.payload_bytes as usize;
        debug_assert!(self.stride_bytes == 0 || bytes <= self.stride_bytes as usize);
        bytes
    }

    /// Bytes from the chunk's start to its payload.
    pub fn payload_offset(&self) -> u64 {
        debug_assert!(
            self.header_bytes as usize >= HEADER_BYTES,
            "the payload starts behind the whole header"
        );
        self.header_bytes as u64
    }
}

/// The stride of a chunk of `payload_bytes` behind a header block of `header_bytes`, at
/// `align_bytes`.
pub fn stride_for(header_bytes: usize, payload_bytes: usize, align_bytes: u64) -> u64 {
    assert!(align_bytes > 0, "an alignment of some bytes");
    debug_assert!(
        header_bytes >= HEADER_BYTES,
        "a chunk holds at least its header"
    );
    let stride = (header_bytes as u64 + payload_bytes as u64).div_ceil(align_bytes) * align_bytes;
    debug_assert!(
        stride >= (header_bytes + payload_bytes) as u64 && stride.is_multiple_of(align_bytes)
    );
    stride
}

/// CRC-32C (Castagnoli, the iSCSI polynomial) of `data`: the checksum of headers and payloads,
/// by the implementation fastest on this CPU (`snbuf_platform::crc`).
pub fn crc32c(data: &[u8]) -> u32 {
    snbuf_platform::crc::crc32c_in_cache(&[data])
}

/// CRC-32C of the concatenation of `parts`, which are not in the CPU's caches (memory a device
/// read by DMA, a latency buffer's slots): the implementation measured faster from DRAM.
pub fn crc32c_from_memory(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .fold(0, |crc, p| ::crc32c::crc32c_append(crc, p))
}

/// The reflected CRC-32C polynomial (Castagnoli).
const POLY_REFLECTED: u32 = 0x82F6_3B78;

/// a(x) · b(x) mod P(x), both as reflected 32-bit polynomials (bit 31 is x^0).
fn mult_mod_p(a: u32, mut b: u32) -> u32 {
    // The loop ends at `a`'s lowest set term: a zero `a` has none.
    debug_assert_ne!(a, 0, "a multiplier with some term");
    let mut m = 1u32 << 31;
    let mut p = 0u32;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 {
            (b >> 1) ^ POLY_REFLECTED
        } else {
            b >> 1
        };
    }
}

/// x^(8·bytes) mod P(x): the operator that moves a CRC past `bytes` more bytes.
fn shift_operator(bytes: u64) -> u32 {
    // x^(2^k) mod P for k = 3 (x^8, one byte), 4, 5, …, by squaring.
    let mut power = 1u32 << (31 - 8); // x^8
    let mut op = 1u32 << 31; // x^0
    let mut n = bytes;
    while n != 0 {
        if n & 1 != 0 {
            op = mult_mod_p(power, op);
        }
        power = mult_mod_p(power, power);
        n >>= 1;
    }
    // P has a constant term, so no power of x is a multiple of it; a zero operator would also
    // never end `mult_mod_p`.
    debug_assert_ne!(op, 0, "x^n mod P is never zero");
    op
}

/// The CRC-32C of frames of `frame_bytes` each, put together from each frame's own CRC-32C
/// (which a link computed while the frame was in its cache): `crc(A‖B) = crc(A)·x^(8|B|) ⊕
/// crc(B)` mod P, the pre- and post-inversion included. The multiply by the frame size's shift
/// is linear in the CRC, so it is four lookups in tables built once per frame size (one byte of
/// the CRC each) rather than 32 conditional steps: a writer gets its chunk's checksum without
/// reading the payload, for a few nanoseconds per frame.
#[derive(Clone, Debug)]
pub struct FrameCrcCombiner {
    /// `by_byte[k][v]` = `v·x^(8k)` (in the CRC's reflected bit order) times the shift, mod P.
    by_byte: Box<[[u32; 256]; 4]>,
}

impl FrameCrcCombiner {
    pub fn new(frame_bytes: u32) -> Self {
        assert!(frame_bytes > 0, "frames have bytes");
        let shift = shift_operator(frame_bytes as u64);
        let mut by_byte = Box::new([[0u32; 256]; 4]);
        for (k, table) in by_byte.iter_mut().enumerate() {
            for (v, entry) in table.iter_mut().enumerate() {
                *entry = mult_mod_p(shift, (v as u32) << (8 * k));
            }
        }
        // The unit polynomial (x^0, bit 31: byte 3's top bit) times the shift is the shift.
        debug_assert_eq!(
            by_byte[3][0x80], shift,
            "the tables multiply by the frame's shift"
        );
        FrameCrcCombiner { by_byte }
    }

    /// `crc` moved past one more frame: `crc·x^(8·frame_bytes)` mod P.
    fn shifted(&self, crc: u32) -> u32 {
        let t = &self.by_byte;
        t[0][(crc & 0xff) as usize]
            ^ t[1][((crc >> 8) & 0xff) as usize]
            ^ t[2][((crc >> 16) & 0xff) as usize]
            ^ t[3][(crc >> 24) as usize]
    }

    /// The CRC-32C of the frames whose CRCs are `crcs`, in order.
    pub fn combine(&self, crcs: impl IntoIterator<Item = u32>) -> u32 {
        let mut crcs = crcs.into_iter();
        let Some(first) = crcs.next() else {
            return 0;
        };
        crcs.fold(first, |acc, c| self.shifted(acc) ^ c)
    }
}

/// CRC-32C of the concatenation of `parts`.
pub fn crc32c_of_parts(parts: &[&[u8]]) -> u32 {
    snbuf_platform::crc::crc32c_in_cache(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_is_crc32c_whatever_the_split() {
        // Checked against an independent implementation (the crc32c crate).
        assert_eq!(crc32c(b"123456789"), 0xE306_9283, "the CRC-32C check value");
        let data: Vec<u8> = (0..100_003u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let want = ::crc32c::crc32c(&data);
        assert_eq!(crc32c(&data), want);
        for cut in [0, 1, 63, 5568, 100_003] {
            assert_eq!(
                crc32c_of_parts(&[&data[..cut], &data[cut..]]),
                want,
                "cut {cut}"
            );
        }
        assert_eq!(crc32c_of_parts(&[]), 0);
        assert_eq!(crc32c_from_memory(&[&data[..5568], &data[5568..]]), want);
        assert_eq!(crc32c_from_memory(&[]), 0);
    }

    #[test]
    fn frame_crcs_combine_into_the_chunks_crc() {
        let data: Vec<u8> = (0..200 * 5568u32)
            .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
            .collect();
        for fb in [1usize, 8, 464, 5568, 7200] {
            let n = data.len() / fb;
            let frames = &data[..n * fb];
            let c = FrameCrcCombiner::new(fb as u32);
            let crcs = frames.chunks_exact(fb).map(crc32c);
            assert_eq!(c.combine(crcs), crc32c(frames), "frames of {fb} B");
            assert_eq!(c.combine([crc32c(&frames[..fb])]), crc32c(&frames[..fb]));
        }
        assert_eq!(FrameCrcCombiner::new(64).combine([]), 0);
    }

    fn sample() -> ChunkHeader {
        let payload = vec![7u8; 3 * 100];
        ChunkHeader {
            version: FORMAT_VERSION,
            header_bytes: 512,
            link: 3,
            sequence: 42,
            first_timestamp: 1000,
            last_timestamp: 1600,
            frame_count: 3,
            frame_bytes: 100,
            payload_bytes: 300,
            payload_crc32c: crc32c(&payload),
            stride_bytes: stride_for(512, 300, 512) as u32,
        }
    }

    #[test]
    fn a_header_round_trips() {
        let h = sample();
        assert_eq!(ChunkHeader::decode(&h.encode()).unwrap(), h);
    }

    #[test]
    fn each_version_has_its_header_block_rule() {
        // Version 1 (still read): the payload right behind the 64 header bytes.
        let v1 = ChunkHeader {
            version: 1,
            header_bytes: 64,
            stride_bytes: stride_for(64, 300, 512) as u32,
            ..sample()
        };
        assert_eq!(ChunkHeader::decode(&v1.encode()).unwrap(), v1);
        let v1_long = ChunkHeader {
            header_bytes: 512,
            ..v1
        };
        assert!(ChunkHeader::decode(&v1_long.encode()).is_err());
        // Version 2: a block of whole 64 B lines, up to the maximum, inside the stride.
        for bad in [0u16, 32, 100, 64 * 1023 + 1] {
            let h = ChunkHeader {
                header_bytes: bad,
                ..sample()
            };
            assert!(ChunkHeader::decode(&h.encode()).is_err(), "{bad}");
        }
        let over_stride = ChunkHeader {
            header_bytes: 1024,
            ..sample()
        };
        assert!(ChunkHeader::decode(&over_stride.encode()).is_err());
        let future = ChunkHeader {
            version: FORMAT_VERSION + 1,
            ..sample()
        };
        assert_eq!(
            ChunkHeader::decode(&future.encode()),
            Err(HeaderError::FutureVersion(FORMAT_VERSION + 1))
        );
    }

    #[test]
    fn every_single_bit_flip_is_caught() {
        let bytes = sample().encode();
        for i in 0..HEADER_BYTES * 8 {
            let mut b = bytes;
            b[i / 8] ^= 1 << (i % 8);
            assert!(
                ChunkHeader::decode(&b).is_err(),
                "bit {i} flipped went unnoticed"
            );
        }
    }

    #[test]
    fn zeros_and_short_input_are_not_chunks() {
        assert_eq!(
            ChunkHeader::decode(&[0u8; 64]),
            Err(HeaderError::NoMagic("zero"))
        );
        assert!(matches!(
            ChunkHeader::decode(&[0u8; 10]),
            Err(HeaderError::Truncated { .. })
        ));
    }
}
