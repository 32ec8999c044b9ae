//! `snbuf bench paper`: every measurement of the three papers on one medium (or two, side by
//! side), into one results directory, with one progress bar and the time left; and
//! `snbuf report`, which turns that directory into figures and a report.
//!
//! Scales: the default takes about 3 minutes on a 2-core machine, `--quick` about 20 s. Both run
//! every suite through the same code as its own command; only sizes and durations shrink.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use snbuf_bench::app::{AppConfig, Layout};
use snbuf_bench::join::{JoinConfig, ALL_LOCKS};
use snbuf_bench::kernels::{KernelsConfig, ALL_KERNELS};
use snbuf_bench::latency::{LatencyConfig, Order, ALL_OPS};
use snbuf_bench::throughput::run_point;
use snbuf_bench::{
    Direction, Machine, OpClock, Pattern, PersistEvery, TargetFiles, ThroughputConfig,
    ThroughputResult,
};
use snbuf_persist::{cpu, medium, Method, PageSize, SyncMode};

use crate::cli::{PaperArgs, ReportArgs};
use crate::cmd_bench::default_region_bytes;
use crate::cmd_suites::{bar, save};
use crate::exit::usage;

/// How big each suite runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scale {
    Full,
    Quick,
    Smoke,
}

impl Scale {
    fn name(self) -> &'static str {
        match self {
            Scale::Full => "full",
            Scale::Quick => "quick",
            Scale::Smoke => "smoke",
        }
    }
}

