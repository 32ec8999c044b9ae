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
/// row; the four joined sixteen channels at once where the CPU has AVX-512 and the channels
/// come in sixteens. The bits are the same whichever.
#[inline(always)]
pub fn write(kernel: InstructionSet, w: &mut BitWriter, codes: &[u32], ks: &[u32]) {
    assert!(
        codes.len().is_multiple_of(ks.len()),
        "whole rows of the channels' codes"
    );
    match kernel {
        // SAFETY: the kernel is only chosen where the CPU has what it is compiled for.
        #[cfg(target_arch = "x86_64")]
        InstructionSet::Avx512 if ks.len().is_multiple_of(16) => unsafe {
            write_avx512(w, codes, ks)
        },
        _ => write_portable(w, codes, ks),
    }
}

#[inline(always)]
fn write_portable(w: &mut BitWriter, codes: &[u32], ks: &[u32]) {
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
            let four: [u32; 4] = k.try_into().expect("four");
            let (shifts, bits) = shifts_of_four(four);
            (four.map(mask), shifts, bits)
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

/// The mask of a code's low `k` bits.
fn mask(k: u32) -> u32 {
    (1u32 << k) - 1
}

/// Where each of four channels' bits go in their word, and the word's bits.
fn shifts_of_four(k: [u32; 4]) -> ([u32; 4], u32) {
    debug_assert!(k.iter().all(|&k| k <= crate::rice::MAX_K));
    ([0, k[0], k[0] + k[1], k[0] + k[1] + k[2]], k.iter().sum())
}

/// How many words a sixteen channels' low bits of a row are put as: their four words (as
/// `write_portable` puts them), or fewer where the bits fit (each word at most 64 bits).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Words {
    One,
    Two,
    Four,
}

/// One sixteen channels' plan for `write_avx512`: their masks (32-bit lanes), the shifts of
/// the first and second eight to their places in their words (64-bit lanes), the words and
/// their bits.
#[cfg(target_arch = "x86_64")]
struct Sixteen {
    mask: std::arch::x86_64::__m512i,
    shift: [std::arch::x86_64::__m512i; 2],
    words: Words,
    bits: [u32; 4],
}

/// The plans of the sixteens of channels of widths `ks`: as few words as their bits fit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn plan_sixteens(ks: &[u32]) -> Vec<Sixteen> {
    use std::arch::x86_64::*;
    let sum = |k: &[u32]| k.iter().sum::<u32>();
    ks.chunks_exact(16)
        .map(|k| {
            let (words, per) = match (sum(k), sum(&k[..8]).max(sum(&k[8..]))) {
                (all, _) if all <= 64 => (Words::One, 16),
                (_, eight) if eight <= 64 => (Words::Two, 8),
                _ => (Words::Four, 4),
            };
            let mut shift = [[0u64; 8]; 2];
            let mut bits = [0u32; 4];
            for (word, channels) in k.chunks_exact(per).enumerate() {
                let mut at = 0;
                for (j, &kc) in channels.iter().enumerate() {
                    let c = word * per + j;
                    shift[c / 8][c % 8] = at as u64;
                    at += kc;
                }
                bits[word] = at;
            }
            let masks: [u32; 16] = std::array::from_fn(|c| mask(k[c]));
            // SAFETY: 16 u32, and 8 u64 each.
            unsafe {
                Sixteen {
                    mask: _mm512_loadu_si512(masks.as_ptr() as *const _),
                    shift: shift.map(|s| _mm512_loadu_si512(s.as_ptr() as *const _)),
                    words,
                    bits,
                }
            }
        })
        .collect()
}

