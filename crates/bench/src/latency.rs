//! `snbuf bench latency` (Yoshioka et al.): the latency of single memory accesses and of the
//! instruction sequences that make a store durable, in DRAM and on the target mapping.
//!
//! Each access is timed alone with RDTSCP on both sides (the second followed by LFENCE, so that
//! nothing after it starts early; stores also drained by an MFENCE before it, since RDTSCP does
//! not wait for them), converted to ns with the calibrated TSC frequency; results give ns and
//! cycles. The region is several times the last-level cache, walked in order or in a
//! pseudo-random permutation, and every timed line is flushed (CLFLUSH + MFENCE, untimed) before
//! its access: a figure is the cost of going to the medium, never of a cache hit. A load whose
//! median still looks like a cache hit is flagged in the result's notes.
//!
//! Throughput figures use the same operations back to back, untimed one by one, over the region.

use std::path::{Path, PathBuf};
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use snbuf_platform::memory::{AlignedBuf, FileMapping, PageSize};

use crate::clock::OpClock;
use crate::results::LatencyNs;

/// The access sequences Yoshioka et al. time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Load,
    LoadLfence,
    LoadMfence,
    StoreSfence,
    NtStoreSfence,
    StoreClflush,
    StoreClflushoptSfence,
    StoreClwbSfence,
}

