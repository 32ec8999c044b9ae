//! Which figures the results allow, named after the papers': DUNE Figs 2, 3, 5, 7 and 8,
//! Yoshioka et al.'s latency matrix and hash join, Mason et al.'s kernels.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::plot::{bar_chart, line_chart, BarChart, LineChart, Series};
use crate::{num, text, Figure, ReportError, ResultsDir};

/// Groups `rows` into series by `key`, each a list of (x, y) sorted by x.
fn group(
    rows: &[Value],
    key: impl Fn(&Value) -> String,
    xy: impl Fn(&Value) -> (f64, f64),
) -> Vec<Series> {
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
fn bars(
    rows: &[Value],
    category: impl Fn(&Value) -> String,
    series: impl Fn(&Value) -> String,
    value: impl Fn(&Value) -> f64,
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

fn block_name(r: &Value) -> String {
    crate::plot::human_bytes(num(r, "block_size_bytes"))
}

/// Per-thread throughput of a throughput result, GiB/s.
fn per_thread(r: &Value) -> f64 {
    num(r, "gib_per_s") / num(r, "threads")
}

fn is_per_thread_layout(r: &Value) -> bool {
    r["notes"]
        .as_array()
        .is_some_and(|n| n.iter().any(|x| x == "layout: per-thread"))
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
        let rows = r.results(suite);
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
                series: group(
                    rows,
                    |x| format!("{} x{}", text(x, "method"), text(x, "threads")),
                    |x| (num(x, "block_size_bytes"), num(x, "mops_per_s")),
                ),
            },
        )?;
        let t = format!("Persist throughput vs threads{label}");
        line(
            &format!("fig3-write-throughput-vs-threads{suffix}"),
            &t,
            "DUNE Fig 3: total durable write throughput as threads are added, per method and block size.",
            LineChart {
                title: &t,
                x_label: "threads",
                y_label: "GiB/s",
                log2_x: false,
                y_range: None,
                markers: true,
                series: group(
                    rows,
                    |x| format!("{} {}", text(x, "method"), block_name(x)),
                    |x| (num(x, "threads"), num(x, "gib_per_s")),
                ),
            },
        )?;
    }
    for (suite, label) in [("read", ""), ("read-second", " (second target)")] {
        let suffix = if suite == "read" { "" } else { "-second" };
        let t = format!("Read throughput vs threads{label}");
        line(
            &format!("fig3-read-throughput-vs-threads{suffix}"),
            &t,
            "DUNE Fig 3: read throughput as threads are added, per method and block size (every block checked against what was written).",
            LineChart {
                title: &t,
                x_label: "threads",
                y_label: "GiB/s",
                log2_x: false,
                y_range: None,
                markers: true,
                series: group(
                    r.results(suite),
                    |x| format!("{} {}", text(x, "method"), block_name(x)),
                    |x| (num(x, "threads"), num(x, "gib_per_s")),
                ),
            },
        )?;
    }
    let small_large: Vec<Value> = r
        .results("write")
        .iter()
        .filter(|x| [4096.0, 1048576.0].contains(&num(x, "block_size_bytes")))
        .cloned()
        .collect();
    line(
        "fig5-4k-vs-1m",
        "4 KiB vs 1 MiB blocks",
        "DUNE Fig 5: the same methods with 4 KiB and 1 MiB blocks: small blocks pay the persist cost per request.",
        LineChart {
            title: "Persist throughput, 4 KiB vs 1 MiB blocks",
            x_label: "threads",
            y_label: "GiB/s",
            log2_x: false,
            y_range: None,
            markers: true,
            series: group(
                &small_large,
                |x| format!("{} {}", text(x, "method"), block_name(x)),
                |x| (num(x, "threads"), num(x, "gib_per_s")),
            ),
        },
    )
}

