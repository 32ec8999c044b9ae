//! FFI to Debian's libpmem (PMDK): the papers' "with PMDK" baseline.
//!
//! Only the two calls the mapped backend needs. libpmem picks its own copy routine (AVX or
//! AVX-512 when PMEM_AVX512F=1, SSE2 otherwise) and its own flush; that choice is the baseline.

extern "C" {
    fn pmem_memcpy_nodrain(
        pmemdest: *mut libc::c_void,
        src: *const libc::c_void,
        len: usize,
    ) -> *mut libc::c_void;
    fn pmem_drain();
}

/// # Safety
/// As `memcpy`: `dst` valid for `len` writes, `src` for `len` reads, no overlap.
pub unsafe fn memcpy_nodrain(dst: *mut u8, src: *const u8, len: usize) {
    debug_assert!(
        (dst as usize).abs_diff(src as usize) >= len,
        "the source and the destination do not overlap"
    );
    // SAFETY: the caller's ranges, as libpmem's memcpy needs them.
    unsafe { pmem_memcpy_nodrain(dst.cast(), src.cast(), len) };
}

/// Waits for every earlier `memcpy_nodrain` to be durable (libpmem's fence).
pub fn drain() {
    // SAFETY: pmem_drain takes nothing and only fences.
    unsafe { pmem_drain() };
}
