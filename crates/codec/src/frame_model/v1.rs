//! Format 1's modeled frames, read so that chunks coded before format 2 still decode (nothing
//! writes them now): after the headers, the byte lengths of the first three of four bit streams
//! (u32 each, little-endian), then the streams, channel c's codes in stream c % 4, row by row,
//! each code its quotient's ones, a zero and its low bits together (`rice::read`).

use super::FrameModel;
use crate::bits::{BitReader, PADDING};
use crate::rice::{Corrupt, ESCAPED};

/// Bit streams a format-1 frame's samples are spread over.
const STREAMS: usize = 4;
/// The ones that say a code is escaped (a quotient would be at most one fewer).
const ESCAPE_ONES: u32 = 16;
/// Bits of an escaped sample: the value itself.
const ESCAPED_BITS: u32 = 16;

/// Reads one code with parameter `k`: its mapped residual, or `ESCAPED` over the sample's value.
#[inline]
fn read(r: &mut BitReader, k: u32) -> u32 {
    let window = r.peek();
    let q = (!window).trailing_zeros();
    if q < ESCAPE_ONES {
        r.skip(q + 1 + k);
        (q << k) | ((window >> (q + 1)) as u32 & ((1 << k) - 1))
    } else {
        r.skip(ESCAPE_ONES);
        ESCAPED | r.get(ESCAPED_BITS)
    }
}

impl FrameModel {
    /// The fewest bytes a format-1 frame takes: its headers, the streams' lengths, and a bit a
    /// sample.
    pub(super) fn least_coded_bytes_v1(&self) -> usize {
        self.least_coded_bytes() + 4 * (STREAMS - 1)
    }

    /// Decodes one format-1 frame from `coded` (exactly its bytes) into `frame`.
    pub(super) fn decode_v1(&mut self, coded: &[u8], frame: &mut [u8]) -> Result<(), Corrupt> {
        let mut at = self.read_headers(coded, frame)?;
        let mut lengths = [0usize; STREAMS];
        for len in &mut lengths[..STREAMS - 1] {
            let b = coded.get(at..at + 4).ok_or(Corrupt)?;
            *len = u32::from_le_bytes(b.try_into().expect("four bytes")) as usize;
            at += 4;
        }
        let rest = lengths[..STREAMS - 1]
            .iter()
            .try_fold(0usize, |sum, &len| sum.checked_add(len))
            .ok_or(Corrupt)?;
        lengths[STREAMS - 1] = (coded.len() - at).checked_sub(rest).ok_or(Corrupt)?;
        let mut streams: [Vec<u8>; STREAMS] = Default::default();
        for (s, &len) in streams.iter_mut().zip(&lengths) {
            s.extend_from_slice(&coded[at..at + len]);
            s.extend_from_slice(&[0; PADDING]);
            at += len;
        }
        let channels = self.shape.channels;
        let mut r = streams.each_ref().map(|s| BitReader::new(s));
        let ks = self.channels.ks();
        for codes in self.codes.chunks_exact_mut(channels) {
            for (c, code) in codes.iter_mut().enumerate() {
                *code = read(&mut r[c % STREAMS], ks[c]);
            }
        }
        for r in &r {
            r.finished()?;
        }
        self.restore_frame(frame)
    }
}