pub const ALL_OPS: [Op; 8] = [
    Op::Load,
    Op::LoadLfence,
    Op::LoadMfence,
    Op::StoreSfence,
    Op::NtStoreSfence,
    Op::StoreClflush,
    Op::StoreClflushoptSfence,
    Op::StoreClwbSfence,
];

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Load => "load",
            Op::LoadLfence => "load+lfence",
            Op::LoadMfence => "load+mfence",
            Op::StoreSfence => "store+sfence",
            Op::NtStoreSfence => "ntstore+sfence",
            Op::StoreClflush => "store+clflush",
            Op::StoreClflushoptSfence => "store+clflushopt+sfence",
            Op::StoreClwbSfence => "store+clwb+sfence",
        }
    }

    fn is_load(self) -> bool {
        matches!(self, Op::Load | Op::LoadLfence | Op::LoadMfence)
    }

    /// Whether this CPU can run it.
    fn supported(self) -> bool {
        let f = snbuf_platform::cpu::CpuFeatures::detect();
        match self {
            Op::StoreClflushoptSfence => f.clflushopt,
            Op::StoreClwbSfence => f.clwb,
            _ => cfg!(target_arch = "x86_64"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    Seq,
    Rand,
}

#[derive(Clone, Debug)]
pub struct LatencyConfig {
    /// A directory (a temporary file is mapped there) or a file; None measures DRAM only.
    pub target: Option<PathBuf>,
    pub region_bytes: u64,
    /// Bytes per access: a multiple of 64 (one or more cache lines).
    pub access_bytes: usize,
    /// Timed accesses per (medium, order, op).
    pub samples: u64,
    pub ops: Vec<Op>,
    pub orders: Vec<Order>,
    pub page_size: PageSize,
}

/// Percentiles in TSC cycles.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencyCycles {
    pub p50: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// One (medium, order, operation) of the latency matrix. What was measured (`medium`, `order`,
/// `op`) must be in a results file; a figure an older version did not write reads as zero.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct LatencyResult {
    /// `dram` or `target`.
    pub medium: String,
    #[serde(default)]
    pub target: String,
    pub order: Order,
    pub op: String,
    #[serde(default)]
    pub access_bytes: usize,
    #[serde(default)]
    pub region_bytes: u64,
    #[serde(default)]
    pub latency_ns: LatencyNs,
    #[serde(default)]
    pub latency_cycles: LatencyCycles,
    /// The same operation back to back over the region.
    #[serde(default)]
    pub throughput_gb_per_s: f64,
    #[serde(default)]
    pub tsc_hz: Option<f64>,
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A load faster than this after its line was flushed was served by a cache, not the medium.
const CACHE_HIT_NS: u64 = 15;

/// Runs every (medium, order, op) of `config`; `progress` is called after each with a label.
/// Steps `run` reports progress for: every order and operation, in DRAM and on the target.
pub fn steps(config: &LatencyConfig) -> u64 {
    (1 + config.target.is_some() as u64) * (config.orders.len() * config.ops.len()) as u64
}

pub fn run(
    config: &LatencyConfig,
    clock: &OpClock,
    mut progress: impl FnMut(&str),
) -> std::io::Result<Vec<LatencyResult>> {
    if config.access_bytes == 0 || !config.access_bytes.is_multiple_of(64) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "access size {} B: must be a multiple of 64 B",
                config.access_bytes
            ),
        ));
    }
    let region = (config.region_bytes as usize).max(config.access_bytes * 2);
    let mut media: Vec<(String, String, Memory)> = vec![(
        "dram".into(),
        "anonymous memory".into(),
        Memory::Dram(AlignedBuf::new(region, config.page_size)?),
    )];
    let mut _file_guard = None;
    if let Some(t) = &config.target {
        let (mapping, guard) = map_target(t, region, config.page_size)?;
        _file_guard = guard;
        media.push((
            "target".into(),
            t.display().to_string(),
            Memory::File(mapping),
        ));
    }
    let llc = crate::machine::last_level_cache_bytes();
    let mut out = Vec::new();
    for (medium, target, mem) in &media {
        let base = mem.ptr();
        for &order in &config.orders {
            for &op in &config.ops {
                let mut notes = Vec::new();
                if !op.supported() {
                    progress(&format!(
                        "{medium} {:?} {}: not supported here",
                        order,
                        op.name()
                    ));
                    continue;
                }
                if let Some(llc) = llc {
                    if (region as u64) < 2 * llc {
                        notes.push(format!(
                            "suspect: region {region} B is under twice the {llc} B last-level cache: throughput may include cache hits"
                        ));
                    }
                }
                let walk = Walk::new(region, config.access_bytes, order);
                let hist = time_accesses(base, &walk, op, config.access_bytes, config.samples);
                let tput = throughput(base, &walk, op, config.access_bytes);
                let ns = |t: u64| clock.ticks_to_ns(t);
                let latency_ns = LatencyNs {
                    p50: ns(hist.value_at_quantile(0.5)),
                    p99: ns(hist.value_at_quantile(0.99)),
                    p999: ns(hist.value_at_quantile(0.999)),
                    max: ns(hist.max()),
                    mean: hist.mean() / clock.tsc_hz().map(|h| h / 1e9).unwrap_or(1.0),
                    samples: hist.len(),
                };
                if op.is_load() && latency_ns.p50 < CACHE_HIT_NS {
                    notes.push(format!(
                        "suspect: median {} ns after a flush looks like a cache hit: this figure is not the medium's",
                        latency_ns.p50
                    ));
                }
                out.push(LatencyResult {
                    medium: medium.clone(),
                    target: target.clone(),
                    order,
                    op: op.name().into(),
                    access_bytes: config.access_bytes,
                    region_bytes: region as u64,
                    latency_ns,
                    latency_cycles: LatencyCycles {
                        p50: hist.value_at_quantile(0.5),
                        p99: hist.value_at_quantile(0.99),
                        p999: hist.value_at_quantile(0.999),
                        max: hist.max(),
                    },
                    throughput_gb_per_s: tput,
                    tsc_hz: clock.tsc_hz(),
                    notes,
                });
                progress(&format!("{medium} {:?} {}", order, op.name()));
            }
        }
    }
    Ok(out)
}

enum Memory {
    Dram(AlignedBuf),
    File(FileMapping),
}

impl Memory {
    fn ptr(&self) -> *mut u8 {
        match self {
            Memory::Dram(b) => b.as_ptr() as *mut u8,
            Memory::File(m) => m.as_ptr(),
        }
    }
}

