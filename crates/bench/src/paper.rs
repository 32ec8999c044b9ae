//! `snbuf bench paper`: every measurement of the three papers on one medium (or two, side by
//! side), into one results directory that `snbuf report` turns into figures.
//!
//! Scales: the default takes about 3 minutes on a 2-core machine, `Quick` about 20 s. Both run
//! every suite through the same code as its own command; only sizes and durations shrink.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use snbuf_persist::{medium, Method, PageSize, SyncMode};
use snbuf_platform::cpu;

use crate::app::{AppConfig, Layout};
use crate::defaults::default_region_bytes;
use crate::error::BenchError;
use crate::join::{JoinConfig, ALL_LOCKS};
use crate::kernels::{KernelsConfig, ALL_KERNELS};
use crate::latency::{LatencyConfig, Order, ALL_OPS};
use crate::results::{save, ThroughputResult, SCHEMA_VERSION};
use crate::throughput::{
    run_point, Direction, Pattern, PersistEvery, TargetFiles, ThroughputConfig,
};
use crate::{app, join, kernels, latency, Machine, OpClock};

/// How big each suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Full,
    Quick,
    /// For tests: tiny sizes, a few seconds in all; the figures mean nothing.
    Smoke,
}

impl Scale {
    pub fn name(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
            Scale::Smoke => "smoke",
        }
    }

    /// How long it takes on the 2-core development machine.
    pub fn about(self) -> &'static str {
        match self {
            Scale::Full => "about 3 minutes on a 2-core machine",
            Scale::Quick => "about 20 s on a 2-core machine",
            Scale::Smoke => "a few seconds",
        }
    }
}

/// The methods a target is measured with: the mapped ones on memory (DAX or tmpfs), O_DIRECT
/// and io_uring on a block device's file system.
fn methods_for(target: &Path) -> Result<Vec<Method>, BenchError> {
    let m = medium::probe(target).map_err(|e| BenchError::Target {
        path: target.to_path_buf(),
        why: format!("cannot probe it: {e}"),
    })?;
    Ok(if m.dax || m.volatile {
        let mut v = vec![Method::Nt, Method::Clwb];
        if Method::Pmdk.compiled_in() {
            v.push(Method::Pmdk);
        }
        v
    } else {
        vec![Method::Direct, Method::Uring]
    })
}

/// Reads through the first method of each kind (pmdk reads as nt does).
fn read_methods(methods: &[Method]) -> Vec<Method> {
    methods
        .iter()
        .copied()
        .filter(|m| *m != Method::Pmdk && *m != Method::Clwb)
        .collect()
}

fn sweep(
    direction: Direction,
    target: &Path,
    methods: Vec<Method>,
    scale: Scale,
) -> ThroughputConfig {
    let cpus = cpu::allowed_cpus();
    let (blocks, duration_ms, warmup_ms, region): (Vec<u64>, u64, u64, u64) = match scale {
        Scale::Full => (
            vec![256, 4096, 5568, 64 << 10, 1 << 20],
            1000,
            200,
            default_region_bytes().min(512 << 20),
        ),
        Scale::Quick => (vec![4096, 1 << 20], 200, 50, 64 << 20),
        Scale::Smoke => (vec![4096, 1 << 20], 20, 0, 8 << 20),
    };
    let max = cpus.len();
    ThroughputConfig {
        direction,
        methods,
        targets: vec![target.to_path_buf()],
        block_sizes_bytes: blocks,
        // One thread and all of them (the same on one CPU) below full scale.
        threads: if scale == Scale::Full || max <= 2 {
            (1..=max).collect()
        } else {
            vec![1, max]
        },
        pattern: Pattern::Seq,
        duration: Duration::from_millis(duration_ms),
        warmup: Duration::from_millis(warmup_ms),
        page_size: PageSize::Small4K,
        cpus,
        region_bytes_per_thread: region,
        queue_depth: 32,
        sync_mode: SyncMode::Fdatasync,
        persist_every: PersistEvery::Op,
        latency_every: 1,
        overwrite: false,
    }
}

