//! What a throughput sweep measures (methods x block sizes x threads, on which targets, for how
//! long), checked before any file is touched.

use std::path::{Path, PathBuf};
use std::time::Duration;

use snbuf_persist::{Method, SyncMode};
use snbuf_platform::memory::PageSize;

use crate::error::BenchError;

/// Regions are multiples of this so every thread's region starts on a 2 MiB page and on any
/// direct-I/O alignment.
pub const REGION_ALIGN_BYTES: u64 = 2 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Write,
    Read,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::Write => "write",
            Direction::Read => "read",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    Seq,
    Rand,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Rand => "rand",
        }
    }
}

/// When a writer makes its data durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PersistEvery {
    /// After every block: each operation is "write this block durably" (the papers' request).
    Op,
    /// After at least this many bytes.
    Bytes(u64),
    /// Once, at the end of the point (inside the timed region): raw device speed, like fio's
    /// end_fsync=1.
    End,
}

impl PersistEvery {
    pub fn describe(self) -> String {
        match self {
            PersistEvery::Op => "op".into(),
            PersistEvery::Bytes(b) => b.to_string(),
            PersistEvery::End => "end".into(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ThroughputConfig {
    pub direction: Direction,
    pub methods: Vec<Method>,
    /// Directories (a temporary file is made in each) or files (used as they are).
    pub targets: Vec<PathBuf>,
    pub block_sizes_bytes: Vec<u64>,
    pub threads: Vec<usize>,
    pub pattern: Pattern,
    pub duration: Duration,
    pub warmup: Duration,
    pub page_size: PageSize,
    /// CPUs to pin thread i to (`cpus[i % len]`).
    pub cpus: Vec<usize>,
    pub region_bytes_per_thread: u64,
    pub queue_depth: u32,
    pub sync_mode: SyncMode,
    pub persist_every: PersistEvery,
    /// Time one operation in this many: 1 times every operation (default), N > 1 a random sample
    /// averaging one in N, 0 none (throughput only, like fio's gtod_reduce). Reading the clock
    /// costs ~10 ns, a few percent of a 256 B persist.
    pub latency_every: u32,
    /// Allow a target that is an existing, non-empty file: the benchmark overwrites it.
    pub overwrite: bool,
}

/// One (method, block size, threads) point of a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub method: Method,
    pub block_size_bytes: u64,
    pub threads: usize,
}

impl ThroughputConfig {
    /// Checks everything that can be checked before any file is touched.
    pub fn validate(&self) -> Result<(), BenchError> {
        let bad = |s: String| Err(BenchError::Config(s));
        if self.methods.is_empty() {
            return bad("no method given".into());
        }
        if self.targets.is_empty() {
            return bad("no target given".into());
        }
        if self.threads.is_empty() || self.threads.contains(&0) {
            return bad("thread counts must be at least 1".into());
        }
        if self.block_sizes_bytes.is_empty() || self.block_sizes_bytes.contains(&0) {
            return bad("block sizes must be at least 1 byte".into());
        }
        if self.duration.is_zero() {
            return bad("duration must be more than 0".into());
        }
        if self.queue_depth == 0 {
            return bad("queue depth must be at least 1".into());
        }
        if self.cpus.is_empty() {
            return bad("no CPU to run on".into());
        }
        if let PersistEvery::Bytes(0) = self.persist_every {
            return bad("--persist-every must be more than 0 bytes".into());
        }
        let region = self.region_bytes();
        for &b in &self.block_sizes_bytes {
            // Room for the largest padding (4 KiB alignment) and at least two blocks.
            if b.div_ceil(4096) * 4096 * 2 > region {
                return bad(format!(
                    "block size {b} B needs a region of at least {} B per thread (have {region} B)",
                    b.div_ceil(4096) * 4096 * 2
                ));
            }
            if b > u32::MAX as u64 {
                return bad(format!("block size {b} B is larger than one I/O can be"));
            }
        }
        for m in &self.methods {
            if !m.compiled_in() {
                return bad(format!(
                    "method {m} is not in this build of snbuf; rebuild with `--features {}` (needs libpmem-dev)",
                    m.capabilities().cargo_feature.unwrap_or("?")
                ));
            }
        }
        for t in &self.targets {
            check_target(t)?;
            // A benchmark overwrites its target: never a file that holds data, unless asked
            // (pointing it at a burst's link file by mistake would destroy a recording).
            if !self.overwrite && t.is_file() && t.metadata().map(|m| m.len() > 0).unwrap_or(false)
            {
                return Err(BenchError::Target {
                    path: t.clone(),
                    why: "exists and holds data, which the benchmark would overwrite; pass a directory, a new file, or --overwrite".into(),
                });
            }
        }
        self.check_free_space()
    }

    /// Refuses a sweep whose regions cannot fit in a target directory's free space, so a small
    /// file system gets advice instead of a failure in the middle of a sweep. (A full file system
    /// met later anyway is still reported as ENOSPC by the sink.)
    fn check_free_space(&self) -> Result<(), BenchError> {
        let max_threads = *self.threads.iter().max().unwrap_or(&1) as u64;
        let sharers = max_threads.div_ceil(self.targets.len() as u64);
        let needed = self.region_bytes() * sharers;
        for t in self.targets.iter().filter(|t| t.is_dir()) {
            if let Some(free) = snbuf_persist::medium::free_bytes(t) {
                if free < needed {
                    return Err(BenchError::Target {
                        path: t.clone(),
                        why: format!(
                            "has {} free, the sweep needs {} ({} per thread x {sharers}); lower --region",
                            snbuf_quantity::Bytes(free),
                            snbuf_quantity::Bytes(needed),
                            snbuf_quantity::Bytes(self.region_bytes())
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    pub fn region_bytes(&self) -> u64 {
        self.region_bytes_per_thread
            .max(1)
            .div_ceil(REGION_ALIGN_BYTES)
            * REGION_ALIGN_BYTES
    }

    /// The sweep in the order it runs: method, then block size, then threads.
    pub fn points(&self) -> Vec<Point> {
        let mut v = Vec::new();
        for &method in &self.methods {
            for &block_size_bytes in &self.block_sizes_bytes {
                for &threads in &self.threads {
                    v.push(Point {
                        method,
                        block_size_bytes,
                        threads,
                    });
                }
            }
        }
        v
    }
}

/// A target must be an existing directory, or a file (existing or not) in an existing directory.
fn check_target(t: &Path) -> Result<(), BenchError> {
    let err = |why: &str| BenchError::Target {
        path: t.to_path_buf(),
        why: why.to_string(),
    };
    if t.is_dir() {
        return Ok(());
    }
    if t.exists() && !t.is_file() {
        return Err(err("is neither a directory nor a regular file"));
    }
    let parent = match t.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(err("its directory does not exist"));
    }
    Ok(())
}
