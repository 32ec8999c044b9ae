//! The store, flush and fence instructions that make mapped data persistent.
//!
//! Why non-temporal stores: they bypass the cache hierarchy, so the data goes to the memory
//! controller (the ADR persistence domain on Optane) without a read-for-ownership of the line and
//! without a separate flush; an SFENCE then orders and drains them. Why one fence per persist
//! point rather than per store: a fence stalls until the write-combining buffers drain; measured
//! here, a fence after every 256 B runs at a sixth of the speed of one after every 4 KiB.
//!
//! Partial cache lines at the start and end of a range cannot be streamed whole, so they are
//! written with regular stores and written back with the best flush the CPU has: the persist
//! point's SFENCE covers those flushes too.

use crate::cpu::{FlushInstr, SimdPath};

/// A cache line, the unit every flush instruction acts on.
pub const CACHE_LINE_BYTES: usize = 64;

/// A non-temporal copy routine for one SIMD width, chosen once (like libpmem's function table)
/// so the per-block path has no dispatch left between one fence and the next block's stores.
///
/// # Safety
/// `dst` valid for `len` writes, `src` for `len` reads, no overlap, and the CPU has the
/// routine's SIMD width and CLWB-or-better (the edge flush; see `copy_nt_fn`).
pub type CopyNtFn = unsafe fn(dst: *mut u8, src: *const u8, len: usize, edge: FlushInstr);

/// The routine for `path`.
#[cfg(target_arch = "x86_64")]
pub fn copy_nt_fn(path: SimdPath) -> CopyNtFn {
    match path {
        SimdPath::Avx512 => copy_nt_avx512,
        SimdPath::Avx2 => copy_nt_avx2,
        SimdPath::Sse2 => copy_nt_sse2,
    }
}

/// Copies `len` bytes from `src` to `dst` with non-temporal stores on `path`; partial lines at the
/// ends are stored normally and written back with `edge_flush`. Not durable until `sfence()`.
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes and `src` for `len` bytes of reads, they must
/// not overlap, and the CPU must support `path` and `edge_flush`.
#[cfg(target_arch = "x86_64")]
pub unsafe fn copy_nt(
    path: SimdPath,
    edge_flush: FlushInstr,
    dst: *mut u8,
    src: *const u8,
    len: usize,
) {
    // SAFETY: the caller's contract is the routine's (valid, disjoint ranges; a CPU that has
    // `path` and `edge_flush`).
    unsafe { copy_nt_fn(path)(dst, src, len, edge_flush) }
}

/// Head (to a cache-line boundary) and tail (after the last whole line) with regular stores and
/// flushes, whole lines in between with `stream`.
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes, the two do not overlap, and the
/// CPU has the instructions this routine is compiled for and `edge` flushes.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn copy_nt_with(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    edge: FlushInstr,
    stream: impl Fn(*mut u8, *const u8, usize),
) {
    // SAFETY: the caller's ranges and CPU, passed on; `edges` gets sub-ranges of them only.
    unsafe { copy_streamed_with(dst, src, len, stream, |d, s, n| copy_flushed(edge, d, s, n)) }
}

/// Whole lines in the middle with `stream`, the partial lines at the ends with `edges`.
///
/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes, the two do not overlap, and the
/// CPU has the instructions this routine is compiled for that `stream` and `edges` use; both may be given
/// any sub-range of the two.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn copy_streamed_with(
    dst: *mut u8,
    src: *const u8,
    len: usize,
    stream: impl Fn(*mut u8, *const u8, usize),
    edges: impl Fn(*mut u8, *const u8, usize),
) {
    // Streamed stores are whole aligned vectors: bring the destination to a line boundary.
    let head = (dst.align_offset(CACHE_LINE_BYTES)).min(len);
    if head > 0 {
        edges(dst, src, head);
    }
    // SAFETY: head <= len, so both pointers stay inside the caller's ranges.
    let (dst, src, len) = unsafe { (dst.add(head), src.add(head), len - head) };
    let body = len & !(CACHE_LINE_BYTES - 1);
    stream(dst, src, body);
    let tail = len - body;
    if tail > 0 {
        // SAFETY: body + tail = len: the tail is the end of the caller's ranges.
        let (d, s) = unsafe { (dst.add(body), src.add(body)) };
        edges(d, s, tail);
    }
}

