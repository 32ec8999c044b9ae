//! A non-temporal copy that computes the CRC-32C of the bytes it streams, from the registers that
//! carry them: each source byte is read from memory once.
//!
//! Why: a writer to mapped memory reads a chunk from the latency buffer, which is in DRAM (the
//! links streamed it past the caches), streams it out, and must checksum it. Copy-then-CRC
//! re-reads the chunk from the cache (0.18 core-s/GiB on this project's Intel machines, against
//! 0.12 for the copy alone); folding each 64-byte load into a carry-less-multiply CRC while the
//! copy waits on DRAM costs next to nothing on top of the copy, and prefetching the source a
//! kilobyte ahead hides part of that wait (0.094 core-s/GiB for copy and CRC together).
//!
//! The CRC by folding: a 128-bit lane S stands for a polynomial congruent (mod the CRC-32C
//! polynomial P) to everything folded into it, placed where the lane's last bits are. Appending
//! the 128 bits D lying `d` bits further on: S·x^d + D, where S·x^d = H·x^(d+64) + L·x^d for
//! S's high- and low-degree halves H and L, each product with x^n reduced mod P first (a 32-bit
//! constant), so it stays within 128 bits. Sixteen lanes (four 512-bit registers, or eight
//! 256-bit ones) fold 2048 bits at a time; at the end, the sixteen lanes laid side by side are a 256-byte message congruent
//! to the whole, and its CRC (the `crc32` instruction, from the stack) is the whole's.
//!
//! Byte order: CRC-32C is bit-reflected, so bit i of a little-endian 128-bit lane is the
//! coefficient of x^(127-i), and a carry-less product of two such 64-bit halves comes out one
//! degree short: the constants are x^(n-1) mod P rather than x^n mod P.

use snbuf_platform::cpu::FlushInstr;

/// The CRC-32C polynomial without its x^32 term (Castagnoli; not reflected).
const POLY: u64 = 0x1_1EDC_6F41;

/// x^n mod P, as a polynomial of degree < 32 (bit m is the coefficient of x^m).
const fn x_pow_mod_p(n: u32) -> u64 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= POLY;
        }
        i += 1;
    }
    debug_assert!(r >> 32 == 0, "x^n mod P has a degree under 32");
    r
}

/// The 64-bit half of a folding constant: x^(n-1) mod P, bit-reflected into 64 bits (bit m of
/// the polynomial at bit 63 - m), as the reflected lanes it multiplies.
const fn fold_constant(n: u32) -> u64 {
    assert!(n > 0, "a folding constant is x^(n-1) mod P, for n > 0");
    x_pow_mod_p(n - 1).reverse_bits()
}

/// Bits between a lane and the same lane in the next 256 bytes.
const FOLD_BITS: u32 = 256 * 8;
/// [for the lane's first (higher-degree) 64 bits, for its last 64 bits].
const FOLD_256_BYTES: [u64; 2] = [fold_constant(FOLD_BITS + 64), fold_constant(FOLD_BITS)];

/// How far ahead of the loads the source is prefetched: far enough to cover DRAM latency at
/// this loop's pace, near enough to stay inside the chunk's pages (measured: 1 KiB beat 512 B,
/// 2 KiB and 4 KiB on the Intel machines).
const PREFETCH_AHEAD_BYTES: usize = 1024;

/// A streaming copy that returns the CRC-32C of what it copied, `crc` continuing an earlier one
/// (`crc32c_append`'s convention: 0 to start).
///
/// # Safety
/// As `instructions::CopyNtFn`: `dst` valid for `len` writes, `src` for `len` reads, no overlap,
/// and the CPU has the routine's instructions (see `copy_nt_crc_fn`).
pub type CopyNtCrcFn =
    unsafe fn(dst: *mut u8, src: *const u8, len: usize, edge: FlushInstr, crc: u32) -> u32;

/// The fused routine the recorder uses (the first of `routines_here`), else None: the caller
/// copies and then checksums.
pub fn copy_nt_crc_fn() -> Option<CopyNtCrcFn> {
    routines_here().first().map(|&(_, f)| f)
}

