//! Which figures the results allow, named after the papers': DUNE Figs 2, 3, 5, 7 and 8,
//! Yoshioka et al.'s latency matrix and hash join, Mason et al.'s kernels.

use std::collections::BTreeMap;
use std::path::Path;

use snbuf_bench::join::JoinResult;
use snbuf_bench::latency::Order;
use snbuf_bench::ThroughputResult;

use crate::plot::{bar_chart, human_bytes, line_chart, BarChart, LineChart, Series};
use crate::{Figure, ReportError, ResultsDir};

/// Groups `rows` into series by `key`, each a list of (x, y) sorted by x.
fn group<T>(rows: &[T], key: impl Fn(&T) -> String, xy: impl Fn(&T) -> (f64, f64)) -> Vec<Series> {
    let mut m: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in rows {
        let (x, y) = xy(r);
        if x.is_finite() && y.is_finite() {
            m.entry(key(r)).or_default().push((x, y));
        }
    }
    m.into_iter()
        .map(|(name, mut points)| {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            Series { name, points }
        })
        .collect()
}

/// Rows as bars: one category per distinct `category` (in order of appearance), one series per
/// distinct `series` key, each with a value per category (NaN where a row is missing).
fn bars<T>(
    rows: &[T],
    category: impl Fn(&T) -> String,
    series: impl Fn(&T) -> String,
    value: impl Fn(&T) -> f64,
) -> (Vec<String>, Vec<(String, Vec<f64>)>) {
    let mut categories: Vec<String> = Vec::new();
    for x in rows {
        let c = category(x);
        if !categories.contains(&c) {
            categories.push(c);
        }
    }
    let mut m: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for x in rows {
        let i = categories
            .iter()
            .position(|c| *c == category(x))
            .expect("listed above");
        m.entry(series(x))
            .or_insert_with(|| vec![f64::NAN; categories.len()])[i] = value(x);
    }
    (categories, m.into_iter().collect())
}

fn block_name(r: &ThroughputResult) -> String {
    human_bytes(r.block_size_bytes as f64)
}

/// Per-thread throughput of a throughput result, GiB/s.
pub(crate) fn per_thread(r: &ThroughputResult) -> f64 {
    r.gib_per_s / r.threads as f64
}

/// Whether an application result had each thread write a target of its own (the suite says so
/// in a note).
pub(crate) fn is_per_thread_layout(r: &ThroughputResult) -> bool {
    r.notes.iter().any(|x| x == "layout: per-thread")
}

/// A throughput result's (method, threads) series name.
fn method_threads(x: &ThroughputResult) -> String {
    format!("{} x{}", x.method, x.threads)
}

/// A throughput result's (method, block size) series name.
fn method_block(x: &ThroughputResult) -> String {
    format!("{} {}", x.method, block_name(x))
}

/// A line chart over thread counts (linear, from 0 up): how each series scales as threads are
/// added.
fn by_threads<'a>(title: &'a str, y_label: &'a str, series: Vec<Series>) -> LineChart<'a> {
    LineChart {
        title,
        x_label: "threads",
        y_label,
        log2_x: false,
        y_range: None,
        markers: true,
        series,
    }
}

/// (threads, GiB/s) of a throughput result.
fn threads_gib(x: &ThroughputResult) -> (f64, f64) {
    (x.threads as f64, x.gib_per_s)
}

/// The figures drawn so far into `out`, in the order the page shows them.
struct Drawn<'a> {
    out: &'a Path,
    figs: Vec<Figure>,
}

impl Drawn<'_> {
    /// A line chart, when it has any series.
    fn line(
        &mut self,
        stem: &str,
        title: &str,
        caption: &str,
        c: LineChart,
    ) -> Result<(), ReportError> {
        if c.series.is_empty() {
            return Ok(());
        }
        line_chart(self.out, stem, &c)?;
        self.push(stem, title, caption);
        Ok(())
    }

    /// A bar chart, drawn.
    fn bar(
        &mut self,
        stem: &str,
        title: &str,
        caption: &str,
        c: &BarChart,
    ) -> Result<(), ReportError> {
        bar_chart(self.out, stem, c)?;
        self.push(stem, title, caption);
        Ok(())
    }

    fn push(&mut self, stem: &str, title: &str, caption: &str) {
        assert!(
            self.figs.iter().all(|f| f.stem != stem),
            "{stem}: each figure is drawn once"
        );
        self.figs.push(Figure {
            stem: stem.into(),
            title: title.into(),
            caption: caption.into(),
        });
    }
}

