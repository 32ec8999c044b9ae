//! A frame's ADC values where they are one run of 14-bit words, least significant bit first, in
//! the order the codec takes them (a time sample's channels, then the next: WIBEth's and
//! TDEEth's rows, DAPHNE's stream): unpacked and packed 32 at a time (56 bytes) with AVX-512,
//! or by `snbuf_frames::adc`'s portable code.

use snbuf_frames::adc::{pack_all, unpack_all};

use crate::kernel::InstructionSet;

/// Values a vector step takes: 56 bytes of words.
const STEP: usize = 32;
const BITS: u32 = 14;

/// The values of `bytes` (exactly 14 bits each of `values`).
#[inline(always)]
pub fn unpack(kernel: InstructionSet, bytes: &[u8], values: &mut [u16]) {
    assert_eq!(
        bytes.len() * 8,
        values.len() * BITS as usize,
        "14 bits a value"
    );
    match kernel {
        // SAFETY: the kernel is only chosen where the CPU has what it is compiled for.
        #[cfg(target_arch = "x86_64")]
        InstructionSet::Avx512 if values.len().is_multiple_of(STEP) => unsafe {
            unpack_avx512(bytes, values)
        },
        _ => unpack_all(bytes, BITS, values),
    }
}

/// `values` (each below 2^14) into `bytes` (exactly 14 bits each).
#[inline(always)]
pub fn pack(kernel: InstructionSet, bytes: &mut [u8], values: &[u16]) {
    assert_eq!(
        bytes.len() * 8,
        values.len() * BITS as usize,
        "14 bits a value"
    );
    debug_assert!(values.iter().all(|&v| v >> BITS == 0));
    match kernel {
        // SAFETY: as above.
        #[cfg(target_arch = "x86_64")]
        InstructionSet::Avx512 if values.len().is_multiple_of(STEP) => unsafe {
            pack_avx512(bytes, values)
        },
        _ => pack_all(bytes, BITS, values),
    }
}

/// Byte i of the permute that gives value v (v < 16, of the 28 bytes from `first`) a 32-bit
/// lane of its own: its word's four bytes from the one its first bit is in.
const fn unpack_index(first: usize) -> [u8; 64] {
    let mut index = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        let (v, b) = (i / 4, i % 4);
        index[i] = (first + v * 14 / 8 + b) as u8;
        i += 1;
    }
    index
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn unpack_avx512(bytes: &[u8], values: &mut [u16]) {
    use std::arch::x86_64::*;
    const LOW: [u8; 64] = unpack_index(0);
    const HIGH: [u8; 64] = unpack_index(28);
    let shifts: [u32; 16] = std::array::from_fn(|v| (v * 14 % 8) as u32);
    // SAFETY: 64 bytes each.
    let (low, high, shift) = unsafe {
        (
            _mm512_loadu_si512(LOW.as_ptr() as *const _),
            _mm512_loadu_si512(HIGH.as_ptr() as *const _),
            _mm512_loadu_si512(shifts.as_ptr() as *const _),
        )
    };
    let mask = _mm512_set1_epi32((1 << BITS) - 1);
    for (words, out) in bytes.chunks_exact(56).zip(values.chunks_exact_mut(STEP)) {
        // SAFETY: the 56 bytes are there; the load reads no others (masked).
        let words =
            unsafe { _mm512_maskz_loadu_epi8((1u64 << 56) - 1, words.as_ptr() as *const _) };
        let half = |index| {
            let lanes = _mm512_permutexvar_epi8(index, words);
            _mm512_cvtepi32_epi16(_mm512_and_si512(_mm512_srlv_epi32(lanes, shift), mask))
        };
        let (first, second) = (half(low), half(high));
        // SAFETY: 32 values' room.
        unsafe {
            _mm256_storeu_si256(out.as_mut_ptr() as *mut _, first);
            _mm256_storeu_si256(out.as_mut_ptr().add(16) as *mut _, second);
        }
    }
}

/// The permute that keeps the seven low bytes of each 64-bit lane, in order.
const fn pack_index() -> [u8; 64] {
    let mut index = [0u8; 64];
    let mut i = 0;
    while i < 56 {
        index[i] = ((i / 7) * 8 + i % 7) as u8;
        i += 1;
    }
    index
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
unsafe fn pack_avx512(bytes: &mut [u8], values: &[u16]) {
    use std::arch::x86_64::*;
    const KEEP: [u8; 64] = pack_index();
    // SAFETY: 64 bytes.
    let keep = unsafe { _mm512_loadu_si512(KEEP.as_ptr() as *const _) };
    // Pairs of values into 28 bits: v0 + v1 * 2^14 (each below 2^14, so no sign nor carry).
    let pair = _mm512_set1_epi32(1 << (BITS + 16) | 1);
    let low_28 = _mm512_set1_epi64((1 << 28) - 1);
    for (out, vals) in bytes.chunks_exact_mut(56).zip(values.chunks_exact(STEP)) {
        // SAFETY: 32 values.
        let v = unsafe { _mm512_loadu_si512(vals.as_ptr() as *const _) };
        let pairs = _mm512_madd_epi16(v, pair);
        // Two pairs a 64-bit lane: the second 28 bits up, not 32.
        let fours = _mm512_or_si512(
            _mm512_and_si512(pairs, low_28),
            _mm512_andnot_si512(low_28, _mm512_srli_epi64(pairs, 4)),
        );
        let packed = _mm512_permutexvar_epi8(keep, fours);
        // SAFETY: the 56 bytes are there; the store writes no others (masked).
        unsafe { _mm512_mask_storeu_epi8(out.as_mut_ptr() as *mut _, (1u64 << 56) - 1, packed) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_packs_and_unpacks_as_the_frames_own_code() {
        for n in [32usize, 4096, 4, 36] {
            let values: Vec<u16> = (0..n as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 18) as u16)
                .collect();
            let mut want = vec![0u8; n * 14 / 8];
            pack_all(&mut want, BITS, &values);
            for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
                let mut bytes = vec![0xffu8; n * 14 / 8];
                pack(kernel, &mut bytes, &values);
                assert_eq!(bytes, want, "{kernel:?}, {n}");
                let mut back = vec![0u16; n];
                unpack(kernel, &bytes, &mut back);
                assert_eq!(back, values, "{kernel:?}, {n}");
            }
        }
    }
}