/// Every fused routine this CPU can run, the one the recorder uses first, with its name. The
/// 256-bit one comes first even where AVX-512 is present: `snbuf bench checksum` measured it
/// 7-8% faster from DRAM on the Intel Xeon machines (0.097-0.099 against 0.105-0.106
/// core-s/GiB), and it is the one AMD EPYC without AVX-512 can run. Both stay for the bench.
pub fn routines_here() -> Vec<(&'static str, CopyNtCrcFn)> {
    #[allow(unused_mut)]
    let mut v: Vec<(&'static str, CopyNtCrcFn)> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        if has!("vpclmulqdq") && has!("sse4.2") {
            if has!("avx2") {
                v.push(("AVX2 VPCLMULQDQ", copy_nt_crc_avx2));
            }
            if has!("avx512f") {
                v.push(("AVX-512 VPCLMULQDQ", copy_nt_crc_avx512));
            }
        }
    }
    v
}

/// Head (to a cache-line boundary of `dst`) with regular stores and its CRC, whole 256-byte
/// blocks by `fold_stream`, the rest by the plain streaming copy `copy_rest` and its CRC from L1.
///
/// # Safety
/// As `CopyNtCrcFn`, for `fold_stream` and `copy_rest` too.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn copy_nt_crc_with(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    edge: FlushInstr,
    crc: u32,
    fold_stream: impl Fn(*mut u8, *const u8, usize, u32) -> u32,
    copy_rest: snbuf_platform::instructions::CopyNtFn,
) -> u32 {
    use snbuf_platform::instructions::{copy_flushed, CACHE_LINE_BYTES};
    debug_assert!(
        (dst as usize).abs_diff(src as usize) >= len,
        "the source and the destination do not overlap"
    );
    // SAFETY: the caller's ranges (valid, disjoint) and CPU; every pointer below stays inside
    // them, and each routine called is given a sub-range.
    unsafe {
        // Streamed stores need a line-aligned destination: the head goes with regular stores.
        let head = dst.align_offset(CACHE_LINE_BYTES).min(len);
        debug_assert!(head < CACHE_LINE_BYTES, "the head is part of one line");
        copy_flushed(edge, dst, src, head);
        let mut crc = crc32c::crc32c_append(crc, std::slice::from_raw_parts(src, head));
        let body = (len - head) & !255;
        debug_assert!(
            body.is_multiple_of(256) && head + body <= len,
            "the fold takes whole 256-byte blocks of what follows the head"
        );
        if body > 0 {
            crc = fold_stream(dst.add(head), src.add(head), body, crc);
        }
        // Under 256 bytes and the partial line: the plain routine, then the CRC from L1.
        let done = head + body;
        debug_assert!(len - done < 256, "what the fold leaves is under one block");
        copy_rest(dst.add(done), src.add(done), len - done, edge);
        crc32c::crc32c_append(crc, std::slice::from_raw_parts(src.add(done), len - done))
    }
}

/// The entry point of one instruction set: `copy_nt_crc_with` compiled with its target features,
/// so that the fold and the copy it is given inline into it. One definition serves each set.
macro_rules! copy_nt_crc_entry {
    ($name:ident, $features:literal, $fold:ident, $path:expr) => {
        /// # Safety
        /// `src` is valid for reads and `dst` for writes of `len` bytes, the two do not overlap,
        /// and the CPU has the instructions this routine is compiled for and `edge`.
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name(
            dst: *mut u8,
            src: *const u8,
            len: usize,
            edge: FlushInstr,
            crc: u32,
        ) -> u32 {
            use snbuf_platform::instructions::copy_nt_fn;
            // SAFETY: the caller's contract is the routine's; the closure gets sub-ranges of it.
            unsafe {
                copy_nt_crc_with(
                    dst,
                    src,
                    len,
                    edge,
                    crc,
                    |d, s, n, c| $fold(d, s, n, c),
                    copy_nt_fn($path),
                )
            }
        }
    };
}

copy_nt_crc_entry!(
    copy_nt_crc_avx512,
    "avx512f,vpclmulqdq,sse4.2",
    fold_stream_avx512,
    snbuf_platform::cpu::SimdPath::Avx512
);
copy_nt_crc_entry!(
    copy_nt_crc_avx2,
    "avx2,vpclmulqdq,sse4.2",
    fold_stream_avx2,
    snbuf_platform::cpu::SimdPath::Avx2
);

