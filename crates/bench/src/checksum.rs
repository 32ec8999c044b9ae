//! `snbuf bench checksum`: how fast this CPU computes the CRC-32C every recorded byte carries,
//! by each implementation at hand, in cache and from DRAM; and the two ways a writer can
//! checksum a chunk it streams to mapped memory: copy then checksum the source again, or
//! checksum each small block while it is in L1 and then stream it out (fused, as Abseil's
//! `crc_memcpy` does). The recorder's choices (crates/burst/src/chunk.rs, chunk_writer.rs) follow
//! these figures, which BENCHMARKS.md records.
//!
//! Every variant's result is checked against the crc32c crate's over the same bytes, and every
//! copy against its source: a fast wrong answer is an error, not a figure.

use std::time::Instant;

use serde::Serialize;
use snbuf_platform::cpu::thread_cpu_seconds;
use snbuf_platform::instructions::{sfence, StreamingCopy};
use snbuf_platform::memory::{AlignedBuf, PageSize};

use crate::error::BenchError;

/// The bytes checksummed "in cache": well inside L2 on any machine in use.
const IN_CACHE_BYTES: usize = 64 << 10;
/// The recorder's default chunk, about: the unit a writer copies and checksums.
const CHUNK_BYTES: usize = 1 << 20;

#[derive(Clone, Debug)]
pub struct ChecksumConfig {
    /// Bytes streamed from DRAM per pass: several times the last-level cache.
    pub dram_bytes: usize,
    /// Passes per variant; the fastest is reported (the least disturbed by other load).
    pub passes: u32,
    /// Block sizes of the fused copy to try.
    pub fused_block_bytes: Vec<usize>,
}

impl Default for ChecksumConfig {
    fn default() -> Self {
        ChecksumConfig {
            dram_bytes: 256 << 20,
            passes: 3,
            fused_block_bytes: vec![8 << 10, 32 << 10],
        }
    }
}

/// One variant, measured.
#[derive(Clone, Debug, Serialize)]
pub struct ChecksumResult {
    pub variant: String,
    /// `cache` or `dram`: where the source bytes are.
    pub source: &'static str,
    pub bytes: u64,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub gb_per_s: f64,
    /// Core-seconds of CPU per GiB: what a writer pays for this step.
    pub core_s_per_gib: f64,
}

fn result(
    variant: String,
    source: &'static str,
    bytes: u64,
    wall_s: f64,
    cpu_s: f64,
) -> ChecksumResult {
    ChecksumResult {
        variant,
        source,
        bytes,
        wall_s,
        cpu_s,
        gb_per_s: bytes as f64 / wall_s / 1e9,
        core_s_per_gib: cpu_s / (bytes as f64 / (1u64 << 30) as f64),
    }
}

/// The fastest of `passes` runs of `f` (wall and CPU seconds), after one warm-up.
fn fastest(
    passes: u32,
    mut f: impl FnMut() -> u32,
    want: u32,
    name: &str,
) -> Result<(f64, f64), BenchError> {
    let mut best: Option<(f64, f64)> = None;
    for pass in 0..=passes {
        let (t0, c0) = (Instant::now(), thread_cpu_seconds());
        let got = f();
        let (wall, cpu) = (t0.elapsed().as_secs_f64(), thread_cpu_seconds() - c0);
        if got != want {
            return Err(BenchError::Implausible(format!(
                "{name}: CRC-32C {got:#010x} where the crc32c crate computes {want:#010x}"
            )));
        }
        if pass > 0 && best.is_none_or(|(w, _)| wall < w) {
            best = Some((wall, cpu));
        }
    }
    Ok(best.expect("at least one timed pass"))
}

