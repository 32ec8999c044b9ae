//! `snbuf bench latency|join|kernels|app`: the papers' other measurements, each with a progress
//! bar, a table in human units, and JSON on request. `bench paper` runs them through the same
//! `run_*` functions.

use snbuf_console::note;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::app::{self, AppConfig, Layout};
use crate::defaults::{default_app_methods, default_region_bytes, default_target, default_threads};
use crate::join::{self, JoinConfig, JoinResult, LockKind, ALL_LOCKS};
use crate::kernels::{self, Kernel, KernelResult, KernelsConfig, ALL_KERNELS};
use crate::latency::{self, LatencyConfig, LatencyResult, Order, ALL_OPS};
use crate::{Machine, OpClock, ThroughputResult};
use anyhow::Context;
use snbuf_persist::{Method, PageSize};
use snbuf_platform::cpu;
use snbuf_quantity::{Bytes, Nanos, Rate};

use super::args::{AppArgs, JoinArgs, KernelsArgs, LatencyArgs};
use super::runner::{no_notes, run_suite, Suite};
use snbuf_console::usage;
use snbuf_console::Table;

fn check_target(t: &Path) -> anyhow::Result<()> {
    if t.is_dir()
        || t.parent()
            .is_some_and(|p| p.as_os_str().is_empty() || p.is_dir())
    {
        Ok(())
    } else {
        Err(usage(format!(
            "--target {}: not a directory, and its directory does not exist",
            t.display()
        )))
    }
}

fn page_size(bytes: u64) -> PageSize {
    PageSize::from_bytes(bytes).expect("clap accepts only 4KiB or 2MiB")
}

fn machine_for(targets: &[&Path], clock: &OpClock) -> Machine {
    Machine::probe(targets, clock.describe(), env!("SNBUF_GIT_COMMIT"))
}

// --- latency -------------------------------------------------------------------------------

pub fn latency_config(args: &LatencyArgs) -> anyhow::Result<LatencyConfig> {
    if !args.access_size.is_multiple_of(64) {
        return Err(usage(format!(
            "--access-size {}: must be a multiple of 64 B (whole cache lines)",
            args.access_size
        )));
    }
    let target = args.target.clone().unwrap_or_else(default_target);
    check_target(&target)?;
    Ok(LatencyConfig {
        target: Some(target),
        region_bytes: args.region.unwrap_or_else(default_region_bytes),
        access_bytes: args.access_size as usize,
        samples: args.samples.max(1),
        ops: ALL_OPS.to_vec(),
        orders: vec![Order::Seq, Order::Rand],
        page_size: page_size(args.page_size),
    })
}

pub fn latency(args: LatencyArgs) -> anyhow::Result<()> {
    let config = latency_config(&args)?;
    let clock = OpClock::calibrate(Duration::from_millis(50));
    let target = config.target.clone().expect("set above");
    let machine = machine_for(&[&target], &clock);
    note!(
        "snbuf bench latency: {} B accesses over {} of DRAM and of {}; TSC {}",
        config.access_bytes,
        Bytes(config.region_bytes),
        target.display(),
        clock
            .tsc_hz()
            .map(|h| format!("{:.3} GHz (calibrated)", h / 1e9))
            .unwrap_or_else(|| "not invariant: CLOCK_MONOTONIC".into())
    );
    let suite = Suite {
        name: "latency",
        steps: latency::steps(&config),
        machine: &machine,
        json: args.json.as_deref(),
        render: render_latency,
        notes: |r: &LatencyResult| &r.notes,
        verified: None,
        also: None,
    };
    run_suite(suite, |step, out| {
        out.extend(latency::run(&config, &clock, step).context("bench latency")?);
        Ok(())
    })?;
    Ok(())
}

pub fn render_latency(results: &[LatencyResult]) -> String {
    let mut t = Table::new(&[
        ("medium", false),
        ("order", false),
        ("operation", false),
        ("p50", true),
        ("p99", true),
        ("p50 cycles", true),
        ("throughput", true),
    ]);
    for r in results {
        t.row(vec![
            r.medium.clone(),
            format!("{:?}", r.order).to_lowercase(),
            r.op.clone(),
            Nanos(r.latency_ns.p50).to_string(),
            Nanos(r.latency_ns.p99).to_string(),
            r.latency_cycles.p50.to_string(),
            Rate(r.throughput_gb_per_s * 1e9).to_string(),
        ]);
    }
    t.render()
}

// --- join ----------------------------------------------------------------------------------