/// Streams `len` bytes (a positive multiple of 256) to the line-aligned `dst`, folding them into
/// the CRC as they pass: sixteen 128-bit lanes in four 512-bit registers.
///
/// # Safety
/// `dst` line-aligned and valid for `len` writes, `src` for `len` reads, no overlap; the CPU has
/// AVX-512F, VPCLMULQDQ and SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,vpclmulqdq,sse4.2")]
unsafe fn fold_stream_avx512(dst: *mut u8, src: *const u8, len: usize, crc: u32) -> u32 {
    use std::arch::x86_64::*;
    debug_assert!(len >= 256 && len.is_multiple_of(256));
    debug_assert!((dst as usize).is_multiple_of(64));
    let [hi, lo] = FOLD_256_BYTES.map(|k| k as i64);
    let k = _mm512_set_epi64(lo, hi, lo, hi, lo, hi, lo, hi);
    // S·x^2048 + D: the high-degree half (low qword) times its constant, the low-degree half
    // (high qword) times its own, and the new data, in one three-way XOR.
    let fold = |s: __m512i, d: __m512i| {
        _mm512_ternarylogic_epi64::<0x96>(
            _mm512_clmulepi64_epi128::<0x00>(s, k),
            _mm512_clmulepi64_epi128::<0x11>(s, k),
            d,
        )
    };
    // SAFETY: i + 256 <= len keeps every load and store inside the caller's ranges, and `dst`
    // is line-aligned as streaming stores need; a prefetch beyond the source never faults (it
    // is a hint), and its address is formed with wrapping_add.
    unsafe {
        let load = |i: usize| _mm512_loadu_si512(src.add(i) as *const __m512i);
        let store = |i: usize, v: __m512i| _mm512_stream_si512(dst.add(i) as *mut __m512i, v);
        let (mut a, mut b, mut c, mut d) = (load(0), load(64), load(128), load(192));
        store(0, a);
        store(64, b);
        store(128, c);
        store(192, d);
        // The running CRC's register enters as the message's first 32 bits, flipped.
        a = _mm512_xor_si512(a, _mm512_zextsi128_si512(_mm_cvtsi32_si128(!crc as i32)));
        let mut i = 256;
        while i < len {
            for line in 0..4 {
                let ahead = src.wrapping_add(i + PREFETCH_AHEAD_BYTES + 64 * line);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
            }
            let (na, nb, nc, nd) = (load(i), load(i + 64), load(i + 128), load(i + 192));
            store(i, na);
            store(i + 64, nb);
            store(i + 128, nc);
            store(i + 192, nd);
            a = fold(a, na);
            b = fold(b, nb);
            c = fold(c, nc);
            d = fold(d, nd);
            i += 256;
        }
        // The sixteen lanes side by side: a 256-byte message congruent to all that was folded.
        let mut lanes = [0u8; 256];
        let out = lanes.as_mut_ptr();
        _mm512_storeu_si512(out as *mut __m512i, a);
        _mm512_storeu_si512(out.add(64) as *mut __m512i, b);
        _mm512_storeu_si512(out.add(128) as *mut __m512i, c);
        _mm512_storeu_si512(out.add(192) as *mut __m512i, d);
        crc_of_lanes(&lanes)
    }
}

/// As `fold_stream_avx512`, with the sixteen lanes in eight 256-bit registers (CPUs with
/// VPCLMULQDQ but without AVX-512, as some AMD EPYC).
///
/// # Safety
/// As `fold_stream_avx512`, with AVX2 instead of AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,vpclmulqdq,sse4.2")]
unsafe fn fold_stream_avx2(dst: *mut u8, src: *const u8, len: usize, crc: u32) -> u32 {
    use std::arch::x86_64::*;
    debug_assert!(len >= 256 && len.is_multiple_of(256));
    debug_assert!((dst as usize).is_multiple_of(64));
    let [hi, lo] = FOLD_256_BYTES.map(|k| k as i64);
    let k = _mm256_set_epi64x(lo, hi, lo, hi);
    let fold = |s: __m256i, d: __m256i| {
        _mm256_xor_si256(
            _mm256_xor_si256(
                _mm256_clmulepi64_epi128::<0x00>(s, k),
                _mm256_clmulepi64_epi128::<0x11>(s, k),
            ),
            d,
        )
    };
    // SAFETY: as in `fold_stream_avx512`: i + 256 <= len, a line-aligned `dst` (so every
    // 32-byte store is aligned), prefetch addresses formed with wrapping_add.
    unsafe {
        let load = |i: usize| _mm256_loadu_si256(src.add(i) as *const __m256i);
        let store = |i: usize, v: __m256i| _mm256_stream_si256(dst.add(i) as *mut __m256i, v);
        let mut acc = [_mm256_setzero_si256(); 8];
        for (j, a) in acc.iter_mut().enumerate() {
            *a = load(32 * j);
            store(32 * j, *a);
        }
        acc[0] = _mm256_xor_si256(
            acc[0],
            _mm256_zextsi128_si256(_mm_cvtsi32_si128(!crc as i32)),
        );
        let mut i = 256;
        while i < len {
            for line in 0..4 {
                let ahead = src.wrapping_add(i + PREFETCH_AHEAD_BYTES + 64 * line);
                _mm_prefetch::<_MM_HINT_T0>(ahead as *const i8);
            }
            for (j, a) in acc.iter_mut().enumerate() {
                let v = load(i + 32 * j);
                store(i + 32 * j, v);
                *a = fold(*a, v);
            }
            i += 256;
        }
        let mut lanes = [0u8; 256];
        for (j, a) in acc.iter().enumerate() {
            _mm256_storeu_si256(lanes.as_mut_ptr().add(32 * j) as *mut __m256i, *a);
        }
        crc_of_lanes(&lanes)
    }
}