/// The methods a target is measured with: the mapped ones on memory (DAX or tmpfs), O_DIRECT
/// and io_uring on a block device's file system.
fn methods_for(target: &Path) -> anyhow::Result<Vec<Method>> {
    let m = medium::probe(target).with_context(|| format!("probe {}", target.display()))?;
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

fn sweep(
    direction: Direction,
    target: &Path,
    methods: Vec<Method>,
    scale: Scale,
) -> ThroughputConfig {
    let cpus = cpu::allowed_cpus();
    let (blocks, duration, warmup, region): (Vec<u64>, u64, u64, u64) = match scale {
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
        duration: Duration::from_millis(duration),
        warmup: Duration::from_millis(warmup),
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
struct Plan {
    write: ThroughputConfig,
    read: ThroughputConfig,
    second: Option<(ThroughputConfig, ThroughputConfig)>,
    latency: LatencyConfig,
    join_dram: JoinConfig,
    join_target: JoinConfig,
    kernels: KernelsConfig,
    app: AppConfig,
}

impl Plan {
    fn new(args: &PaperArgs, scale: Scale) -> anyhow::Result<Plan> {
        let t = &args.target;
        let methods = methods_for(t)?;
        let write = sweep(Direction::Write, t, methods.clone(), scale);
        // Reads through the first method of each kind (pmdk reads as nt does).
        let read_methods: Vec<Method> = methods
            .iter()
            .copied()
            .filter(|m| *m != Method::Pmdk && *m != Method::Clwb)
            .collect();
        let read = sweep(Direction::Read, t, read_methods, scale);
        let second = match &args.second_target {
            Some(s) => {
                let m = methods_for(s)?;
                let rm: Vec<Method> = m
                    .iter()
                    .copied()
                    .filter(|m| *m != Method::Pmdk && *m != Method::Clwb)
                    .collect();
                Some((
                    sweep(Direction::Write, s, m, scale),
                    sweep(Direction::Read, s, rm, scale),
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
        let app_methods: Vec<Method> = methods
            .iter()
            .copied()
            .filter(|m| *m != Method::Clwb)
            .collect();
        Ok(Plan {
            write,
            read,
            second,
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
                targets: vec![t.clone()],
                methods: app_methods,
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
        })
    }

    fn steps(&self) -> u64 {
        let sweeps = self.write.points().len()
            + self.read.points().len()
            + self
                .second
                .as_ref()
                .map(|(w, r)| w.points().len() + r.points().len())
                .unwrap_or(0);
        sweeps as u64
            + crate::cmd_suites::latency_steps(&self.latency)
            + crate::cmd_suites::join_steps(&self.join_dram)
            + crate::cmd_suites::join_steps(&self.join_target)
            + crate::cmd_suites::kernels_steps(&self.kernels)
            + crate::cmd_suites::app_steps(&self.app)
    }
}

pub fn run(args: PaperArgs) -> anyhow::Result<()> {
    let scale = if args.smoke {
        Scale::Smoke
    } else if args.quick {
        Scale::Quick
    } else {
        Scale::Full
    };
    for (flag, t) in [
        ("--target", Some(&args.target)),
        ("--second-target", args.second_target.as_ref()),
    ] {
        if let Some(t) = t {
            if !t.is_dir() {
                return Err(usage(format!("{flag} {}: not a directory", t.display())));
            }
        }
    }
    if args.out.exists()
        && std::fs::read_dir(&args.out)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        return Err(usage(format!(
            "--out {}: exists and is not empty; results are never mixed with others",
            args.out.display()
        )));
    }
    let plan = Plan::new(&args, scale)?;
    for c in [Some(&plan.write), Some(&plan.read)]
        .into_iter()
        .chain(plan.second.iter().flat_map(|(w, r)| [Some(w), Some(r)]))
        .flatten()
    {
        c.validate().map_err(|e| usage(e.to_string()))?;
    }
    std::fs::create_dir_all(&args.out).with_context(|| format!("create {}", args.out.display()))?;
    let clock = OpClock::calibrate(Duration::from_millis(50));
    let mut paths: Vec<&Path> = vec![&args.target];
    if let Some(s) = &args.second_target {
        paths.push(s);
    }
    let machine = Machine::probe(&paths, clock.describe(), env!("SNBUF_GIT_COMMIT"));
    eprintln!(
        "snbuf bench paper ({} scale{}): {} on {}; results in {}",
        scale.name(),
        match scale {
            Scale::Full => ", about 3 minutes on a 2-core machine",
            Scale::Quick => ", about 20 s on a 2-core machine",
            Scale::Smoke => "",
        },
        args.target.display(),
        machine.cpu_model,
        args.out.display()
    );
    let mut notes: Vec<String> = Vec::new();
    if !Method::Pmdk.compiled_in() {
        notes.push(
            "PMDK is not in this build: the app and sweeps run without it (Fig 7 shows one side); \
             build with `--features pmdk` (needs libpmem-dev) for the comparison"
                .into(),
        );
    }
    for n in &notes {
        eprintln!("  note: {n}");
    }
    let started = Instant::now();
    let b = bar(plan.steps());
    let out = |f: &str| args.out.join(f);

    let sweep_file = |name: &str, c: &ThroughputConfig| -> anyhow::Result<()> {
        let files = TargetFiles::prepare(c).map_err(|e| usage(e.to_string()))?;
        let mut results: Vec<ThroughputResult> = Vec::new();
        for p in c.points() {
            b.set_message(format!(
                "{name}: {} {} B x{}",
                p.method, p.block_size_bytes, p.threads
            ));
            results.push(run_point(c, &files, p, &clock)?);
            b.inc(1);
        }
        save(&out(&format!("{name}.json")), name, &machine, &results)
    };
    sweep_file("write", &plan.write)?;
    sweep_file("read", &plan.read)?;
    if let Some((w, r)) = &plan.second {
        sweep_file("write-second", w)?;
        sweep_file("read-second", r)?;
    }
    let lat = crate::cmd_suites::run_latency(&plan.latency, &clock, &b)?;
    save(&out("latency.json"), "latency", &machine, &lat)?;
    let mut join = crate::cmd_suites::run_join(&plan.join_dram, &b)?;
    join.extend(crate::cmd_suites::run_join(&plan.join_target, &b)?);
    save(&out("join.json"), "join", &machine, &join)?;
    let ker = crate::cmd_suites::run_kernels(&plan.kernels, &b)?;
    save(&out("kernels.json"), "kernels", &machine, &ker)?;
    let app = crate::cmd_suites::run_app(&plan.app, &clock, &b)?;
    save(&out("app.json"), "app", &machine, &app)?;
    b.finish_and_clear();

    let seconds = started.elapsed().as_secs_f64();
    let meta = serde_json::json!({
        "schema_version": snbuf_bench::results::SCHEMA_VERSION,
        "suite": "paper",
        "scale": scale.name(),
        "target": args.target,
        "second_target": args.second_target,
        "seconds": (seconds * 10.0).round() / 10.0,
        "notes": notes,
        "files": snbuf_report::SUITE_FILES.iter().map(|(_, f)| f).filter(|f| out(f).exists()).collect::<Vec<_>>(),
    });
    std::fs::write(
        out("paper.json"),
        serde_json::to_string_pretty(&meta)? + "\n",
    )
    .with_context(|| format!("write {}", out("paper.json").display()))?;
    let wrong =
        join.iter().filter(|r| !r.verified).count() + ker.iter().filter(|r| !r.verified).count();
    println!(
        "wrote {} in {:.0} s; next: snbuf report {} --out snbuf-report",
        args.out.display(),
        seconds,
        args.out.display()
    );
    if wrong > 0 {
        return Err(anyhow::anyhow!(
            "{wrong} result(s) failed their check (see the notes in the JSON)"
        ));
    }
    Ok(())
}

pub fn report(args: &ReportArgs) -> anyhow::Result<()> {
    let r = snbuf_report::build(&args.results, &args.out).map_err(|e| match e {
        snbuf_report::ReportError::Empty(_) | snbuf_report::ReportError::Parse(..) => {
            usage(e.to_string())
        }
        snbuf_report::ReportError::Io(ref p, ref io)
            if p == &args.results && io.kind() == std::io::ErrorKind::NotFound =>
        {
            usage(e.to_string())
        }
        other => anyhow::Error::new(other),
    })?;
    println!(
        "wrote {} figures (SVG and PNG), {} and {}",
        r.figures.len(),
        r.markdown.display(),
        r.html.display()
    );
    for f in &r.findings {
        println!("check: {f}");
    }
    Ok(())
}