fn threads_or_default(threads: &[usize]) -> Vec<usize> {
    if threads.is_empty() {
        default_threads()
    } else {
        threads.to_vec()
    }
}

pub fn join_config(args: &JoinArgs) -> anyhow::Result<JoinConfig> {
    let locks = if args.locks.is_empty() {
        ALL_LOCKS.to_vec()
    } else {
        args.locks
            .iter()
            .map(|l| {
                ALL_LOCKS
                    .iter()
                    .copied()
                    .find(|k| k.name() == l.trim())
                    .ok_or_else(|| {
                        usage(format!(
                            "unknown lock '{l}' (pthread_spinlock, pthread_mutex, test_and_set, add_fetch_pause)"
                        ))
                    })
            })
            .collect::<anyhow::Result<Vec<LockKind>>>()?
    };
    let target = if args.table_on == "target" {
        let t = args.target.clone().unwrap_or_else(default_target);
        check_target(&t)?;
        Some(t)
    } else {
        None
    };
    Ok(JoinConfig {
        r_rows: args.r_rows,
        s_rows: args.s_rows,
        threads: threads_or_default(&args.threads),
        locks,
        target,
        page_size: page_size(args.page_size),
    })
}

pub fn join(args: JoinArgs) -> anyhow::Result<()> {
    let config = join_config(&args)?;
    let clock = OpClock::calibrate(Duration::from_millis(20));
    let where_ = config.target.clone().unwrap_or_else(default_target);
    let machine = machine_for(&[&where_], &clock);
    note!(
        "snbuf bench join: R {} rows, S {} rows, table in {}",
        config.r_rows,
        config.s_rows,
        config
            .target
            .as_ref()
            .map(|t| t.display().to_string())
            .unwrap_or_else(|| "DRAM".into())
    );
    let suite = Suite {
        name: "join",
        steps: join::steps(&config),
        machine: &machine,
        json: args.json.as_deref(),
        render: render_join,
        notes: |r: &JoinResult| &r.notes,
        verified: Some((|r: &JoinResult| r.verified, "the join gave a wrong result")),
        also: None,
    };
    run_suite(suite, |step, out| {
        out.extend(join::run(&config, step).context("bench join")?);
        Ok(())
    })?;
    Ok(())
}

pub fn render_join(results: &[JoinResult]) -> String {
    let mut t = Table::new(&[
        ("phase", false),
        ("lock", false),
        ("thr", true),
        ("table in", false),
        ("M tuples/s", true),
        ("checked", false),
    ]);
    for r in results {
        t.row(vec![
            r.phase.clone(),
            r.lock.map(|l| l.name()).unwrap_or("-").to_string(),
            r.threads.to_string(),
            r.placement.clone(),
            format!("{:.2}", r.mtuples_per_s),
            if r.verified { "ok" } else { "WRONG" }.to_string(),
        ]);
    }
    t.render()
}

// --- kernels -------------------------------------------------------------------------------

pub fn kernels_config(args: &KernelsArgs) -> anyhow::Result<KernelsConfig> {
    let kernels = if args.kernels.is_empty() {
        ALL_KERNELS.to_vec()
    } else {
        args.kernels
            .iter()
            .map(|k| {
                ALL_KERNELS
                    .iter()
                    .copied()
                    .find(|x| x.name() == k.trim())
                    .ok_or_else(|| {
                        usage(format!(
                            "unknown kernel '{k}' (gemm, 2mm, atax, mvt, jacobi-2d)"
                        ))
                    })
            })
            .collect::<anyhow::Result<Vec<Kernel>>>()?
    };
    if args.n.is_some_and(|n| n < 8) {
        return Err(usage("--n must be at least 8"));
    }
    // An n the machine cannot hold is refused here, not met as an aborted allocation.
    if let Some(n) = args.n {
        let available = snbuf_persist::medium::memory_available_bytes();
        for k in &kernels {
            let need = k.bytes_at(n);
            if need.is_none_or(|b| available.is_some_and(|a| b > a)) {
                return Err(usage(format!(
                    "--n {n}: {} needs {} of memory at that size, {} available",
                    k.name(),
                    need.map_or("more than 16 EiB".into(), |b| Bytes(b).to_string()),
                    available.map_or("?".into(), |a| Bytes(a).to_string())
                )));
            }
        }
    }
    let target = args.target.clone().unwrap_or_else(default_target);
    check_target(&target)?;
    Ok(KernelsConfig {
        kernels,
        n: args.n,
        scale_down: 1,
        target: Some(target),
        page_sizes: args.page_sizes.iter().map(|&b| page_size(b)).collect(),
    })
}