fn crc32c_crate(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

fn crc_fast(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// A CRC-32C implementation: its name and its function.
type CrcCandidate = (&'static str, fn(&[u8]) -> u32);

/// The CRC-32C implementations compared.
const IMPLEMENTATIONS: [CrcCandidate; 2] = [
    ("crc32c crate (SSE4.2 crc32 instruction)", crc32c_crate),
    (
        "crc-fast (carry-less multiply, VPCLMULQDQ where present)",
        crc_fast,
    ),
];

fn pattern(buf: &mut [u8]) {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

fn alloc(bytes: usize) -> Result<AlignedBuf, BenchError> {
    AlignedBuf::new(bytes, PageSize::Small4K)
        .map_err(|e| BenchError::Config(format!("allocate {bytes} B: {e}")))
}

/// Runs every variant over the same buffers; results in the order measured: the checksum
/// alone, a writer's chunk (copy and checksum, each way), the copy floor of a socket receive.
pub fn run(
    config: &ChecksumConfig,
    mut step: impl FnMut(&str),
) -> Result<Vec<ChecksumResult>, BenchError> {
    if config.dram_bytes < CHUNK_BYTES || !config.dram_bytes.is_multiple_of(CHUNK_BYTES) {
        return Err(BenchError::Config(format!(
            "the DRAM region must be whole chunks of {CHUNK_BYTES} B"
        )));
    }
    let mut src = alloc(config.dram_bytes)?;
    pattern(src.as_mut_slice());
    let src = src.as_slice();
    let mut dst = alloc(config.dram_bytes)?;
    let mut out = checksum_alone(config, src, &mut step)?;
    out.extend(chunk_variants(config, src, dst.as_mut_slice(), &mut step)?);
    out.push(copy_floor(config, src, dst.as_mut_slice(), &mut step)?);
    assert_eq!(out.last().map(|r| r.variant.as_str()), Some(COPY_FLOOR));
    Ok(out)
}

/// First, the checksum alone, in cache (the same 64 KiB again and again) and streamed from DRAM.
fn checksum_alone(
    config: &ChecksumConfig,
    src: &[u8],
    step: &mut impl FnMut(&str),
) -> Result<Vec<ChecksumResult>, BenchError> {
    let mut out = Vec::new();
    // 1. Checksum alone, in cache (the same 64 KiB again and again) and streamed from DRAM.
    let small = &src[..IN_CACHE_BYTES];
    let small_want = crc32c::crc32c(small);
    let rounds = (config.dram_bytes / IN_CACHE_BYTES) as u32;
    let want = crc32c::crc32c(src);
    for (name, f) in IMPLEMENTATIONS {
        step(name);
        let (w, c) = fastest(
            config.passes,
            || {
                // Every round must give the right answer; the first wrong one is reported.
                let mut got = small_want;
                for _ in 0..rounds {
                    let c = f(std::hint::black_box(small));
                    if c != small_want {
                        got = c;
                    }
                }
                got
            },
            small_want,
            name,
        )?;
        out.push(result(
            name.to_string(),
            "cache",
            (rounds as usize * IN_CACHE_BYTES) as u64,
            w,
            c,
        ));
        let (w, c) = fastest(config.passes, || f(std::hint::black_box(src)), want, name)?;
        out.push(result(name.to_string(), "dram", src.len() as u64, w, c));
    }
    Ok(out)
}

/// Second, a writer's chunk to mapped memory: the streaming copy alone, a plain copy, and the
/// copy with the checksum in every order the recorder could take.
fn chunk_variants(
    config: &ChecksumConfig,
    src: &[u8],
    dst: &mut [u8],
    step: &mut impl FnMut(&str),
) -> Result<Vec<ChecksumResult>, BenchError> {
    let mut out = Vec::new();
    // 2. A writer's chunk to mapped memory: streaming copy from DRAM, and the checksum. Each
    // variant copies every 1 MiB chunk and returns the XOR of the chunks' CRCs (0 for the copy
    // alone), checked against the crc32c crate's.
    let copy = StreamingCopy::detect();
    let chunks_want: u32 = src
        .chunks(CHUNK_BYTES)
        .fold(0, |a, c| a ^ crc32c::crc32c(c));
    for (name, want, per_chunk) in &chunk_variant_list(config, &copy, chunks_want) {
        step(name);
        let (w, c) = fastest(
            config.passes,
            || {
                let mut acc = 0;
                for (d, s) in dst.chunks_mut(CHUNK_BYTES).zip(src.chunks(CHUNK_BYTES)) {
                    acc ^= per_chunk(d, s);
                }
                sfence();
                acc
            },
            *want,
            name,
        )?;
        out.push(result(name.clone(), "dram", src.len() as u64, w, c));
    }
    if dst != src {
        return Err(BenchError::Implausible(
            "a streaming copy differs from its source".into(),
        ));
    }
    Ok(out)
}

/// A variant of the chunk measurement: its name, the XOR of the chunks' CRCs it must return (0
/// for a copy alone), and what it does to each chunk (destination, source).
type Variant<'a> = (String, u32, Box<dyn Fn(&mut [u8], &[u8]) -> u32 + 'a>);

/// Every variant `chunk_variants` measures, in order.
fn chunk_variant_list<'a>(
    config: &ChecksumConfig,
    copy: &'a StreamingCopy,
    chunks_want: u32,
) -> Vec<Variant<'a>> {
    let mut variants: Vec<Variant> = vec![
        (
            "streaming copy alone (no checksum)".into(),
            0,
            Box::new(|d, s| {
                copy.copy(d, s);
                0
            }),
        ),
        // What a kernel's copy to user space does (rep movsb, regular stores that read each
        // destination line first): the floor for network ingest's one copy into the ring.
        (
            "plain memcpy (regular stores, as the kernel's copy to user space)".into(),
            0,
            Box::new(|d, s| {
                d.copy_from_slice(std::hint::black_box(s));
                0
            }),
        ),
        (
            "streaming copy of a 1 MiB chunk, then CRC of the chunk".into(),
            chunks_want,
            Box::new(|d, s| {
                copy.copy(d, s);
                crc_fast(s)
            }),
        ),
    ];
    // Fused in registers, where the CPU has it (the recorder's nt path): each 64-byte load is
    // streamed out and folded into the CRC by carry-less multiplication, the source prefetched
    // ahead; every byte is read from memory once.
    let edge = snbuf_platform::cpu::CpuFeatures::detect().best_flush();
    for (routine, copy_crc) in snbuf_persist::nt_crc::routines_here() {
        let edge = edge.expect("x86-64 has CLFLUSH");
        variants.push((
            format!(
                "fused in registers ({routine}): each load folded into the CRC as it streams out"
            ),
            chunks_want,
            Box::new(move |d: &mut [u8], s: &[u8]| {
                assert_eq!(d.len(), s.len());
                // SAFETY: `d` and `s` are whole, distinct chunks of the two buffers; the CPU
                // has the routine's features (routines_here) and `edge`.
                unsafe { copy_crc(d.as_mut_ptr(), s.as_ptr(), s.len(), edge, 0) }
            }),
        ));
    }
    // Fused, in both orders: CRC a block (from DRAM) then stream it out from cache, or stream
    // it out then CRC it while it is still in cache.
    for crc_first in [true, false] {
        for &block in &config.fused_block_bytes {
            let kib = block >> 10;
            variants.push((
                if crc_first {
                    format!("fused: CRC of each {kib} KiB block, then stream it out")
                } else {
                    format!("fused: stream each {kib} KiB block out, then CRC it (still in cache)")
                },
                chunks_want,
                Box::new(move |d, s| {
                    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
                    for (db, sb) in d.chunks_mut(block).zip(s.chunks(block)) {
                        if crc_first {
                            digest.update(sb);
                        }
                        copy.copy(db, sb);
                        if !crc_first {
                            digest.update(sb);
                        }
                    }
                    digest.finalize() as u32
                }),
            ));
        }
    }
    assert!(
        variants.len() >= 3,
        "the copies alone and the plain checksum are always there"
    );
    variants
}

/// Third, the copy floor of a socket receive.
fn copy_floor(
    config: &ChecksumConfig,
    src: &[u8],
    dst: &mut [u8],
    step: &mut impl FnMut(&str),
) -> Result<ChecksumResult, BenchError> {
    // 3. The floor of receiving from a socket: the kernel copies each received buffer (at most
    // 64 KiB, a coalesced one) from its cache into the next bytes of the ring, with regular
    // stores. Here one cache-hot 64 KiB buffer goes into each successive 64 KiB of the region.
    step(COPY_FLOOR);
    let hot = &src[..RECEIVE_BUFFER_BYTES];
    let (w, c) = fastest(
        config.passes,
        || {
            for d in dst.chunks_exact_mut(RECEIVE_BUFFER_BYTES) {
                copy_regular_stores(d, std::hint::black_box(hot));
            }
            0
        },
        0,
        COPY_FLOOR,
    )?;
    if dst[..RECEIVE_BUFFER_BYTES] != *hot || dst[src.len() - RECEIVE_BUFFER_BYTES..] != *hot {
        return Err(BenchError::Implausible(
            "the copy floor's ring does not hold its buffer".into(),
        ));
    }
    Ok(result(COPY_FLOOR.into(), "cache", src.len() as u64, w, c))
}

/// The copy-floor row's name: `bench/ingest.py` compares ingest's CPU with it.
pub const COPY_FLOOR: &str =
    "copy floor of a socket receive: a cache-hot 64 KiB buffer into the next 64 KiB of a ring in DRAM (regular stores, as the kernel's copy to user space)";
/// The largest buffer one receive copies: a coalesced (GRO) buffer, one IP packet's worth.
const RECEIVE_BUFFER_BYTES: usize = 64 << 10;

/// Copies `src` into `dst` with regular stores, as the kernel's copy to user space does on
/// x86-64 (`rep movsb`): each destination line is read for ownership, then written.
fn copy_regular_stores(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `rep movsb` copies exactly `src.len()` bytes from `src` to `dst`, two live
    // slices of that length that do not overlap (one is borrowed mutably).
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") src.len() => _,
            inout("rdi") dst.as_mut_ptr() => _,
            inout("rsi") src.as_ptr() => _,
            options(nostack, preserves_flags)
        );
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

/// Steps `run` reports, for a progress bar.
pub fn steps(config: &ChecksumConfig) -> u64 {
    let in_registers = snbuf_persist::nt_crc::routines_here().len();
    // Each implementation; streaming copy, plain memcpy, copy then CRC; fused in registers;
    // the fused block orders; the copy floor.
    (IMPLEMENTATIONS.len() + 4 + in_registers + 2 * config.fused_block_bytes.len()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_runs_and_checks_out_on_a_small_region() {
        let config = ChecksumConfig {
            dram_bytes: 2 << 20,
            passes: 1,
            fused_block_bytes: vec![8 << 10],
        };
        let mut seen = 0;
        let results = run(&config, |_| seen += 1).unwrap();
        assert_eq!(seen, steps(&config));
        // Each implementation in cache and from DRAM; streaming copy alone; plain memcpy; copy
        // then CRC; fused in registers where the CPU can; two fused orders; the copy floor.
        let in_registers = snbuf_persist::nt_crc::routines_here().len();
        assert_eq!(results.len(), 2 * IMPLEMENTATIONS.len() + 6 + in_registers);
        assert!(results.iter().any(|r| r.variant == COPY_FLOOR));
        for r in &results {
            assert!(r.bytes > 0 && r.wall_s > 0.0, "{r:?}");
            assert!(r.gb_per_s.is_finite() && r.core_s_per_gib >= 0.0, "{r:?}");
        }
    }

    #[test]
    fn a_region_that_is_not_whole_chunks_is_refused() {
        let config = ChecksumConfig {
            dram_bytes: (1 << 20) + 1,
            ..ChecksumConfig::default()
        };
        assert!(run(&config, |_| {}).is_err());
    }
}