/// Removes the temporary file a directory target got.
pub(crate) struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Maps `len` bytes of a file in (or at) `target`, prefaulted.
pub(crate) fn map_target(
    target: &Path,
    len: usize,
    page_size: PageSize,
) -> std::io::Result<(FileMapping, Option<RemoveOnDrop>)> {
    let (path, guard) = if target.is_dir() {
        let p = target.join(format!("snbuf-mem-{}-{}.dat", std::process::id(), unique()));
        (p.clone(), Some(RemoveOnDrop(p)))
    } else {
        (target.to_path_buf(), None)
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    if file.metadata()?.len() < len as u64 {
        file.set_len(len as u64)?;
    }
    let mapping = FileMapping::map(&file, 0, len, page_size, true)?;
    Ok((mapping, guard))
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// The order accesses visit the region's slots: in order, or a bijective hash of the index over
/// the largest power-of-two number of slots (a permutation without a table of indexes).
struct Walk {
    slots: u64,
    bits: u32,
    access_bytes: usize,
    order: Order,
}

impl Walk {
    fn new(region: usize, access_bytes: usize, order: Order) -> Walk {
        let slots = (region / access_bytes) as u64;
        let bits = 63 - slots.leading_zeros();
        Walk {
            slots: 1 << bits,
            bits,
            access_bytes,
            order,
        }
    }

    #[inline]
    fn offset(&self, i: u64) -> usize {
        let i = i & (self.slots - 1);
        let slot = match self.order {
            Order::Seq => i,
            Order::Rand => {
                // Odd multiplications and xor-shifts are bijections on n-bit integers.
                let mask = self.slots - 1;
                let mut x = i;
                x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15) & mask;
                x ^= x >> (self.bits / 2 + 1);
                x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9) & mask;
                x ^= x >> (self.bits / 3 + 1);
                x
            }
        };
        slot as usize * self.access_bytes
    }
}

fn time_accesses(
    base: *mut u8,
    walk: &Walk,
    op: Op,
    access: usize,
    samples: u64,
) -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 1 << 40, 3).expect("static bounds");
    for i in 0..samples {
        // SAFETY: offsets stay inside the region (the walk is over whole slots of it).
        let p = unsafe { base.add(walk.offset(i)) };
        // SAFETY: `p..p + access` is mapped and writable.
        unsafe { evict(p, access) };
        let t0 = rdtscp();
        // SAFETY: as above.
        unsafe { access_once(p, op, access, i) };
        if !op.is_load() {
            // RDTSCP waits for earlier loads to complete but not for earlier stores to become
            // visible: without this fence a store would be timed at issue (~25 ns), not at
            // completion. The fence's own cost is in every store figure alike.
            drain_stores();
        }
        let t1 = rdtscp();
        let _ = h.record(t1.saturating_sub(t0).max(1));
    }
    h
}

