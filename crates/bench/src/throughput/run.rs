//! Running one point of a sweep: a thread per `threads`, each pinned and on its own region of
//! its target, all released together by a barrier; a warm-up, then the measured duration, then
//! stop. The first thread to fail stops the others, and its error is the point's.
//!
//! A medium that stalls for longer than the window leaves a thread inside the operation it began
//! before the window opened, and the point would have no figure at all. So the window stays open
//! past its duration until every thread has completed a measured operation, up to
//! `STALL_GRACE`; the stall is then inside the figure, and a note says the window was held.

use std::cell::Cell;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
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

/// How long past its duration a timed window may be held open waiting for a stalled thread's
/// first operation; past it the point has no figure and says so.
const STALL_GRACE: Duration = Duration::from_secs(30);

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
    let measured_threads = AtomicUsize::new(0);
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

    let (outcomes, held): (Vec<Option<ThreadOutcome>>, Duration) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..point.threads)
            .map(|t| {
                let path = paths[t % paths.len()];
                let slice = (t / paths.len()) as u64;
                let cpu = config.cpus[t % config.cpus.len()];
                let (phase, ready, first_error) = (&phase, &ready, &first_error);
                let measured_threads = &measured_threads;
                s.spawn(move || {
                    let r = run_thread(
                        config,
                        point,
                        path,
                        slice * region,
                        region,
                        cpu,
                        clock,
                        (phase, ready, measured_threads),
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
        let mut held = Duration::ZERO;
        if phase.load(Ordering::Acquire) != PHASE_STOP {
            sleep_unless_stopped(&phase, config.warmup);
            let _ = phase.compare_exchange(
                PHASE_WARMUP,
                PHASE_MEASURE,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            sleep_unless_stopped(&phase, config.duration);
            held = hold_until_measured(&phase, &measured_threads, point.threads);
            phase.store(PHASE_STOP, Ordering::Release);
        }
        let outcomes = handles
            .into_iter()
            .map(|h| h.join().expect("a bench thread panicked"))
            .collect();
        (outcomes, held)
    });
    if let Some(e) = first_error.into_inner().unwrap() {
        return Err(e);
    }
    let outcomes: Vec<ThreadOutcome> = outcomes
        .into_iter()
        .map(|o| o.expect("no error, so every thread finished"))
        .collect();
    let mut result = summarise(config, point, &paths, region, clock, outcomes)?;
    if !held.is_zero() {
        result.notes.push(format!(
            "suspect: the timed window was held open {} ms past its {} ms until every thread had completed an operation (the medium stalled, or one operation takes longer than the window)",
            held.as_millis(),
            config.duration.as_millis()
        ));
    }
    Ok(result)
}

/// Keeps the window open until every thread has completed a measured operation, a thread fails
/// (the phase is then already stop), or `STALL_GRACE` has passed; returns how long it was held.
fn hold_until_measured(
    phase: &AtomicU8,
    measured_threads: &AtomicUsize,
    threads: usize,
) -> Duration {
    let start = Instant::now();
    let all_measured = || measured_threads.load(Ordering::Acquire) >= threads;
    if all_measured() {
        return Duration::ZERO;
    }
    while !all_measured()
        && phase.load(Ordering::Acquire) != PHASE_STOP
        && start.elapsed() < STALL_GRACE
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

fn sleep_unless_stopped(phase: &AtomicU8, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end && phase.load(Ordering::Acquire) != PHASE_STOP {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
}

/// What the coordinator and the threads of one point share: the phase, the start barrier, and
/// the count of threads that have completed a measured operation.
type Coordination<'a> = (&'a AtomicU8, &'a Barrier, &'a AtomicUsize);

#[allow(clippy::too_many_arguments)]
fn run_thread(
    config: &ThroughputConfig,
    point: Point,
    path: &Path,
    region_offset: u64,
    region: u64,
    cpu_id: usize,
    clock: &OpClock,
    (phase, ready, measured_threads): Coordination,
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
        measured_threads,
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