/// The report's figures, in the order the page shows them: the DUNE paper's throughput figures,
/// its application's, the join's, then the latency matrix and the kernels.
pub fn draw_all(r: &ResultsDir, out: &Path) -> Result<Vec<Figure>, ReportError> {
    let mut drawn = Drawn {
        out,
        figs: Vec::new(),
    };
    draw_throughput(r, &mut drawn)?;
    draw_app(r, &mut drawn)?;
    draw_join(r, &mut drawn)?;
    draw_latency_and_kernels(r, &mut drawn)?;
    Ok(drawn.figs)
}

/// DUNE Figs 2, 3 and 5: requests and throughput of the write and read sweeps.
fn draw_throughput(r: &ResultsDir, d: &mut Drawn) -> Result<(), ReportError> {
    let mut line =
        |stem: &str, title: &str, caption: &str, c: LineChart| d.line(stem, title, caption, c);
    for (suite, label) in [("write", ""), ("write-second", " (second target)")] {
        let rows = r.throughput(suite);
        let suffix = if suite == "write" { "" } else { "-second" };
        let t = format!("Persist request rate vs block size{label}");
        line(
            &format!("fig2-request-rate-vs-block-size{suffix}"),
            &t,
            "DUNE Fig 2: durable writes per second (each block copied from DRAM and persisted) for each method and thread count.",
            LineChart {
                title: &t,
                x_label: "block size",
                y_label: "million requests/s",
                log2_x: true,
                y_range: None,
                markers: true,
                series: group(rows, method_threads, |x| {
                    (x.block_size_bytes as f64, x.mops_per_s)
                }),
            },
        )?;
        let t = format!("Persist throughput vs threads{label}");
        line(
            &format!("fig3-write-throughput-vs-threads{suffix}"),
            &t,
            "DUNE Fig 3: total durable write throughput as threads are added, per method and block size.",
            by_threads(&t, "GiB/s", group(rows, method_block, threads_gib)),
        )?;
    }
    for (suite, label) in [("read", ""), ("read-second", " (second target)")] {
        let suffix = if suite == "read" { "" } else { "-second" };
        let t = format!("Read throughput vs threads{label}");
        line(
            &format!("fig3-read-throughput-vs-threads{suffix}"),
            &t,
            "DUNE Fig 3: read throughput as threads are added, per method and block size (every block checked against what was written).",
            by_threads(&t, "GiB/s", group(r.throughput(suite), method_block, threads_gib)),
        )?;
    }
    let small_large: Vec<ThroughputResult> = r
        .throughput("write")
        .iter()
        .filter(|x| [4096, 1 << 20].contains(&x.block_size_bytes))
        .cloned()
        .collect();
    line(
        "fig5-4k-vs-1m",
        "4 KiB vs 1 MiB blocks",
        "DUNE Fig 5: the same methods with 4 KiB and 1 MiB blocks: small blocks pay the persist cost per request.",
        by_threads("Persist throughput, 4 KiB vs 1 MiB blocks", "GiB/s", group(&small_large, method_block, threads_gib)),
    )
}

