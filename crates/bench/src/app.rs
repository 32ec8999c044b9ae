//! `snbuf bench app` (DUNE Figs 7 and 8): the DUNE-like application. N writer threads each copy
//! 5568 B frames (a ProtoDUNE WIB superchunk) from DRAM and make every one durable, through
//! each method (PMDK's `pmem_memcpy` among them when built), with all threads writing one shared
//! target, or each thread its own (the paper's interleaved and non-interleaved modules).
//!
//! It is the throughput engine of `bench write` (the same persistence code as the recorder) at
//! the application's block size; what it adds is the two layouts, and per-thread throughput
//! beside the total.

use std::path::PathBuf;
use std::time::Duration;

use snbuf_persist::{Method, PageSize, SyncMode};

use crate::clock::OpClock;
use crate::error::BenchError;
use crate::results::ThroughputResult;
use crate::throughput::{
    run_point, Direction, Pattern, PersistEvery, TargetFiles, ThroughputConfig,
};

/// The DUNE frame: a ProtoDUNE WIB superchunk.
pub const FRAME_BYTES: u64 = 5568;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Every thread writes its own region of one file.
    Shared,
    /// Each thread writes its own file (on real pmem: its own non-interleaved module).
    PerThread,
}

impl Layout {
    pub fn name(self) -> &'static str {
        match self {
            Layout::Shared => "shared",
            Layout::PerThread => "per-thread",
        }
    }
}

#[derive(Clone, Debug)]
pub struct AppConfig {
    /// One target; or, for the per-thread layout on real hardware, one per thread (used in turn).
    pub targets: Vec<PathBuf>,
    pub methods: Vec<Method>,
    pub threads: Vec<usize>,
    pub layouts: Vec<Layout>,
    pub duration: Duration,
    pub warmup: Duration,
    pub region_bytes_per_thread: u64,
    pub cpus: Vec<usize>,
    pub page_size: PageSize,
}

impl AppConfig {
    /// The write sweep for one layout.
    pub fn throughput_config(&self, layout: Layout) -> ThroughputConfig {
        let max_threads = self.threads.iter().copied().max().unwrap_or(1);
        let targets = match layout {
            Layout::Shared => vec![self.targets[0].clone()],
            // One file per thread: the given targets in turn (directories get a file each).
            Layout::PerThread => (0..max_threads)
                .map(|i| self.targets[i % self.targets.len()].clone())
                .collect(),
        };
        ThroughputConfig {
            direction: Direction::Write,
            methods: self.methods.clone(),
            targets,
            block_sizes_bytes: vec![FRAME_BYTES],
            threads: self.threads.clone(),
            pattern: Pattern::Seq,
            duration: self.duration,
            warmup: self.warmup,
            page_size: self.page_size,
            cpus: self.cpus.clone(),
            region_bytes_per_thread: self.region_bytes_per_thread,
            queue_depth: 32,
            sync_mode: SyncMode::Fdatasync,
            persist_every: PersistEvery::Op,
            latency_every: 0,
            overwrite: false,
        }
    }
}

/// Runs every layout x method x threads point; results have suite `app`, and `targets` says the
/// layout (1: shared). `progress` gets a label after each point.
/// Steps `run` reports progress for: each layout, method and thread count.
pub fn steps(config: &AppConfig) -> u64 {
    (config.layouts.len() * config.methods.len() * config.threads.len()) as u64
}

pub fn run(
    config: &AppConfig,
    clock: &OpClock,
    mut progress: impl FnMut(&str),
) -> Result<Vec<ThroughputResult>, BenchError> {
    if config.targets.is_empty() {
        return Err(BenchError::Config("no target given".into()));
    }
    let mut out = Vec::new();
    for &layout in &config.layouts {
        let tc = config.throughput_config(layout);
        tc.validate()?;
        let files = TargetFiles::prepare(&tc)?;
        for point in tc.points() {
            let mut r = run_point(&tc, &files, point, clock)?;
            r.suite = "app".into();
            if layout == Layout::PerThread {
                r.targets = point.threads;
            }
            r.notes.push(format!("layout: {}", layout.name()));
            out.push(r);
            progress(&format!(
                "app {} {} x{}",
                layout.name(),
                point.method,
                point.threads
            ));
        }
    }
    Ok(out)
}

/// The layout a result of `run` was measured with.
pub fn layout_of(r: &ThroughputResult) -> Layout {
    if r.notes.iter().any(|n| n == "layout: per-thread") {
        Layout::PerThread
    } else {
        Layout::Shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_layouts_run_and_per_thread_writes_one_file_per_thread() {
        let dir = tempfile::tempdir().unwrap();
        let config = AppConfig {
            targets: vec![dir.path().to_path_buf()],
            methods: vec![Method::Nt, Method::Buffered],
            threads: vec![1, 2],
            layouts: vec![Layout::Shared, Layout::PerThread],
            duration: Duration::from_millis(30),
            warmup: Duration::ZERO,
            region_bytes_per_thread: 4 << 20,
            cpus: snbuf_platform::cpu::allowed_cpus(),
            page_size: PageSize::Small4K,
        };
        assert_eq!(config.throughput_config(Layout::PerThread).targets.len(), 2);
        let clock = OpClock::calibrate(Duration::from_millis(5));
        let r = run(&config, &clock, |_| {}).unwrap();
        assert_eq!(r.len(), 2 * 2 * 2);
        for x in &r {
            assert_eq!(x.suite, "app");
            assert_eq!(x.block_size_bytes, FRAME_BYTES);
            assert!(x.ops > 0 && x.gib_per_s > 0.0, "{x:?}");
            // The threads ran: their clocks moved over the timed window.
            assert!(
                x.cpu_core_s_per_gib > 0.0 && x.cpu_core_s_per_gib.is_finite(),
                "{x:?}"
            );
            assert_eq!(x.per_thread_gib_per_s.len(), x.threads);
        }
        let per_thread: Vec<_> = r
            .iter()
            .filter(|x| layout_of(x) == Layout::PerThread && x.threads == 2)
            .collect();
        assert!(per_thread.iter().all(|x| x.targets == 2));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