/// A copy into DRAM that bypasses the caches: whole lines with non-temporal stores, the partial
/// lines at the ends with regular stores, nothing flushed (this is not a persistence primitive).
/// For a producer filling a ring much larger than the cache: a regular copy first reads every
/// destination line in (read-for-ownership) and evicts useful lines; streaming writes each byte
/// once.
/// The stores are weakly ordered: `sfence()` before publishing what was copied.
#[derive(Clone, Copy, Debug)]
pub struct StreamingCopy {
    path: Option<SimdPath>,
}

impl StreamingCopy {
    /// The widest streaming stores the CPU has (on other architectures: a plain copy).
    pub fn detect() -> Self {
        StreamingCopy {
            path: crate::cpu::CpuFeatures::detect().simd_path(),
        }
    }

    /// Copies `src` into `dst` (same length).
    #[inline]
    pub fn copy(&self, dst: &mut [u8], src: &[u8]) {
        assert_eq!(dst.len(), src.len(), "streaming copy of unequal lengths");
        let (d, s, n) = (dst.as_mut_ptr(), src.as_ptr(), src.len());
        let plain = |d: *mut u8, s: *const u8, n: usize| {
            // SAFETY: the callers below pass sub-ranges of `dst` and `src`.
            unsafe { std::ptr::copy_nonoverlapping(s, d, n) }
        };
        // SAFETY: `dst` and `src` are valid for `n` bytes and cannot overlap (one is borrowed
        // mutably); `path` was detected on this CPU.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match self.path {
                Some(SimdPath::Avx512) => stream_copy_avx512(d, s, n),
                Some(SimdPath::Avx2) => stream_copy_avx2(d, s, n),
                Some(SimdPath::Sse2) => {
                    copy_streamed_with(d, s, n, |d, s, n| stream_sse2(d, s, n), plain)
                }
                None => plain(d, s, n),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        plain(d, s, n);
    }
}

/// The streaming copy of one instruction set: `copy_streamed_with` compiled with its target
/// feature, so that its stores inline into it. One definition serves each set.
macro_rules! stream_copy_entry {
    ($name:ident, $feature:literal, $stream:ident) => {
        /// # Safety
        /// `src` is valid for reads and `dst` for writes of `len` bytes, the two do not overlap,
        /// and the CPU has the instructions this routine is compiled for
        /// (`CpuFeatures::simd_path`).
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $feature)]
        unsafe fn $name(dst: *mut u8, src: *const u8, len: usize) {
            // SAFETY: the caller's ranges (valid, disjoint) and CPU feature; the closures get
            // sub-ranges of them only.
            unsafe {
                copy_streamed_with(
                    dst,
                    src,
                    len,
                    |d, s, n| $stream(d, s, n),
                    |d, s, n| std::ptr::copy_nonoverlapping(s, d, n),
                )
            }
        }
    };
}

stream_copy_entry!(stream_copy_avx512, "avx512f", stream_avx512);
stream_copy_entry!(stream_copy_avx2, "avx2", stream_avx2);

/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes, the two do not overlap, and the
/// CPU has the instructions this routine is compiled for and `edge` (the `CopyNtFn` contract).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn copy_nt_avx512(dst: *mut u8, src: *const u8, len: usize, edge: FlushInstr) {
    // SAFETY: the caller's ranges and CPU (`CopyNtFn`); the closure gets sub-ranges only.
    unsafe { copy_nt_with(dst, src, len, edge, |d, s, n| stream_avx512(d, s, n)) }
}

/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes, the two do not overlap, and the
/// CPU has the instructions this routine is compiled for and `edge` (the `CopyNtFn` contract).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn copy_nt_avx2(dst: *mut u8, src: *const u8, len: usize, edge: FlushInstr) {
    // SAFETY: the caller's ranges and CPU (`CopyNtFn`); the closure gets sub-ranges only.
    unsafe { copy_nt_with(dst, src, len, edge, |d, s, n| stream_avx2(d, s, n)) }
}

