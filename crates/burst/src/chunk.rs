//! The chunk: a 64-byte header followed by whole frames, the unit that is made durable and
//! acknowledged. The layout is written down in docs/FORMAT.md and pinned by a golden test.
//!
//! All integers are little-endian. The header carries its own stride (header + payload + padding
//! to the medium's alignment), so a reader walks a file without knowing how it was written.

/// `SNBUFCHK`: the first 8 bytes of every chunk.
pub const MAGIC: [u8; 8] = *b"SNBUFCHK";
/// The layout version this code writes and reads.
pub const FORMAT_VERSION: u16 = 1;
pub const HEADER_BYTES: usize = 64;
/// Chunks on mapped memory start on 256 B boundaries (Optane's internal write unit); block
/// devices use their direct-I/O alignment.
pub const MAPPED_CHUNK_ALIGN_BYTES: u64 = 256;

const _: () = assert!(
    HEADER_BYTES.is_multiple_of(64),
    "the header fills whole cache lines"
);
const _: () = assert!((MAPPED_CHUNK_ALIGN_BYTES as usize).is_multiple_of(HEADER_BYTES));

/// Byte offsets of the header fields.
mod at {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HEADER_LEN: usize = 10;
    pub const LINK: usize = 12;
    pub const SEQUENCE: usize = 16;
    pub const FIRST_TS: usize = 24;
    pub const LAST_TS: usize = 32;
    pub const FRAME_COUNT: usize = 40;
    pub const FRAME_BYTES: usize = 44;
    pub const PAYLOAD_BYTES: usize = 48;
    pub const PAYLOAD_CRC: usize = 52;
    pub const STRIDE: usize = 56;
    pub const HEADER_CRC: usize = 60;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
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
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl ChunkHeader {
    /// The 64 header bytes, header checksum included.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[at::MAGIC..at::MAGIC + 8].copy_from_slice(&MAGIC);
        b[at::VERSION..at::VERSION + 2].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[at::HEADER_LEN..at::HEADER_LEN + 2].copy_from_slice(&(HEADER_BYTES as u16).to_le_bytes());
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
        let header_len = u16_at(b, at::HEADER_LEN) as usize;
        if header_len != HEADER_BYTES {
            return Err(HeaderError::Inconsistent(format!(
                "header length {header_len}"
            )));
        }
        h.check()?;
        Ok(h)
    }

    /// Relations every valid header satisfies (asserted on both sides: before writing, after
    /// reading).
    pub fn check(&self) -> Result<(), HeaderError> {
        let bad = |s: String| Err(HeaderError::Inconsistent(s));
        if self.frame_count == 0 || self.frame_bytes == 0 {
            return bad("no frames".into());
        }
        if self.frame_count as u64 * self.frame_bytes as u64 != self.payload_bytes as u64 {
            return bad(format!(
                "{} frames of {} B do not make {} B",
                self.frame_count, self.frame_bytes, self.payload_bytes
            ));
        }
        if (self.stride_bytes as u64) < (HEADER_BYTES as u64 + self.payload_bytes as u64) {
            return bad(format!(
                "stride {} shorter than the chunk",
                self.stride_bytes
            ));
        }
        if self.last_timestamp < self.first_timestamp {
            return bad("last timestamp before the first".into());
        }
        Ok(())
    }

    pub fn chunk_bytes(&self) -> usize {
        HEADER_BYTES + self.payload_bytes as usize
    }
}

/// The stride of a chunk of `payload_bytes` at `align_bytes`.
pub fn stride_for(payload_bytes: usize, align_bytes: u64) -> u64 {
    (HEADER_BYTES as u64 + payload_bytes as u64).div_ceil(align_bytes) * align_bytes
}

/// CRC-32C (Castagnoli, the iSCSI polynomial) of `data`: the checksum of headers and payloads.
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// CRC-32C of the concatenation of `parts`.
pub fn crc32c_of_parts(parts: &[&[u8]]) -> u32 {
    match parts {
        [one] => crc32c(one),
        _ => {
            let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
            for p in parts {
                d.update(p);
            }
            d.finalize() as u32
        }
    }
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
    }

    fn sample() -> ChunkHeader {
        let payload = vec![7u8; 3 * 100];
        ChunkHeader {
            link: 3,
            sequence: 42,
            first_timestamp: 1000,
            last_timestamp: 1600,
            frame_count: 3,
            frame_bytes: 100,
            payload_bytes: 300,
            payload_crc32c: crc32c(&payload),
            stride_bytes: stride_for(300, 512) as u32,
        }
    }

    #[test]
    fn a_header_round_trips() {
        let h = sample();
        assert_eq!(ChunkHeader::decode(&h.encode()).unwrap(), h);
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