/// DUNE Figs 7 and 8: the DUNE-like application, per thread and by layout.
fn draw_app(r: &ResultsDir, d: &mut Drawn) -> Result<(), ReportError> {
    let mut line =
        |stem: &str, title: &str, caption: &str, c: LineChart| d.line(stem, title, caption, c);
    let app = r.throughput("app");
    let shared: Vec<ThroughputResult> = app
        .iter()
        .filter(|x| !is_per_thread_layout(x))
        .cloned()
        .collect();
    line(
        "fig7-app-with-without-pmdk",
        "The DUNE-like application, per thread, with and without PMDK",
        "DUNE Fig 7: average throughput per thread of 5568 B frames persisted from DRAM, one shared target; pmdk is libpmem's pmem_memcpy, nt snbuf's own non-temporal path.",
        by_threads("App: throughput per thread (5568 B frames)", "GiB/s per thread", group(&shared, |x| x.method.clone(), |x| (x.threads as f64, per_thread(x)))),
    )?;
    line(
        "fig8-app-shared-vs-per-thread",
        "The DUNE-like application: one shared target vs one per thread",
        "DUNE Fig 8: total throughput of the application with every thread writing one target (interleaved) and each thread its own (non-interleaved).",
        by_threads("App: shared vs per-thread targets", "GiB/s", group(
                app,
                |x| {
                    format!(
                        "{} {}",
                        x.method,
                        if is_per_thread_layout(x) { "per-thread" } else { "shared" }
                    )
                },
                threads_gib,
            )),
    )
}

/// The hash join's build under each lock, and its probe.
fn draw_join(r: &ResultsDir, d: &mut Drawn) -> Result<(), ReportError> {
    let mut line =
        |stem: &str, title: &str, caption: &str, c: LineChart| d.line(stem, title, caption, c);
    let phase = |name: &str| -> Vec<JoinResult> {
        r.join.iter().filter(|x| x.phase == name).cloned().collect()
    };
    let (build, probe) = (phase("build"), phase("probe"));
    line(
        "join-build-per-lock",
        "Hash join build under one giant lock",
        "Yoshioka et al.: building R's hash table under one giant lock of each type, in DRAM and on the target.",
        by_threads("Join build: tuples/s per lock type", "million tuples/s", group(
                &build,
                |x| format!("{} {}", lock_name(x), x.placement),
                |x| (x.threads as f64, x.mtuples_per_s),
            )),
    )?;
    line(
        "join-probe-scaling",
        "Hash join probe, lock-free",
        "Yoshioka et al.: probing S against the table, lock-free, as threads are added.",
        by_threads(
            "Join probe: tuples/s",
            "million tuples/s",
            group(
                &probe,
                |x| x.placement.clone(),
                |x| (x.threads as f64, x.mtuples_per_s),
            ),
        ),
    )
}

/// The latency matrix and the kernels, as bars.
fn draw_latency_and_kernels(r: &ResultsDir, d: &mut Drawn) -> Result<(), ReportError> {
    let lat = &r.latency;
    if !lat.is_empty() {
        let (categories, series) = bars(
            lat,
            |x| x.op.clone(),
            |x| format!("{} {}", x.medium, order_name(x.order)),
            |x| x.latency_ns.p50 as f64,
        );
        d.bar(
            "latency-matrix",
            "Latency matrix",
            "Yoshioka et al.: median latency of each load and persist sequence, DRAM vs the target, sequential and random.",
            &BarChart {
                title: "Median latency per access, its lines flushed before each",
                y_label: "ns (median)",
                categories,
                series,
            },
        )?;
    }
    let ker = &r.kernels;
    if !ker.is_empty() {
        let (categories, series) = bars(
            ker,
            |x| x.kernel.clone(),
            |x| {
                format!(
                    "{} {} pages",
                    x.placement,
                    human_bytes(x.page_size_bytes as f64)
                )
            },
            |x| x.gflops,
        );
        d.bar(
            "kernels-dram-vs-target",
            "Kernels",
            "Mason et al.: PolyBench-style kernels with their arrays in DRAM or on the target mapping, at each page size asked for (see the table for what was granted).",
            &BarChart {
                title: "Kernels: arrays in DRAM vs on the target, 4 KiB and 2 MiB pages",
                y_label: "GFLOP/s",
                categories,
                series,
            },
        )?;
    }
    Ok(())
}

/// The join's lock as the results name it; `-` for a probe, which takes none.
pub(crate) fn lock_name(x: &JoinResult) -> &'static str {
    x.lock.map_or("-", |l| l.name())
}

/// A latency order as the results name it.
pub(crate) fn order_name(o: Order) -> &'static str {
    match o {
        Order::Seq => "seq",
        Order::Rand => "rand",
    }
}
