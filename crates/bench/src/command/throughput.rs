//! `snbuf bench write|read`: runs a throughput sweep with a progress bar, prints a table in
//! human units, and exports JSON/CSV on request.

use snbuf_console::note;
use std::time::Duration;

use crate::defaults::{default_region_bytes, default_target};
use crate::results::write_throughput_csv;
use crate::throughput::run_point;
use crate::{
    BenchError, Direction, Machine, OpClock, Pattern, PersistEvery, TargetFiles, ThroughputConfig,
    ThroughputResult,
};
use anyhow::Context;
use snbuf_persist::{Method, PageSize, SyncMode};
use snbuf_platform::cpu;
use snbuf_quantity::{Bytes, Count, Nanos, Rate};

use super::args::{PatternArg, SyncArg, ThroughputArgs};
use super::runner::{run_suite, Suite};
use snbuf_console::usage;
use snbuf_console::Table;

fn parse_persist_every(s: &str) -> anyhow::Result<PersistEvery> {
    match s.trim() {
        "op" => Ok(PersistEvery::Op),
        "end" => Ok(PersistEvery::End),
        other => match snbuf_quantity::parse_bytes(other) {
            Ok(0) => Err(usage("--persist-every must be more than 0 bytes")),
            Ok(n) => Ok(PersistEvery::Bytes(n)),
            Err(_) => Err(usage(format!(
                "--persist-every '{other}': expected op, end, or a size such as 1MiB"
            ))),
        },
    }
}

pub fn config_from_args(
    direction: Direction,
    args: &ThroughputArgs,
) -> anyhow::Result<ThroughputConfig> {
    let methods = args
        .methods
        .iter()
        .map(|m| m.parse::<Method>().map_err(|e| usage(e.to_string())))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cpus = match &args.cpus {
        Some(list) => {
            let cpus = cpu::parse_cpu_list(list).map_err(|e| usage(e.to_string()))?;
            let allowed = cpu::allowed_cpus();
            if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
                return Err(usage(format!(
                    "--cpus: CPU {bad} is not available to this process (allowed: {allowed:?})"
                )));
            }
            cpus
        }
        None => cpu::allowed_cpus(),
    };
    let threads = if args.threads.is_empty() {
        (1..=cpus.len()).collect()
    } else {
        args.threads.clone()
    };
    let config = ThroughputConfig {
        direction,
        methods,
        targets: if args.targets.is_empty() {
            vec![default_target()]
        } else {
            args.targets.clone()
        },
        block_sizes_bytes: args.block_sizes.clone(),
        threads,
        pattern: match args.pattern {
            PatternArg::Seq => Pattern::Seq,
            PatternArg::Rand => Pattern::Rand,
        },
        duration: args.duration,
        warmup: args.warmup,
        page_size: PageSize::from_bytes(args.page_size).expect("clap accepts only 4KiB or 2MiB"),
        cpus,
        region_bytes_per_thread: args.region.unwrap_or_else(default_region_bytes),
        queue_depth: args.queue_depth,
        sync_mode: match args.sync {
            SyncArg::Fdatasync => SyncMode::Fdatasync,
            SyncArg::Dsync => SyncMode::Dsync,
        },
        persist_every: parse_persist_every(&args.persist_every)?,
        latency_every: args.latency_every,
        overwrite: args.overwrite,
    };
    config.validate().map_err(|e| match e {
        BenchError::Config(_) | BenchError::Target { .. } => usage(e.to_string()),
        other => anyhow::Error::new(other),
    })?;
    Ok(config)
}

pub fn throughput(direction: Direction, args: ThroughputArgs) -> anyhow::Result<()> {
    let config = config_from_args(direction, &args)?;
    let files = TargetFiles::prepare(&config).map_err(|e| usage(e.to_string()))?;
    let clock = OpClock::calibrate(Duration::from_millis(50));
    let machine = Machine::probe(&files.paths(), clock.describe(), env!("SNBUF_GIT_COMMIT"));

    note!(
        "snbuf bench {}: {} ({} CPUs, {} non-temporal path), {}",
        direction.name(),
        machine.cpu_model,
        machine.logical_cpus,
        machine.simd_path,
        machine.kernel
    );
    for t in &machine.targets {
        let kind = if t.dax {
            "DAX"
        } else if t.volatile {
            "RAM only, not durable"
        } else {
            "not DAX"
        };
        note!("  target {} on {} ({kind})", t.path, t.filesystem);
    }
    let points = config.points();
    let per_point = config.warmup + config.duration;
    note!(
        "  {} points x ({} warm-up + {}) = at least {}; region {} per thread; latency clock: {}",
        points.len(),
        Nanos(config.warmup.as_nanos() as u64),
        Nanos(config.duration.as_nanos() as u64),
        Nanos((per_point * points.len() as u32).as_nanos() as u64),
        Bytes(config.region_bytes()),
        clock.describe()
    );

    let steps = points.len() as u64;
    let csv = |results: &[ThroughputResult]| -> anyhow::Result<()> {
        if let Some(path) = &args.csv {
            write_throughput_csv(path, results)
                .with_context(|| format!("write CSV results to {}", path.display()))?;
            note!("wrote {}", path.display());
        }
        Ok(())
    };
    let suite = Suite {
        name: direction.name(),
        steps,
        machine: &machine,
        json: args.json.as_deref(),
        render,
        notes: |r: &ThroughputResult| &r.notes,
        verified: None,
        also: Some(&csv),
    };
    // A failed point keeps the points measured before it.
    run_suite(suite, |step, out| {
        for point in points {
            step(&format!(
                "{} {} x{}",
                point.method,
                Bytes(point.block_size_bytes),
                point.threads
            ));
            out.push(run_point(&config, &files, point, &clock)?);
        }
        Ok(())
    })?;
    Ok(())
}

fn render(results: &[ThroughputResult]) -> String {
    let mut t = Table::new(&[
        ("method", false),
        ("block", true),
        ("thr", true),
        ("throughput", true),
        ("requests/s", true),
        ("CPU s/GiB", true),
        ("p50", true),
        ("p99", true),
        ("p99.9", true),
        ("max", true),
        ("queue p99", true),
        ("durability", false),
    ]);
    for r in results {
        t.row(vec![
            r.method.clone(),
            Bytes(r.block_size_bytes).to_string(),
            r.threads.to_string(),
            Rate(r.gib_per_s * (1u64 << 30) as f64).to_string(),
            Count(r.mops_per_s * 1e6).to_string(),
            format!("{:.3}", r.cpu_core_s_per_gib),
            Nanos(r.latency_ns.p50).to_string(),
            Nanos(r.latency_ns.p99).to_string(),
            Nanos(r.latency_ns.p999).to_string(),
            Nanos(r.latency_ns.max).to_string(),
            r.completion_latency_ns
                .map(|c| Nanos(c.p99).to_string())
                .unwrap_or_else(|| "-".into()),
            r.durability.clone(),
        ]);
    }
    t.render()
}