/// # Safety
/// `src` is valid for reads and `dst` for writes of `len` bytes, the two do not overlap, and the
/// CPU has the instructions this routine is compiled for and `edge` (the `CopyNtFn` contract).
#[cfg(target_arch = "x86_64")]
unsafe fn copy_nt_sse2(dst: *mut u8, src: *const u8, len: usize, edge: FlushInstr) {
    // SAFETY: the caller's ranges and CPU (`CopyNtFn`); the closure gets sub-ranges only.
    unsafe { copy_nt_with(dst, src, len, edge, |d, s, n| stream_sse2(d, s, n)) }
}

/// Regular copy followed by a write-back of every line it touched.
///
/// # Safety
/// As `copy_nt`.
#[cfg(target_arch = "x86_64")]
#[inline]
pub unsafe fn copy_flushed(flush: FlushInstr, dst: *mut u8, src: *const u8, len: usize) {
    // SAFETY: the caller guarantees valid, disjoint ranges and a CPU with `flush`.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len);
        flush_range(flush, dst, len);
    }
}

/// Writes back every cache line overlapping `[ptr, ptr + len)`.
///
/// # Safety
/// The range must be mapped; the CPU must support `flush`.
#[cfg(target_arch = "x86_64")]
pub unsafe fn flush_range(flush: FlushInstr, ptr: *const u8, len: usize) {
    if len == 0 {
        return;
    }
    let start = ptr as usize & !(CACHE_LINE_BYTES - 1);
    let end = ptr as usize + len;
    let mut line = start;
    while line < end {
        let p = line as *const u8;
        // SAFETY: the line overlaps the caller's mapped range, and the CPU has `flush`; a
        // flush changes no memory contents.
        unsafe {
            match flush {
                FlushInstr::Clwb => {
                    std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags))
                }
                FlushInstr::Clflushopt => std::arch::asm!(
                    "clflushopt [{0}]",
                    in(reg) p,
                    options(nostack, preserves_flags)
                ),
                FlushInstr::Clflush => std::arch::x86_64::_mm_clflush(p),
            }
        }
        line += CACHE_LINE_BYTES;
    }
}

/// Orders and drains every earlier non-temporal store, CLWB and CLFLUSHOPT.
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn sfence() {
    // SAFETY: SFENCE has no operands and no preconditions; SSE is baseline on x86-64.
    unsafe { std::arch::x86_64::_mm_sfence() }
}

/// Streams whole lines from `src` to the line-aligned `dst` with 64-byte stores.
///
/// # Safety
/// `dst` (line-aligned) valid for `len` writes, `src` for `len` reads, `len` a multiple of 64,
/// and the CPU has AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn stream_avx512(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::*;
    debug_assert!(len == 0 || (dst as usize).is_multiple_of(64));
    let mut i = 0;
    // Four lines per iteration keeps the loads ahead of the streaming stores.
    while i + 256 <= len {
        // SAFETY: i + 256 <= len keeps all four lines inside the caller's ranges; `dst` is
        // line-aligned as streaming stores need.
        unsafe {
            let a = _mm512_loadu_si512(src.add(i) as *const __m512i);
            let b = _mm512_loadu_si512(src.add(i + 64) as *const __m512i);
            let c = _mm512_loadu_si512(src.add(i + 128) as *const __m512i);
            let d = _mm512_loadu_si512(src.add(i + 192) as *const __m512i);
            _mm512_stream_si512(dst.add(i) as *mut __m512i, a);
            _mm512_stream_si512(dst.add(i + 64) as *mut __m512i, b);
            _mm512_stream_si512(dst.add(i + 128) as *mut __m512i, c);
            _mm512_stream_si512(dst.add(i + 192) as *mut __m512i, d);
        }
        i += 256;
    }
    while i < len {
        // SAFETY: len is whole lines, so i + 64 <= len; aligned as above.
        unsafe {
            let a = _mm512_loadu_si512(src.add(i) as *const __m512i);
            _mm512_stream_si512(dst.add(i) as *mut __m512i, a);
        }
        i += 64;
    }
}

