//! The low bits of a frame's Rice codes, row by row (a time sample's channels in turn), channel
//! c's `k[c]` bits each, least significant bit first, with nothing between rows: every row
//! takes the same bits, so a reader knows where each channel's are in any row.

use crate::bits::BitWriter;
use crate::kernel::InstructionSet;

/// Zero bytes a reader's low bits carry after them: a vector reads two 64-byte words from a
/// row's first byte.
pub const PADDING: usize = 128;

/// The bytes the low bits of `rows` rows take.
pub fn bytes(ks: &[u32], rows: usize) -> usize {
    (ks.iter().sum::<u32>() as usize * rows).div_ceil(8)
}

/// Writes the low `ks[c]` bits of each code, `codes[row * channels + c]`: four channels' at a
/// time where the channels come in fours (at most 4 x 14 bits), their shifts the same in every
/// row.
#[inline(always)]
pub fn write(w: &mut BitWriter, codes: &[u32], ks: &[u32]) {
    let mask = |k: u32| (1u32 << k) - 1;
    if !ks.len().is_multiple_of(4) {
        for row in codes.chunks_exact(ks.len()) {
            for (&m, &k) in row.iter().zip(ks) {
                w.put((m & mask(k)) as u64, k);
            }
        }
        return;
    }
    // Per four channels: each one's mask and shift, and their bits together.
    let fours: Vec<([u32; 4], [u32; 4], u32)> = ks
        .chunks_exact(4)
        .map(|k| {
            let shifts = [0, k[0], k[0] + k[1], k[0] + k[1] + k[2]];
            (
                k.try_into().map(|k: [u32; 4]| k.map(mask)).expect("four"),
                shifts,
                shifts[3] + k[3],
            )
        })
        .collect();
    for row in codes.chunks_exact(ks.len()) {
        for (m, (masks, shifts, bits)) in row.chunks_exact(4).zip(&fours) {
            let mut word = 0u64;
            for j in 0..4 {
                word |= ((m[j] & masks[j]) as u64) << shifts[j];
            }
            w.put(word, *bits);
        }
    }
}

/// Joins each quotient `q[i]` to its low bits read from `padded` (the bits `write` wrote, then
/// `PADDING` zero bytes): `codes[i] = q[i] << k | low`, row by row as written.
#[inline]
pub fn read(kernel: InstructionSet, padded: &[u8], ks: &[u32], q: &[u8], codes: &mut [u32]) {
    let channels = ks.len();
    assert!(
        codes.len().is_multiple_of(channels)
            && q.len() >= codes.len()
            && padded.len() >= bytes(ks, codes.len() / channels) + PADDING,
        "whole rows, their quotients and their padded bits"
    );
    match kernel {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the kernel is only chosen where the CPU has what it is compiled for; the
        // shape is the one it reads (a row of at most 64 channels is at most 112 bytes).
        InstructionSet::Avx512 if channels.is_multiple_of(16) && channels <= 64 => unsafe {
            read_avx512(padded, ks, q, codes)
        },
        _ => read_portable(padded, ks, q, codes),
    }
}

fn read_portable(padded: &[u8], ks: &[u32], q: &[u8], codes: &mut [u32]) {
    let mut at_bits = 0usize;
    for (row, q_row) in codes
        .chunks_exact_mut(ks.len())
        .zip(q.chunks_exact(ks.len()))
    {
        for ((code, &k), &q) in row.iter_mut().zip(ks).zip(q_row) {
            let byte = at_bits / 8;
            let word = u32::from_le_bytes(padded[byte..byte + 4].try_into().expect("4 bytes"));
            *code = (q as u32) << k | (word >> (at_bits % 8)) & ((1 << k) - 1);
            at_bits += k as usize;
        }
    }
}