/// GB/s of `op` back to back over the whole region (once through its slots).
fn throughput(base: *mut u8, walk: &Walk, op: Op, access: usize) -> f64 {
    let n = walk.slots.min(1 << 22);
    let t = Instant::now();
    for i in 0..n {
        // SAFETY: as in `time_accesses`.
        unsafe { access_once(base.add(walk.offset(i)), op, access, i) };
    }
    (n as f64 * access as f64) / t.elapsed().as_secs_f64() / 1e9
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn rdtscp() -> u64 {
    use std::arch::x86_64::{__rdtscp, _mm_lfence};
    let mut aux = 0;
    // SAFETY: RDTSCP and LFENCE have no preconditions on x86-64 CPUs with RDTSCP (all current).
    unsafe {
        let t = __rdtscp(&mut aux);
        _mm_lfence();
        t
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn rdtscp() -> u64 {
    0
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn drain_stores() {
    // SAFETY: MFENCE has no preconditions (SSE2 is baseline on x86-64).
    unsafe { std::arch::x86_64::_mm_mfence() }
}

#[cfg(not(target_arch = "x86_64"))]
fn drain_stores() {}

/// Takes the lines out of every cache, untimed, so that the timed access goes to the medium.
///
/// # Safety
/// `p..p + len` must be mapped.
#[cfg(target_arch = "x86_64")]
unsafe fn evict(p: *mut u8, len: usize) {
    use std::arch::x86_64::{_mm_clflush, _mm_mfence};
    // SAFETY: every line flushed is inside the caller's mapped range; CLFLUSH and MFENCE are
    // baseline on x86-64 and change no memory contents.
    unsafe {
        for off in (0..len).step_by(64) {
            _mm_clflush(p.add(off));
        }
        _mm_mfence();
    }
}

/// # Safety
/// None needed here: off x86-64 there is nothing to evict, and this touches no memory. It is
/// `unsafe` to match the x86-64 version (`p` valid for `len` bytes).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn evict(_: *mut u8, _: usize) {}

/// One access of `len` bytes at `p` as `op`.
///
/// # Safety
/// `p..p + len` must be mapped and writable, 64-byte aligned.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn access_once(p: *mut u8, op: Op, len: usize, stamp: u64) {
    use std::arch::asm;
    use std::arch::x86_64::*;
    // SAFETY: every word and line touched lies in the caller's mapped, writable,
    // line-aligned range; the flush and fence instructions change no memory contents, and
    // CLFLUSHOPT and CLWB only run for the ops `supported()` allows on this CPU.
    unsafe {
        let words = p as *mut u64;
        let n = len / 8;
        match op {
            Op::Load | Op::LoadLfence | Op::LoadMfence => {
                let mut acc = 0u64;
                for k in 0..n {
                    acc ^= std::ptr::read_volatile(words.add(k));
                }
                std::hint::black_box(acc);
                match op {
                    Op::LoadLfence => _mm_lfence(),
                    Op::LoadMfence => _mm_mfence(),
                    _ => {}
                }
            }
            Op::NtStoreSfence => {
                for k in 0..n {
                    _mm_stream_si64(words.add(k) as *mut i64, stamp as i64);
                }
                _mm_sfence();
            }
            _ => {
                for k in 0..n {
                    std::ptr::write_volatile(words.add(k), stamp);
                }
                for off in (0..len).step_by(64) {
                    let line = p.add(off);
                    match op {
                        Op::StoreClflush => _mm_clflush(line),
                        Op::StoreClflushoptSfence => {
                            asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags))
                        }
                        Op::StoreClwbSfence => {
                            asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags))
                        }
                        _ => {}
                    }
                }
                if op != Op::StoreClflush {
                    _mm_sfence();
                }
            }
        }
    }
}

/// # Safety
/// None needed here: off x86-64 this touches no memory. It is `unsafe` to match the x86-64
/// version (`p` valid for `len` bytes of `op`).
#[cfg(not(target_arch = "x86_64"))]
unsafe fn access_once(_: *mut u8, _: Op, _: usize, _: u64) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_random_walk_visits_every_slot_once() {
        let w = Walk::new(1 << 16, 64, Order::Rand);
        let mut seen = vec![false; w.slots as usize];
        for i in 0..w.slots {
            let s = w.offset(i) / 64;
            assert!(!seen[s], "slot {s} twice");
            seen[s] = true;
        }
        // And it is not the sequential order.
        assert_ne!(w.offset(1), 64);
    }

    #[test]
    fn every_op_runs_on_a_tiny_region_of_dram_and_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let config = LatencyConfig {
            target: Some(dir.path().to_path_buf()),
            region_bytes: 1 << 20,
            access_bytes: 128,
            samples: 200,
            ops: ALL_OPS.to_vec(),
            orders: vec![Order::Seq, Order::Rand],
            page_size: PageSize::Small4K,
        };
        let clock = OpClock::calibrate(std::time::Duration::from_millis(10));
        let r = run(&config, &clock, |_| {}).unwrap();
        let supported = ALL_OPS.iter().filter(|o| o.supported()).count();
        assert_eq!(r.len(), 2 * 2 * supported);
        for x in &r {
            assert_eq!(x.latency_ns.samples, 200, "{x:?}");
            assert!(
                x.latency_cycles.p50 > 0 && x.throughput_gb_per_s > 0.0,
                "{x:?}"
            );
            // A 1 MiB region is inside the cache: the guard says so.
            if crate::machine::last_level_cache_bytes().is_some_and(|l| l > 1 << 19) {
                assert!(x.notes.iter().any(|n| n.contains("cache")), "{x:?}");
            }
        }
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "temp file removed"
        );
        // An access that is not whole cache lines is refused.
        let bad = LatencyConfig {
            access_bytes: 100,
            ..config
        };
        assert!(run(&bad, &clock, |_| {}).is_err());
    }
}