/// The CRC-32C of what sixteen folded lanes stand for, given side by side: they were folded
/// from a zero register (the flipped start went in with the first bits), and `crc32c_append`
/// starts from the complement of its argument and complements its result, as CRC-32C does.
fn crc_of_lanes(lanes: &[u8; 256]) -> u32 {
    crc32c::crc32c_append(!0, lanes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_are_powers_of_x_mod_p() {
        // x^32 mod P is P without its top term.
        assert_eq!(x_pow_mod_p(32), POLY & 0xFFFF_FFFF);
        assert_eq!(x_pow_mod_p(31), 1 << 31);
        // x^(a+b) = x^a · x^b mod P, by a bitwise product.
        let mul = |a: u64, b: u64| {
            let mut r = 0u64;
            for i in 0..32 {
                if b >> i & 1 == 1 {
                    r ^= a << i;
                }
            }
            for bit in (32..64).rev() {
                if r >> bit & 1 == 1 {
                    r ^= POLY << (bit - 32);
                }
            }
            r
        };
        assert_eq!(mul(x_pow_mod_p(1000), x_pow_mod_p(1111)), x_pow_mod_p(2111));
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_fused_copy_copies_and_checksums_whatever_the_length_and_alignment() {
        let routines = routines_here();
        if routines.is_empty() {
            eprintln!("this CPU lacks VPCLMULQDQ: the fused copy is not used here");
        }
        let edge = snbuf_platform::cpu::CpuFeatures::detect()
            .best_flush()
            .expect("x86-64 has CLFLUSH");
        let src: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let mut dst = vec![0u8; src.len() + 64];
        let lengths = [
            0, 1, 3, 4, 63, 64, 255, 256, 257, 319, 320, 511, 512, 4096, 5568, 65_537,
        ];
        for (name, copy_crc) in routines {
            for len in lengths {
                for src_at in [0, 1, 17, 64] {
                    for dst_at in [0, 5, 32, 64] {
                        for start in [0u32, 0xE306_9283] {
                            dst.fill(0xAA);
                            let s = &src[src_at..src_at + len];
                            // SAFETY: both ranges lie inside their vectors, which do not
                            // overlap; the CPU has the routine's features (routines_here) and
                            // `edge`.
                            let got = unsafe {
                                copy_crc(dst.as_mut_ptr().add(dst_at), s.as_ptr(), len, edge, start)
                            };
                            snbuf_platform::instructions::sfence();
                            let want = crc32c::crc32c_append(start, s);
                            let at = format!(
                                "{name}: len {len}, src +{src_at}, dst +{dst_at}, from {start:#x}"
                            );
                            assert_eq!(got, want, "CRC, {at}");
                            assert_eq!(&dst[dst_at..dst_at + len], s, "bytes, {at}");
                            assert!(dst[..dst_at].iter().all(|&b| b == 0xAA), "before, {at}");
                            assert!(
                                dst[dst_at + len..].iter().all(|&b| b == 0xAA),
                                "after, {at}"
                            );
                        }
                    }
                }
            }
        }
    }
}