/// Sixteen channels at a time: each one's four bytes gathered from the row's (VBMI's two-word
/// byte permute), shifted to its first bit and masked to its width.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn read_avx512(padded: &[u8], ks: &[u32], q: &[u8], codes: &mut [u32]) {
    use std::arch::x86_64::*;
    let channels = ks.len();
    let groups = channels / 16;
    let mut offsets = [0u32; 64];
    let mut row_bits = 0;
    for (o, &k) in offsets.iter_mut().zip(ks) {
        *o = row_bits;
        row_bits += k;
    }
    let load = |v: &[u32]| {
        assert!(v.len() >= 16);
        // SAFETY: the slice holds the 16 u32 loaded.
        unsafe { _mm512_loadu_si512(v.as_ptr() as *const _) }
    };
    let offset: [__m512i; 4] = std::array::from_fn(|g| load(&offsets[16 * g..16 * g + 16]));
    let width: [__m512i; 4] = std::array::from_fn(|g| {
        if g < groups {
            load(&ks[16 * g..16 * g + 16])
        } else {
            _mm512_setzero_si512()
        }
    });
    let mask: [__m512i; 4] = std::array::from_fn(|g| {
        _mm512_sub_epi32(
            _mm512_sllv_epi32(_mm512_set1_epi32(1), width[g]),
            _mm512_set1_epi32(1),
        )
    });
    let spread = _mm512_set1_epi32(0x0101_0101);
    let bytes_up = _mm512_set1_epi32(0x0302_0100);
    let seven = _mm512_set1_epi32(7);
    for (s, (row, q_row)) in codes
        .chunks_exact_mut(channels)
        .zip(q.chunks_exact(channels))
        .enumerate()
    {
        let first = s * row_bits as usize;
        let (byte, bit) = (first / 8, (first % 8) as i32);
        let words = &padded[byte..byte + 128];
        // SAFETY: the 128 bytes are there (asserted by the caller).
        let (low_word, high_word) = unsafe {
            (
                _mm512_loadu_si512(words.as_ptr() as *const _),
                _mm512_loadu_si512(words.as_ptr().add(64) as *const _),
            )
        };
        for g in 0..groups {
            let at = _mm512_add_epi32(offset[g], _mm512_set1_epi32(bit));
            let from = _mm512_add_epi32(
                _mm512_mullo_epi32(_mm512_srli_epi32(at, 3), spread),
                bytes_up,
            );
            let window = _mm512_permutex2var_epi8(low_word, from, high_word);
            let low = _mm512_and_si512(
                _mm512_srlv_epi32(window, _mm512_and_si512(at, seven)),
                mask[g],
            );
            let q16 = &q_row[16 * g..16 * g + 16];
            // SAFETY: the 16 quotients are there.
            let quotient =
                _mm512_cvtepu8_epi32(unsafe { _mm_loadu_si128(q16.as_ptr() as *const _) });
            let code = _mm512_or_si512(_mm512_sllv_epi32(quotient, width[g]), low);
            let out = &mut row[16 * g..16 * g + 16];
            // SAFETY: the 16 codes' room is there.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr() as *mut _, code) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_reads_what_was_written_whatever_the_widths() {
        for channels in [4usize, 16, 64, 256] {
            let ks: Vec<u32> = (0..channels as u32).map(|c| (c * 7 + 3) % 15).collect();
            let rows = 12;
            let codes: Vec<u32> = (0..channels * rows)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761) >> 10)
                .collect();
            let bits: usize = ks.iter().sum::<u32>() as usize * rows;
            let mut out = vec![0u8; BitWriter::room_for(bits)];
            let mut w = BitWriter::new(&mut out);
            write(&mut w, &codes, &ks);
            let len = w.finish();
            assert_eq!(len, bytes(&ks, rows));
            out.truncate(len);
            out.resize(len + PADDING, 0);
            let q: Vec<u8> = (0..codes.len()).map(|i| (i % 17) as u8).collect();
            let want: Vec<u32> = codes
                .iter()
                .enumerate()
                .map(|(i, &m)| {
                    (q[i] as u32) << ks[i % channels] | m & ((1 << ks[i % channels]) - 1)
                })
                .collect();
            for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
                let mut back = vec![0u32; codes.len()];
                read(kernel, &out, &ks, &q, &mut back);
                assert_eq!(back, want, "{kernel:?}, {channels} channels");
            }
        }
    }
}
