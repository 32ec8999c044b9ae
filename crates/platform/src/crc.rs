//! CRC-32C (Castagnoli) of data in the CPU's caches, by whichever implementation is fastest on
//! this CPU. Neither wins everywhere: carry-less multiplication (`crc-fast`) runs at 85 GB/s in
//! cache on this project's Intel machines and 18 GB/s on its AMD EPYC ones, where the SSE4.2
//! `crc32` instruction loop (the `crc32c` crate) runs at 23 GB/s (`snbuf bench checksum`). So
//! the choice is measured once per process, on a block of the size the recorder checksums in
//! cache (a frame, a chunk just copied), in well under a millisecond.

use std::hint::black_box;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A CRC-32C implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Implementation {
    /// `crc-fast`: folding by carry-less multiplication (PCLMULQDQ, VPCLMULQDQ where present).
    CrcFast,
    /// The `crc32c` crate: the SSE4.2 `crc32` instruction, three streams interleaved.
    Crc32cInstruction,
}

impl Implementation {
    pub const ALL: [Implementation; 2] =
        [Implementation::CrcFast, Implementation::Crc32cInstruction];

    pub fn name(self) -> &'static str {
        match self {
            Implementation::CrcFast => "crc-fast (carry-less multiply)",
            Implementation::Crc32cInstruction => "crc32c crate (SSE4.2 crc32 instruction)",
        }
    }

    /// The CRC-32C of the concatenation of `parts`.
    pub fn checksum(self, parts: &[&[u8]]) -> u32 {
        match self {
            Implementation::CrcFast => match parts {
                [one] => crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, one) as u32,
                _ => {
                    let mut d = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
                    for p in parts {
                        d.update(p);
                    }
                    d.finalize() as u32
                }
            },
            Implementation::Crc32cInstruction => {
                parts.iter().fold(0, |crc, p| crc32c::crc32c_append(crc, p))
            }
        }
    }
}

/// Bytes checksummed per timed call: about a frame or two, well inside L1 and L2.
const PROBE_BYTES: usize = 16 << 10;
/// Calls per timing and timings per implementation (the fastest timing counts).
const CALLS: u32 = 32;
const TIMINGS: u32 = 5;

/// The implementation fastest on data in cache on this CPU (measured at first use).
pub fn in_cache() -> Implementation {
    static CHOICE: OnceLock<Implementation> = OnceLock::new();
    *CHOICE.get_or_init(measure)
}

/// CRC-32C of the concatenation of `parts`, which are in cache, by `in_cache()`.
pub fn crc32c_in_cache(parts: &[&[u8]]) -> u32 {
    in_cache().checksum(parts)
}

fn measure() -> Implementation {
    let data: Vec<u8> = (0..PROBE_BYTES as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect();
    let fastest = |imp: Implementation| {
        (0..TIMINGS)
            .map(|_| {
                let t = Instant::now();
                for _ in 0..CALLS {
                    black_box(imp.checksum(&[black_box(&data[..])]));
                }
                t.elapsed()
            })
            .min()
            .unwrap_or(Duration::MAX)
    };
    let (a, b) = (
        fastest(Implementation::CrcFast),
        fastest(Implementation::Crc32cInstruction),
    );
    if b < a {
        Implementation::Crc32cInstruction
    } else {
        Implementation::CrcFast
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_implementation_computes_crc32c_whatever_the_split() {
        let data: Vec<u8> = (0..70_001u32).map(|i| (i * 7 + (i >> 9)) as u8).collect();
        for imp in Implementation::ALL {
            assert_eq!(
                imp.checksum(&[b"123456789"]),
                0xE306_9283,
                "{imp:?}: check value"
            );
            let whole = imp.checksum(&[&data]);
            for cut in [0, 1, 63, 4096, 70_000] {
                let (a, b) = data.split_at(cut);
                assert_eq!(imp.checksum(&[a, b]), whole, "{imp:?} cut at {cut}");
            }
            assert_eq!(whole, Implementation::CrcFast.checksum(&[&data]));
        }
        // Whichever was chosen here, it is one of them and agrees.
        assert_eq!(
            crc32c_in_cache(&[&data]),
            Implementation::CrcFast.checksum(&[&data])
        );
    }
}