pub fn kernels(args: KernelsArgs) -> anyhow::Result<()> {
    let config = kernels_config(&args)?;
    let clock = OpClock::calibrate(Duration::from_millis(20));
    let target = config.target.clone().expect("set above");
    let machine = machine_for(&[&target], &clock);
    note!(
        "snbuf bench kernels: {} in DRAM and on {}",
        config
            .kernels
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", "),
        target.display()
    );
    let suite = Suite {
        name: "kernels",
        steps: kernels::steps(&config),
        machine: &machine,
        json: args.json.as_deref(),
        render: render_kernels,
        notes: |r: &KernelResult| &r.notes,
        verified: Some((
            |r: &KernelResult| r.verified,
            "a kernel gave a wrong result",
        )),
        also: None,
    };
    run_suite(suite, |step, out| {
        out.extend(kernels::run(&config, step).context("bench kernels")?);
        Ok(())
    })?;
    Ok(())
}

pub fn render_kernels(results: &[KernelResult]) -> String {
    let mut t = Table::new(&[
        ("kernel", false),
        ("n", true),
        ("arrays in", false),
        ("pages asked", true),
        ("pages got", true),
        ("time", true),
        ("GFLOP/s", true),
        ("checked", false),
    ]);
    for r in results {
        t.row(vec![
            r.kernel.clone(),
            r.n.to_string(),
            r.placement.clone(),
            Bytes(r.page_size_bytes).to_string(),
            r.page_size_obtained_bytes
                .map(|b| Bytes(b).to_string())
                .unwrap_or_else(|| "?".into()),
            Nanos((r.seconds * 1e9) as u64).to_string(),
            format!("{:.2}", r.gflops),
            if r.verified { "ok" } else { "WRONG" }.to_string(),
        ]);
    }
    t.render()
}

// --- app -----------------------------------------------------------------------------------

pub fn app_config(args: &AppArgs) -> anyhow::Result<AppConfig> {
    let methods = if args.methods.is_empty() {
        default_app_methods()
    } else {
        args.methods
            .iter()
            .map(|m| m.parse::<Method>().map_err(|e| usage(e.to_string())))
            .collect::<anyhow::Result<Vec<_>>>()?
    };
    let targets: Vec<PathBuf> = if args.targets.is_empty() {
        vec![default_target()]
    } else {
        args.targets.clone()
    };
    for t in &targets {
        if !t.is_dir() {
            return Err(usage(format!("--target {}: not a directory", t.display())));
        }
    }
    let config = AppConfig {
        targets,
        methods,
        threads: threads_or_default(&args.threads),
        layouts: vec![Layout::Shared, Layout::PerThread],
        duration: args.duration,
        warmup: Duration::from_millis(300),
        region_bytes_per_thread: args.region,
        cpus: cpu::allowed_cpus(),
        page_size: PageSize::Small4K,
    };
    for layout in &config.layouts {
        config
            .throughput_config(*layout)
            .validate()
            .map_err(|e| usage(e.to_string()))?;
    }
    Ok(config)
}

pub fn app(args: AppArgs) -> anyhow::Result<()> {
    let config = app_config(&args)?;
    let clock = OpClock::calibrate(Duration::from_millis(50));
    let paths: Vec<&Path> = config.targets.iter().map(|t| t.as_path()).collect();
    let machine = machine_for(&paths, &clock);
    note!(
        "snbuf bench app: 5568 B frames, methods {}, threads {:?}, shared and per-thread targets",
        config
            .methods
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(","),
        config.threads
    );
    let suite = Suite {
        name: "app",
        steps: app::steps(&config),
        machine: &machine,
        json: args.json.as_deref(),
        render: render_app,
        notes: no_notes,
        verified: None,
        also: None,
    };
    run_suite(suite, |step, out| {
        out.extend(app::run(&config, &clock, step).context("bench app")?);
        Ok(())
    })?;
    Ok(())
}

pub fn render_app(results: &[ThroughputResult]) -> String {
    let mut t = Table::new(&[
        ("layout", false),
        ("method", false),
        ("thr", true),
        ("total", true),
        ("per thread", true),
        ("durability", false),
    ]);
    for r in results {
        t.row(vec![
            app::layout_of(r).name().to_string(),
            r.method.clone(),
            r.threads.to_string(),
            Rate(r.gib_per_s * (1u64 << 30) as f64).to_string(),
            Rate(r.gib_per_s * (1u64 << 30) as f64 / r.threads as f64).to_string(),
            r.durability.clone(),
        ]);
    }
    t.render()
}
