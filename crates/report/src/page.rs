//! report.md and report.html: the machine, the checks, Table II, the figures and the tables.
//! Both are written from the same tables, so they always agree.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use snbuf_bench::join::JoinResult;
use snbuf_bench::kernels::KernelResult;
use snbuf_bench::latency::LatencyResult;
use snbuf_bench::ThroughputResult;

use crate::figures::{is_per_thread_layout, lock_name, order_name, per_thread};
use crate::plot::human_bytes;
use crate::{Figure, ReportError, ResultsDir};

/// A table: header and rows of cells.
struct PageTable {
    title: String,
    header: Vec<&'static str>,
    rows: Vec<Vec<String>>,
}

/// Whether a result's note says its figure cannot be taken at face value. The suites start such
/// notes with `WRONG` (a result that failed its check) or `suspect:` (a figure that may not be
/// the medium's: cache hits, pages other than asked, a medium that is not durable).
fn is_finding(note: &str) -> bool {
    note.starts_with("WRONG") || note.starts_with("suspect:")
}

/// What the checks read of any result: its suite, whether it checked out (for suites that check
/// their result), its notes, and a few words naming it.
struct Checked<'a> {
    suite: &'a str,
    verified: Option<bool>,
    notes: &'a [String],
    brief: String,
}

/// Every result of the directory, as its checks see it.
fn checked(r: &ResultsDir) -> Vec<Checked<'_>> {
    let mut v = Vec::new();
    for (suite, rows) in &r.throughput {
        v.extend(rows.iter().map(|x| Checked {
            suite,
            verified: None,
            notes: &x.notes,
            brief: format!("method {}, threads {}", x.method, x.threads),
        }));
    }
    v.extend(r.latency.iter().map(|x| Checked {
        suite: "latency",
        verified: None,
        notes: &x.notes,
        brief: format!("op {}", x.op),
    }));
    v.extend(r.join.iter().map(|x| Checked {
        suite: "join",
        verified: Some(x.verified),
        notes: &x.notes,
        brief: format!(
            "phase {}, lock {}, placement {}, threads {}",
            x.phase,
            lock_name(x),
            x.placement,
            x.threads
        ),
    }));
    v.extend(r.kernels.iter().map(|x| Checked {
        suite: "kernels",
        verified: Some(x.verified),
        notes: &x.notes,
        brief: format!("kernel {}, placement {}", x.kernel, x.placement),
    }));
    v
}

/// Every failed check (`verified: false`) and every note that flags a figure.
pub fn findings(r: &ResultsDir) -> Vec<String> {
    let mut v = Vec::new();
    for x in checked(r) {
        if x.verified == Some(false) {
            v.push(format!(
                "{}: a result failed its check: {}",
                x.suite, x.brief
            ));
        }
        for n in x.notes.iter().filter(|n| is_finding(n)) {
            v.push(format!("{}: {n}", x.suite));
        }
    }
    v.sort();
    v.dedup();
    v
}