/// Everything a paper run does, sized.
pub struct Plan {
    pub scale: Scale,
    pub target: PathBuf,
    pub second_target: Option<PathBuf>,
    write: ThroughputConfig,
    read: ThroughputConfig,
    second: Option<(ThroughputConfig, ThroughputConfig)>,
    latency: LatencyConfig,
    join_dram: JoinConfig,
    join_target: JoinConfig,
    kernels: KernelsConfig,
    app: AppConfig,
}

/// What a paper run came to.
pub struct PaperRun {
    pub seconds: f64,
    /// The results files written, in the results directory.
    pub files: Vec<String>,
    /// Results that failed their own check (a wrong join, a kernel off its reference).
    pub wrong: usize,
}

impl Plan {
    pub fn new(
        target: &Path,
        second_target: Option<&Path>,
        scale: Scale,
    ) -> Result<Plan, BenchError> {
        let methods = methods_for(target)?;
        let write = sweep(Direction::Write, target, methods.clone(), scale);
        let read = sweep(Direction::Read, target, read_methods(&methods), scale);
        let second = match second_target {
            Some(s) => {
                let m = methods_for(s)?;
                Some((
                    sweep(Direction::Write, s, m.clone(), scale),
                    sweep(Direction::Read, s, read_methods(&m), scale),
                ))
            }
            None => None,
        };
        let threads: Vec<usize> = write.threads.clone();
        let (lat_region, samples, r_rows, s_rows, kernel_scale, app_ms) = match scale {
            Scale::Full => (
                default_region_bytes().min(1 << 30),
                100_000,
                1_000_000,
                4_000_000,
                1,
                1000,
            ),
            Scale::Quick => (128 << 20, 10_000, 200_000, 800_000, 4, 200),
            Scale::Smoke => (4 << 20, 500, 5_000, 20_000, 64, 20),
        };
        let join = |target: Option<PathBuf>| JoinConfig {
            r_rows,
            s_rows,
            threads: threads.clone(),
            locks: ALL_LOCKS.to_vec(),
            target,
            page_size: PageSize::Small4K,
        };
        let t = target.to_path_buf();
        let plan = Plan {
            scale,
            target: t.clone(),
            second_target: second_target.map(Path::to_path_buf),
            latency: LatencyConfig {
                target: Some(t.clone()),
                region_bytes: lat_region,
                access_bytes: 64,
                samples,
                ops: ALL_OPS.to_vec(),
                orders: vec![Order::Seq, Order::Rand],
                page_size: PageSize::Small4K,
            },
            join_dram: join(None),
            join_target: join(Some(t.clone())),
            kernels: KernelsConfig {
                kernels: ALL_KERNELS.to_vec(),
                n: None,
                scale_down: kernel_scale,
                target: Some(t.clone()),
                page_sizes: vec![PageSize::Small4K, PageSize::Huge2M],
            },
            app: AppConfig {
                targets: vec![t],
                methods: methods
                    .iter()
                    .copied()
                    .filter(|m| *m != Method::Clwb)
                    .collect(),
                threads,
                layouts: vec![Layout::Shared, Layout::PerThread],
                duration: Duration::from_millis(app_ms),
                warmup: Duration::from_millis(app_ms / 5),
                region_bytes_per_thread: match scale {
                    Scale::Full => 256 << 20,
                    Scale::Quick => 64 << 20,
                    Scale::Smoke => 8 << 20,
                },
                cpus: cpu::allowed_cpus(),
                page_size: PageSize::Small4K,
            },
            write,
            read,
            second,
        };
        plan.sweeps().try_for_each(|c| c.validate())?;
        Ok(plan)
    }

    fn sweeps(&self) -> impl Iterator<Item = &ThroughputConfig> {
        [&self.write, &self.read]
            .into_iter()
            .chain(self.second.iter().flat_map(|(w, r)| [w, r]))
    }

