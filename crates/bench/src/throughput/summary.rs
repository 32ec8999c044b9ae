//! One point's result from its threads' outcomes: bytes and operations over the slowest
//! thread's window, merged latency histograms, the pages the kernel granted, and notes on any
//! figure that cannot be what was asked for.

use std::path::Path;

use hdrhistogram::Histogram;

use crate::clock::OpClock;
use crate::error::BenchError;
use crate::results::{LatencyNs, ThroughputResult};
use crate::throughput::config::{Direction, Point, ThroughputConfig};
use crate::throughput::drive::{new_histogram, ThreadOutcome};

fn latency_ns(h: &Histogram<u64>, to_ns: impl Fn(u64) -> u64) -> LatencyNs {
    LatencyNs {
        p50: to_ns(h.value_at_quantile(0.50)),
        p99: to_ns(h.value_at_quantile(0.99)),
        p999: to_ns(h.value_at_quantile(0.999)),
        max: to_ns(h.max()),
        mean: to_ns(h.mean() as u64) as f64,
        samples: h.len(),
    }
}

/// One point's result from what its threads measured.
pub(crate) fn summarise(
    config: &ThroughputConfig,
    point: Point,
    paths: &[&Path],
    region: u64,
    clock: &OpClock,
    outcomes: Vec<ThreadOutcome>,
) -> Result<ThroughputResult, BenchError> {
    let bytes: u64 = outcomes.iter().map(|o| o.bytes).sum();
    let ops: u64 = outcomes.iter().map(|o| o.ops).sum();
    // The slowest thread's window: a conservative aggregate over threads.
    let seconds = outcomes
        .iter()
        .map(|o| o.elapsed.as_secs_f64())
        .fold(0.0, f64::max);
    if ops == 0 || seconds == 0.0 {
        return Err(BenchError::Implausible(format!(
            "{}, {} B, {} thread(s): no operation completed in the timed window",
            point.method, point.block_size_bytes, point.threads
        )));
    }
    let mut latency = new_histogram();
    let mut completion: Option<Histogram<u64>> = None;
    for o in &outcomes {
        latency.add(&o.latency_ticks).expect("same configuration");
        if let Some(c) = &o.completion_ns {
            completion
                .get_or_insert_with(new_histogram)
                .add(c)
                .expect("same configuration");
        }
    }
    let first = &outcomes[0];
    let report = &first.report;
    let obtained = report.pages.map(|p| p.effective_page_bytes());
    let mut notes = report.notes.clone();
    let requested = config.page_size.bytes() as u64;
    if requested > 4096 && obtained.is_some_and(|o| o < requested) {
        notes.push(format!(
            "suspect: asked for {} pages for the target, got {} (tmpfs needs huge=always or shmem_enabled; see docs/RESULTS.md)",
            snbuf_quantity::Bytes(requested),
            snbuf_quantity::Bytes(obtained.unwrap_or(0))
        ));
    }
    if requested > 4096 && first.source_page_bytes.is_some_and(|o| o < requested) {
        notes.push("suspect: asked for 2 MiB pages for the DRAM source, got 4 KiB".to_string());
    }
    let gib = (1u64 << 30) as f64;
    Ok(ThroughputResult {
        suite: config.direction.name().to_string(),
        method: point.method.to_string(),
        target: paths
            .iter()
            .take(point.threads)
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(","),
        targets: paths.len().min(point.threads),
        block_size_bytes: point.block_size_bytes,
        slot_bytes: first.slot_bytes,
        threads: point.threads,
        cpus: (0..point.threads)
            .map(|t| config.cpus[t % config.cpus.len()])
            .collect(),
        pattern: config.pattern.name().to_string(),
        page_size_bytes: requested,
        page_size_obtained_bytes: obtained,
        source_page_size_obtained_bytes: first.source_page_bytes,
        persist_every: match config.direction {
            Direction::Write => config.persist_every.describe(),
            Direction::Read => "n/a".into(),
        },
        durability: report.durability.name().to_string(),
        instruction_path: report.instruction_path.clone(),
        queue_depth: point
            .method
            .capabilities()
            .async_queue
            .then_some(config.queue_depth),
        region_bytes_per_thread: region,
        bytes,
        ops,
        seconds,
        gib_per_s: bytes as f64 / gib / seconds,
        mops_per_s: ops as f64 / 1e6 / seconds,
        cpu_core_s_per_gib: outcomes.iter().map(|o| o.cpu_s).sum::<f64>() / (bytes as f64 / gib),
        per_thread_gib_per_s: outcomes
            .iter()
            .map(|o| o.bytes as f64 / gib / o.elapsed.as_secs_f64().max(1e-9))
            .collect(),
        latency_ns: latency_ns(&latency, |t| clock.ticks_to_ns(t)),
        completion_latency_ns: completion.as_ref().map(|c| latency_ns(c, |ns| ns)),
        verified_ops: outcomes.iter().map(|o| o.verified_ops).sum(),
        latency_every: config.latency_every,
        notes,
    })
}
