//! Running one point of a sweep: a thread per `threads`, each pinned and on its own region of
//! its target, all released together by a barrier; a warm-up, then the measured duration, then
//! stop. The first thread to fail stops the others, and its error is the point's.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use snbuf_persist::{open_with, SinkConfig};
use snbuf_platform::cpu;

use crate::clock::OpClock;
use crate::error::BenchError;
use crate::results::ThroughputResult;
use crate::throughput::config::{Direction, Point, ThroughputConfig};
use crate::throughput::drive::{
    Drive, DriveError, ThreadCtx, ThreadOutcome, PHASE_MEASURE, PHASE_STOP, PHASE_WARMUP,
    PREFILL_CHUNK_BYTES,
};
use crate::throughput::summary::summarise;
use crate::throughput::targets::TargetFiles;

/// Runs one point.
pub fn run_point(
    config: &ThroughputConfig,
    files: &TargetFiles,
    point: Point,
    clock: &OpClock,
) -> Result<ThroughputResult, BenchError> {
    let paths = files.paths();
    let region = config.region_bytes();
    let phase = AtomicU8::new(PHASE_WARMUP);
    let ready = Barrier::new(point.threads + 1);
    let first_error: Mutex<Option<BenchError>> = Mutex::new(None);
    let wrap = |e: DriveError| match e {
        DriveError::Persist(cause) => BenchError::Persist {
            method: point.method,
            block: point.block_size_bytes,
            threads: point.threads,
            cause,
        },
        DriveError::Integrity(what) => BenchError::Integrity {
            method: point.method,
            block: point.block_size_bytes,
            threads: point.threads,
            what,
        },
    };

    let outcomes: Vec<Option<ThreadOutcome>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..point.threads)
            .map(|t| {
                let path = paths[t % paths.len()];
                let slice = (t / paths.len()) as u64;
                let cpu = config.cpus[t % config.cpus.len()];
                let (phase, ready, first_error) = (&phase, &ready, &first_error);
                s.spawn(move || {
                    let r = run_thread(
                        config,
                        point,
                        path,
                        slice * region,
                        region,
                        cpu,
                        clock,
                        phase,
                        ready,
                    );
                    match r {
                        Ok(o) => Some(o),
                        Err(e) => {
                            // Stop the others; keep the first error for the caller.
                            phase.store(PHASE_STOP, Ordering::Release);
                            first_error.lock().unwrap().get_or_insert(wrap(e));
                            None
                        }
                    }
                })
            })
            .collect();
        ready.wait();
        if phase.load(Ordering::Acquire) != PHASE_STOP {
            sleep_unless_stopped(&phase, config.warmup);
            let _ = phase.compare_exchange(
                PHASE_WARMUP,
                PHASE_MEASURE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            sleep_unless_stopped(&phase, config.duration);
            phase.store(PHASE_STOP, Ordering::Release);
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect()
    });
    if let Some(e) = first_error.into_inner().unwrap() {
        return Err(e);
    }
    let outcomes: Vec<ThreadOutcome> = outcomes
        .into_iter()
        .map(|o| o.expect("no error, so every thread finished"))
        .collect();
    summarise(config, point, &paths, region, clock, outcomes)
}

fn sleep_unless_stopped(phase: &AtomicU8, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && phase.load(Ordering::Acquire) != PHASE_STOP {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
}

#[allow(clippy::too_many_arguments)]
fn run_thread(
    config: &ThroughputConfig,
    point: Point,
    path: &Path,
    region_offset: u64,
    region: u64,
    cpu_id: usize,
    clock: &OpClock,
    phase: &AtomicU8,
    ready: &Barrier,
) -> Result<ThreadOutcome, DriveError> {
    // Whatever happens, reach the barrier exactly once so the coordinator is never left waiting.
    let arrived = Cell::new(false);
    let ctx = ThreadCtx {
        config,
        point,
        path,
        region_offset,
        region,
        cpu_id,
        clock,
        phase,
        ready,
        arrived: &arrived,
    };
    let r = (|| {
        let _ = cpu::pin_current_thread(cpu_id);
        let block = point.block_size_bytes as usize;
        let mut sink_config = SinkConfig::new(point.method, path, region);
        sink_config.region_offset_bytes = region_offset;
        sink_config.max_io_bytes = match config.direction {
            Direction::Write => block,
            Direction::Read => block.max(PREFILL_CHUNK_BYTES),
        };
        sink_config.page_size = config.page_size;
        sink_config.queue_depth = config.queue_depth;
        sink_config.sync_mode = config.sync_mode;
        open_with(&sink_config, Drive(&ctx))?
    })();
    if !arrived.get() {
        ready.wait();
    }
    r
}