    /// Steps the run reports progress for.
    pub fn steps(&self) -> u64 {
        self.sweeps().map(|c| c.points().len() as u64).sum::<u64>()
            + latency::steps(&self.latency)
            + join::steps(&self.join_dram)
            + join::steps(&self.join_target)
            + kernels::steps(&self.kernels)
            + app::steps(&self.app)
    }

    /// Runs every suite into `out` (an existing, empty directory), calling `progress` with a
    /// label once per step.
    pub fn run(
        &self,
        out: &Path,
        clock: &OpClock,
        machine: &Machine,
        progress: &mut dyn FnMut(&str),
    ) -> Result<PaperRun, BenchError> {
        let started = Instant::now();
        let mut files = Vec::new();
        let mut sweep = |name: &str, c: &ThroughputConfig, files: &mut Vec<String>| {
            let targets = TargetFiles::prepare(c)?;
            let mut results: Vec<ThroughputResult> = Vec::new();
            for p in c.points() {
                progress(&format!(
                    "{name}: {} {} B x{}",
                    p.method, p.block_size_bytes, p.threads
                ));
                results.push(run_point(c, &targets, p, clock)?);
            }
            save_into(out, files, name, machine, &results)
        };
        sweep("write", &self.write, &mut files)?;
        sweep("read", &self.read, &mut files)?;
        if let Some((w, r)) = &self.second {
            sweep("write-second", w, &mut files)?;
            sweep("read-second", r, &mut files)?;
        }
        let suite = |suite: &'static str| move |cause| BenchError::Suite { suite, cause };
        let lat = latency::run(&self.latency, clock, &mut *progress).map_err(suite("latency"))?;
        save_into(out, &mut files, "latency", machine, &lat)?;
        let mut joins = join::run(&self.join_dram, &mut *progress).map_err(suite("join"))?;
        joins.extend(join::run(&self.join_target, &mut *progress).map_err(suite("join"))?);
        save_into(out, &mut files, "join", machine, &joins)?;
        let kers = kernels::run(&self.kernels, &mut *progress).map_err(suite("kernels"))?;
        save_into(out, &mut files, "kernels", machine, &kers)?;
        let app = app::run(&self.app, clock, &mut *progress)?;
        save_into(out, &mut files, "app", machine, &app)?;
        let wrong = joins.iter().filter(|r| !r.verified).count()
            + kers.iter().filter(|r| !r.verified).count();
        Ok(PaperRun {
            seconds: started.elapsed().as_secs_f64(),
            files,
            wrong,
        })
    }

    /// What the run was, for `paper.json`.
    pub fn describe(&self, run: &PaperRun, notes: &[String]) -> PaperRecord {
        PaperRecord {
            schema_version: SCHEMA_VERSION,
            suite: "paper".into(),
            scale: self.scale.name().into(),
            target: Some(self.target.clone()),
            second_target: self.second_target.clone(),
            seconds: (run.seconds * 10.0).round() / 10.0,
            notes: notes.to_vec(),
            files: run.files.clone(),
        }
    }
}

/// `paper.json`: what a paper run was (its scale, targets and time) and the files it wrote.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PaperRecord {
    pub schema_version: u32,
    /// Always `paper`.
    pub suite: String,
    /// `full`, `quick` or `smoke`.
    pub scale: String,
    pub target: Option<PathBuf>,
    pub second_target: Option<PathBuf>,
    /// The run's wall time, to a tenth of a second.
    pub seconds: f64,
    pub notes: Vec<String>,
    /// The results files written, in the results directory.
    pub files: Vec<String>,
}

/// Saves one suite's results as `<name>.json` in `out` and notes the file.
fn save_into<R: serde::Serialize + Clone>(
    out: &Path,
    files: &mut Vec<String>,
    name: &str,
    machine: &Machine,
    results: &[R],
) -> Result<(), BenchError> {
    let file = format!("{name}.json");
    save(&out.join(&file), name, machine, results)?;
    files.push(file);
    Ok(())
}