/// DUNE Figs 7 and 8: the DUNE-like application, per thread and by layout.
fn draw_app(r: &ResultsDir, d: &mut Drawn) -> Result<(), ReportError> {
    let mut line =
        |stem: &str, title: &str, caption: &str, c: LineChart| d.line(stem, title, caption, c);
    let app = r.results("app");
    let shared: Vec<Value> = app
        .iter()
        .filter(|x| !is_per_thread_layout(x))
        .cloned()
        .collect();
    line(
        "fig7-app-with-without-pmdk",
        "The DUNE-like application, per thread, with and without PMDK",
        "DUNE Fig 7: average throughput per thread of 5568 B frames persisted from DRAM, one shared target; pmdk is libpmem's pmem_memcpy, nt snbuf's own non-temporal path.",
        LineChart {
            title: "App: throughput per thread (5568 B frames)",
            x_label: "threads",
            y_label: "GiB/s per thread",
            log2_x: false,
            y_range: None,
            markers: true,
            series: group(&shared, |x| text(x, "method"), |x| (num(x, "threads"), per_thread(x))),
        },
    )?;
    line(
        "fig8-app-shared-vs-per-thread",
        "The DUNE-like application: one shared target vs one per thread",
        "DUNE Fig 8: total throughput of the application with every thread writing one target (interleaved) and each thread its own (non-interleaved).",
        LineChart {
            title: "App: shared vs per-thread targets",
            x_label: "threads",
            y_label: "GiB/s",
            log2_x: false,
            y_range: None,
            markers: true,
            series: group(
                app,
                |x| {
                    format!(
                        "{} {}",
                        text(x, "method"),
                        if is_per_thread_layout(x) { "per-thread" } else { "shared" }
                    )
                },
                |x| (num(x, "threads"), num(x, "gib_per_s")),
            ),
        },
    )
}

/// The hash join's build under each lock, and its probe.
fn draw_join(r: &ResultsDir, d: &mut Drawn) -> Result<(), ReportError> {
    let mut line =
        |stem: &str, title: &str, caption: &str, c: LineChart| d.line(stem, title, caption, c);
    let join = r.results("join");
    let build: Vec<Value> = join
        .iter()
        .filter(|x| x["phase"] == "build")
        .cloned()
        .collect();
    let probe: Vec<Value> = join
        .iter()
        .filter(|x| x["phase"] == "probe")
        .cloned()
        .collect();
    line(
        "join-build-per-lock",
        "Hash join build under one giant lock",
        "Yoshioka et al.: building R's hash table under one giant lock of each type, in DRAM and on the target.",
        LineChart {
            title: "Join build: tuples/s per lock type",
            x_label: "threads",
            y_label: "million tuples/s",
            log2_x: false,
            y_range: None,
            markers: true,
            series: group(
                &build,
                |x| format!("{} {}", text(x, "lock"), text(x, "placement")),
                |x| (num(x, "threads"), num(x, "mtuples_per_s")),
            ),
        },
    )?;
    line(
        "join-probe-scaling",
        "Hash join probe, lock-free",
        "Yoshioka et al.: probing S against the table, lock-free, as threads are added.",
        LineChart {
            title: "Join probe: tuples/s",
            x_label: "threads",
            y_label: "million tuples/s",
            log2_x: false,
            y_range: None,
            markers: true,
            series: group(
                &probe,
                |x| text(x, "placement"),
                |x| (num(x, "threads"), num(x, "mtuples_per_s")),
            ),
        },
    )
}

/// The latency matrix and the kernels, as bars.
fn draw_latency_and_kernels(r: &ResultsDir, d: &mut Drawn) -> Result<(), ReportError> {
    let lat = r.results("latency");
    if !lat.is_empty() {
        let (categories, series) = bars(
            lat,
            |x| text(x, "op"),
            |x| format!("{} {}", text(x, "medium"), text(x, "order")),
            |x| x["latency_ns"]["p50"].as_f64().unwrap_or(f64::NAN),
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
    let ker = r.results("kernels");
    if !ker.is_empty() {
        let (categories, series) = bars(
            ker,
            |x| text(x, "kernel"),
            |x| {
                format!(
                    "{} {} pages",
                    text(x, "placement"),
                    crate::plot::human_bytes(num(x, "page_size_bytes"))
                )
            },
            |x| num(x, "gflops"),
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