/// As `stream_avx512`, with 32-byte stores.
///
/// # Safety
/// As `stream_avx512`, with AVX2 instead of AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn stream_avx2(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::*;
    let mut i = 0;
    while i < len {
        // SAFETY: len is whole lines, so the line at i is inside the caller's ranges; `dst` is
        // line-aligned, so both halves are 32-byte aligned.
        unsafe {
            let a = _mm256_loadu_si256(src.add(i) as *const __m256i);
            let b = _mm256_loadu_si256(src.add(i + 32) as *const __m256i);
            _mm256_stream_si256(dst.add(i) as *mut __m256i, a);
            _mm256_stream_si256(dst.add(i + 32) as *mut __m256i, b);
        }
        i += 64;
    }
}

/// As `stream_avx512`, with 16-byte stores (SSE2 is baseline on x86-64).
///
/// # Safety
/// As `stream_avx512`, without the CPU feature.
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn stream_sse2(dst: *mut u8, src: *const u8, len: usize) {
    use std::arch::x86_64::*;
    let mut i = 0;
    while i < len {
        for k in (0..64).step_by(16) {
            // SAFETY: the line at i is inside the caller's ranges; `dst` is line-aligned, so
            // each 16-byte store is aligned.
            unsafe {
                let a = _mm_loadu_si128(src.add(i + k) as *const __m128i);
                _mm_stream_si128(dst.add(i + k) as *mut __m128i, a);
            }
        }
        i += 64;
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;
    use crate::cpu::CpuFeatures;

    #[test]
    fn streaming_copy_is_exact_at_any_alignment_and_length() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 13 + 5) as u8).collect();
        let copy = StreamingCopy::detect();
        for dst_off in [0usize, 1, 63, 64] {
            for len in [0usize, 1, 64, 65, 257, 5568, 7200] {
                let mut dst = vec![0xAAu8; 7200 + 128];
                copy.copy(&mut dst[dst_off..dst_off + len], &src[..len]);
                sfence();
                assert_eq!(
                    &dst[dst_off..dst_off + len],
                    &src[..len],
                    "off {dst_off} len {len}"
                );
                assert!(dst[..dst_off].iter().all(|&b| b == 0xAA));
                assert!(dst[dst_off + len..].iter().all(|&b| b == 0xAA));
            }
        }
    }

    #[test]
    fn every_available_path_copies_exactly_at_any_alignment_and_length() {
        let cpu = CpuFeatures::detect();
        let paths: Vec<SimdPath> = [SimdPath::Avx512, SimdPath::Avx2, SimdPath::Sse2]
            .into_iter()
            .filter(|p| match p {
                SimdPath::Avx512 => cpu.avx512f,
                SimdPath::Avx2 => cpu.avx2,
                SimdPath::Sse2 => cpu.sse2,
            })
            .collect();
        let flush = cpu.best_flush().unwrap();
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
        for path in paths {
            for dst_off in [0usize, 1, 7, 8, 63, 64] {
                for len in [0usize, 1, 63, 64, 65, 255, 256, 257, 4096, 5568] {
                    let mut dst = vec![0xAAu8; 6000 + 128];
                    // SAFETY: dst has room for dst_off + len (<= 5632) bytes; src has >= len.
                    unsafe {
                        copy_nt(
                            path,
                            flush,
                            dst.as_mut_ptr().add(dst_off),
                            src.as_ptr(),
                            len,
                        )
                    };
                    sfence();
                    assert_eq!(
                        &dst[dst_off..dst_off + len],
                        &src[..len],
                        "{path} off {dst_off} len {len}"
                    );
                    assert!(
                        dst[..dst_off].iter().all(|&b| b == 0xAA),
                        "wrote before the range"
                    );
                    assert!(
                        dst[dst_off + len..].iter().all(|&b| b == 0xAA),
                        "wrote past the range"
                    );
                }
            }
        }
    }
}