/// Sixteen channels at a time: their low bits masked, each moved to its place in its word
/// (64-bit lanes; a word is four channels, eight or the sixteen, as their widths allow), a
/// word's lanes joined, and the words put in turn: the bits `write_portable` writes, without
/// joining each word's channels one by one, in a quarter of the puts where the noise is small.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,bmi1,bmi2")]
unsafe fn write_avx512(w: &mut BitWriter, codes: &[u32], ks: &[u32]) {
    use std::arch::x86_64::*;
    let plan = plan_sixteens(ks);
    let low = |v: __m512i| _mm_cvtsi128_si64(_mm512_castsi512_si128(v)) as u64;
    // The first lane of each four in the first eight, then in the second.
    let firsts = _mm512_set_epi64(0, 0, 0, 0, 12, 8, 4, 0);
    let mut fours = [0u64; 8];
    for row in codes.chunks_exact(ks.len()) {
        for (sixteen, p) in row.chunks_exact(16).zip(&plan) {
            // SAFETY: 16 codes.
            let v = unsafe { _mm512_loadu_si512(sixteen.as_ptr() as *const _) };
            let v = _mm512_and_si512(v, p.mask);
            let join = |eight: __m256i, shift: __m512i| {
                let lanes = _mm512_sllv_epi64(_mm512_cvtepu32_epi64(eight), shift);
                // Lanes of a four ORed: with their neighbour, then with the other pair.
                let pairs = _mm512_or_si512(lanes, _mm512_shuffle_epi32::<0b01_00_11_10>(lanes));
                _mm512_or_si512(pairs, _mm512_permutex_epi64::<0b01_00_11_10>(pairs))
            };
            let first = join(_mm512_castsi512_si256(v), p.shift[0]);
            let second = join(_mm512_extracti64x4_epi64::<1>(v), p.shift[1]);
            // An eight's two fours ORed (its halves swapped), in its first lane.
            let eight = |fours: __m512i| {
                _mm512_or_si512(fours, _mm512_shuffle_i64x2::<0b01_00_11_10>(fours, fours))
            };
            match p.words {
                Words::One => w.put_long(low(eight(_mm512_or_si512(first, second))), p.bits[0]),
                Words::Two => {
                    w.put_long(low(eight(first)), p.bits[0]);
                    w.put_long(low(eight(second)), p.bits[1]);
                }
                Words::Four => {
                    let four_words = _mm512_permutex2var_epi64(first, firsts, second);
                    // SAFETY: room for eight u64.
                    unsafe { _mm512_storeu_si512(fours.as_mut_ptr() as *mut _, four_words) };
                    for (&word, &bits) in fours.iter().zip(&p.bits) {
                        w.put(word, bits);
                    }
                }
            }
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
        // Widths of up to 14 bits (a sixteen's words of four channels each), of at most 7 (of
        // eight), of at most 3 (all sixteen in a word), and a sixteen of each in one row.
        let widths: [fn(u32) -> u32; 4] = [
            |c| (c * 7 + 3) % 15,
            |c| (c * 5 + 1) % 8,
            |c| (c * 3) % 4,
            |c| match c / 16 % 3 {
                0 => (c * 7 + 3) % 15,
                1 => 7 + c % 2,
                _ => 4,
            },
        ];
        for (channels, width) in [4usize, 16, 64, 256]
            .into_iter()
            .flat_map(|n| widths.map(|w| (n, w)))
        {
            let ks: Vec<u32> = (0..channels as u32).map(width).collect();
            let rows = 12;
            let codes: Vec<u32> = (0..channels * rows)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761) >> 10)
                .collect();
            let bits: usize = ks.iter().sum::<u32>() as usize * rows;
            let mut out = vec![0u8; BitWriter::room_for(bits)];
            let mut w = BitWriter::new(&mut out);
            write(InstructionSet::Portable, &mut w, &codes, &ks);
            let len = w.finish();
            assert_eq!(len, bytes(&ks, rows));
            out.truncate(len);
            // Each kernel writes the same bits.
            let mut by_kernel = vec![0u8; BitWriter::room_for(bits)];
            let mut w = BitWriter::new(&mut by_kernel);
            write(InstructionSet::detect(), &mut w, &codes, &ks);
            assert_eq!(w.finish(), len);
            assert_eq!(by_kernel[..len], out[..], "{channels} channels");
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