/// The other notes (how a figure was measured), once each.
fn plain_notes(r: &ResultsDir) -> Vec<String> {
    let mut v: Vec<String> = checked(r)
        .iter()
        .flat_map(|x| {
            x.notes
                .iter()
                .filter(|n| !is_finding(n) && !n.starts_with("layout:"))
                .map(|n| format!("{}: {n}", x.suite))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn f2(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}")
    } else {
        "-".into()
    }
}

/// A JSON scalar as a table cell.
fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn machine_table(r: &ResultsDir) -> PageTable {
    let mut rows = Vec::new();
    // Every scalar the machine record has, in its own words: the record grows with the suites.
    if let Ok(Value::Object(obj)) = serde_json::to_value(&r.machine) {
        for (k, v) in &obj {
            if !v.is_array() && !v.is_object() {
                rows.push(vec![k.clone(), cell(v)]);
            }
        }
    }
    for t in &r.machine.targets {
        rows.push(vec![
            "target".into(),
            format!(
                "{} ({}, {}{})",
                t.path,
                t.filesystem,
                if t.dax { "DAX" } else { "not DAX" },
                if t.volatile {
                    ", RAM only: not durable"
                } else {
                    ""
                }
            ),
        ]);
    }
    if let Some(p) = &r.paper {
        if !p.scale.is_empty() {
            rows.push(vec!["run scale".into(), p.scale.clone()]);
        }
        rows.push(vec!["run seconds".into(), p.seconds.to_string()]);
        for (k, t) in [("target", &p.target), ("second_target", &p.second_target)] {
            if let Some(t) = t {
                rows.push(vec![format!("run {k}"), t.display().to_string()]);
            }
        }
        for n in &p.notes {
            rows.push(vec!["run note".into(), n.clone()]);
        }
    }
    PageTable {
        title: "Machine".into(),
        header: vec!["", ""],
        rows,
    }
}

/// DUNE Table II: best sequential read and write bandwidth of each target.
fn table_two(r: &ResultsDir) -> Option<PageTable> {
    let best = |suite: &str| {
        r.throughput(suite)
            .iter()
            .filter(|x| x.pattern == "seq")
            .map(|x| x.gib_per_s)
            .filter(|v| v.is_finite())
            .fold(f64::NAN, f64::max)
    };
    if r.throughput("write").is_empty() {
        return None;
    }
    // The directory measured, not the temporary file the sweep made in it.
    let name = |suite: &str| {
        r.throughput(suite)
            .first()
            .map(|x| {
                let p = Path::new(&x.target);
                match (p.parent(), p.file_name()) {
                    (Some(dir), Some(f)) if f.to_string_lossy().starts_with("snbuf-bench-") => {
                        dir.display().to_string()
                    }
                    _ => x.target.clone(),
                }
            })
            .unwrap_or_else(|| "-".into())
    };
    let second = !r.throughput("write-second").is_empty();
    let mut header = vec!["", "first target [GiB/s]"];
    if second {
        header.push("second target [GiB/s]");
    }
    let row = |label: &str, a: &str, b: &str| {
        let mut v = vec![label.to_string(), f2(best(a))];
        if second {
            v.push(f2(best(b)));
        }
        v
    };
    let mut rows = vec![
        row("sequential read", "read", "read-second"),
        row("sequential write (durable)", "write", "write-second"),
    ];
    let mut names = vec!["target".to_string(), name("write")];
    if second {
        names.push(name("write-second"));
    }
    rows.insert(0, names);
    Some(PageTable {
        title: "Table II: bandwidth for sequential read and sequential write".into(),
        header,
        rows,
    })
}

fn throughput_table(title: &str, rows: &[ThroughputResult]) -> Option<PageTable> {
    (!rows.is_empty()).then(|| PageTable {
        title: title.into(),
        header: vec![
            "method",
            "block",
            "threads",
            "GiB/s",
            "M requests/s",
            "p99 ns",
            "durability",
        ],
        rows: rows
            .iter()
            .map(|x| {
                vec![
                    x.method.clone(),
                    human_bytes(x.block_size_bytes as f64),
                    x.threads.to_string(),
                    f2(x.gib_per_s),
                    f2(x.mops_per_s),
                    x.latency_ns.p99.to_string(),
                    x.durability.clone(),
                ]
            })
            .collect(),
    })
}

/// The page's tables in the order they appear: the latency matrix, the join, the kernels, the
/// application, then the throughput sweeps. A suite without results has no table.
fn tables(r: &ResultsDir) -> Vec<PageTable> {
    let mut t: Vec<PageTable> = [
        latency_table(&r.latency),
        join_table(&r.join),
        kernels_table(&r.kernels),
        app_table(r.throughput("app")),
    ]
    .into_iter()
    .flatten()
    .collect();
    for (suite, title) in [
        ("write", "Persist sweep, first target"),
        ("read", "Read sweep, first target"),
        ("write-second", "Persist sweep, second target"),
        ("read-second", "Read sweep, second target"),
    ] {
        t.extend(throughput_table(title, r.throughput(suite)));
    }
    t
}

fn latency_table(lat: &[LatencyResult]) -> Option<PageTable> {
    (!lat.is_empty()).then(|| PageTable {
        title: "Latency (Yoshioka et al.)".into(),
        header: vec![
            "medium",
            "order",
            "operation",
            "bytes",
            "p50 ns",
            "p99 ns",
            "p50 cycles",
            "GB/s",
        ],
        rows: lat
            .iter()
            .map(|x| {
                vec![
                    x.medium.clone(),
                    order_name(x.order).into(),
                    x.op.clone(),
                    x.access_bytes.to_string(),
                    x.latency_ns.p50.to_string(),
                    x.latency_ns.p99.to_string(),
                    x.latency_cycles.p50.to_string(),
                    f2(x.throughput_gb_per_s),
                ]
            })
            .collect(),
    })
}

/// `ok` or `WRONG`: whether a result checked out.
fn check_cell(verified: bool) -> String {
    if verified { "ok" } else { "WRONG" }.into()
}

fn join_table(join: &[JoinResult]) -> Option<PageTable> {
    (!join.is_empty()).then(|| PageTable {
        title: "Hash join (Yoshioka et al.)".into(),
        header: vec![
            "phase",
            "lock",
            "threads",
            "table in",
            "M tuples/s",
            "result checked",
        ],
        rows: join
            .iter()
            .map(|x| {
                vec![
                    x.phase.clone(),
                    lock_name(x).into(),
                    x.threads.to_string(),
                    x.placement.clone(),
                    f2(x.mtuples_per_s),
                    check_cell(x.verified),
                ]
            })
            .collect(),
    })
}

fn kernels_table(ker: &[KernelResult]) -> Option<PageTable> {
    (!ker.is_empty()).then(|| PageTable {
        title: "Kernels (Mason et al.)".into(),
        header: vec![
            "kernel",
            "n",
            "arrays in",
            "pages asked",
            "pages granted",
            "s",
            "GFLOP/s",
            "result checked",
        ],
        rows: ker
            .iter()
            .map(|x| {
                vec![
                    x.kernel.clone(),
                    x.n.to_string(),
                    x.placement.clone(),
                    human_bytes(x.page_size_bytes as f64),
                    x.page_size_obtained_bytes
                        .map_or("?".into(), |b| human_bytes(b as f64)),
                    format!("{:.3}", x.seconds),
                    f2(x.gflops),
                    check_cell(x.verified),
                ]
            })
            .collect(),
    })
}

fn app_table(app: &[ThroughputResult]) -> Option<PageTable> {
    (!app.is_empty()).then(|| PageTable {
        title: "The DUNE-like application (5568 B frames)".into(),
        header: vec![
            "layout",
            "method",
            "threads",
            "total GiB/s",
            "per thread GiB/s",
        ],
        rows: app
            .iter()
            .map(|x| {
                vec![
                    if is_per_thread_layout(x) {
                        "per-thread"
                    } else {
                        "shared"
                    }
                    .into(),
                    x.method.clone(),
                    x.threads.to_string(),
                    f2(x.gib_per_s),
                    f2(per_thread(x)),
                ]
            })
            .collect(),
    })
}

fn md_table(t: &PageTable, out: &mut String) {
    let _ = writeln!(out, "### {}\n", t.title);
    let _ = writeln!(out, "| {} |", t.header.join(" | "));
    let _ = writeln!(
        out,
        "|{}|",
        t.header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
    );
    for r in &t.rows {
        let _ = writeln!(out, "| {} |", r.join(" | ").replace('\n', " "));
    }
    out.push('\n');
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html_table(t: &PageTable, out: &mut String) {
    let _ = writeln!(out, "<h3>{}</h3>\n<table>\n<tr>", esc(&t.title));
    for h in &t.header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr>\n");
    for r in &t.rows {
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<td>{}</td>", esc(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
}

pub fn write(
    r: &ResultsDir,
    figures: &[Figure],
    findings: &[String],
    out: &Path,
) -> Result<(PathBuf, PathBuf), ReportError> {
    let machine = machine_table(r);
    let two = table_two(r);
    let tables = tables(r);
    let source = r.dir.display().to_string();

    let mut md = String::new();
    let _ = writeln!(md, "# snbuf report\n\nFrom the results in `{source}`.\n");
    md_table(&machine, &mut md);
    let _ = writeln!(md, "## Checks\n");
    if findings.is_empty() {
        let _ = writeln!(md, "Every result passed its checks (join and kernel results verified, pages as asked, no cached figure).\n");
    } else {
        for f in findings {
            let _ = writeln!(md, "- {f}");
        }
        md.push('\n');
    }
    if let Some(t) = &two {
        md_table(t, &mut md);
    }
    let _ = writeln!(md, "## Figures\n");
    for f in figures {
        let _ = writeln!(
            md,
            "### {}\n\n![{}]({}.svg)\n\n{} ([PNG]({}.png))\n",
            f.title, f.title, f.stem, f.caption, f.stem
        );
    }
    let _ = writeln!(md, "## Tables\n");
    for t in &tables {
        md_table(t, &mut md);
    }
    let notes = plain_notes(r);
    if !notes.is_empty() {
        let _ = writeln!(md, "## How the figures were measured\n");
        for n in &notes {
            let _ = writeln!(md, "- {n}");
        }
    }

    let mut html = String::new();
    html.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>snbuf report</title>\n<style>\nbody{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222}\ntable{border-collapse:collapse;margin:0.5em 0 1.5em}\ntd,th{border:1px solid #bbb;padding:3px 8px;text-align:right}\nth{background:#eee}\ntd:first-child{text-align:left}\nfigure{margin:1.5em 0}\nfigure img{width:100%;border:1px solid #ddd}\n.findings li{color:#a00}\n</style>\n</head>\n<body>\n");
    let _ = writeln!(
        html,
        "<h1>snbuf report</h1>\n<p>From the results in <code>{}</code>.</p>",
        esc(&source)
    );
    html_table(&machine, &mut html);
    html.push_str("<h2>Checks</h2>\n");
    if findings.is_empty() {
        html.push_str("<p id=\"checks-ok\">Every result passed its checks (join and kernel results verified, pages as asked, no cached figure).</p>\n");
    } else {
        html.push_str("<ul class=\"findings\">\n");
        for f in findings {
            let _ = writeln!(html, "<li>{}</li>", esc(f));
        }
        html.push_str("</ul>\n");
    }
    if let Some(t) = &two {
        html_table(t, &mut html);
    }
    html.push_str("<h2>Figures</h2>\n");
    for f in figures {
        let _ = writeln!(
            html,
            "<figure id=\"{stem}\"><img src=\"{stem}.svg\" alt=\"{title}\" onerror=\"this.setAttribute('data-broken','1')\"><figcaption><b>{title}.</b> {caption} (<a href=\"{stem}.png\">PNG</a>)</figcaption></figure>",
            stem = esc(&f.stem),
            title = esc(&f.title),
            caption = esc(&f.caption)
        );
    }
    html.push_str("<h2>Tables</h2>\n");
    for t in &tables {
        html_table(t, &mut html);
    }
    if !notes.is_empty() {
        html.push_str("<h2>How the figures were measured</h2>\n<ul>\n");
        for n in &notes {
            let _ = writeln!(html, "<li>{}</li>", esc(n));
        }
        html.push_str("</ul>\n");
    }
    html.push_str("</body>\n</html>\n");

    let md_path = out.join("report.md");
    let html_path = out.join("report.html");
    std::fs::write(&md_path, md).map_err(|e| ReportError::Io(md_path.clone(), e))?;
    std::fs::write(&html_path, html).map_err(|e| ReportError::Io(html_path.clone(), e))?;
    Ok((md_path, html_path))
}
