//! A report from a small results directory: every figure the results allow is drawn as SVG and
//! PNG, report.md and report.html reference only images that exist, Table II appears with two
//! targets, and a result that failed its check is listed as a finding.

use std::path::Path;

use serde_json::{json, Value};

fn doc(suite: &str, results: Vec<Value>) -> Value {
    json!({
        "schema_version": 1,
        "suite": suite,
        "machine": {"cpu_model": "test CPU", "logical_cpus": 2, "kernel": "6.x",
                    "targets": [{"path": "/dev/shm", "filesystem": "tmpfs", "dax": false, "volatile": true}]},
        "results": results,
    })
}

fn tput(method: &str, block: u64, threads: u64, gib: f64, notes: &[&str]) -> Value {
    json!({
        "method": method, "block_size_bytes": block, "threads": threads, "pattern": "seq",
        "gib_per_s": gib, "mops_per_s": gib * 1073.741824 / block as f64 * 1000.0,
        "target": "/dev/shm", "durability": "volatile", "latency_ns": {"p99": 900},
        "notes": notes,
    })
}

fn write_fixture(dir: &Path) {
    let mut w = Vec::new();
    for m in ["nt", "clwb"] {
        for b in [4096u64, 5568, 1 << 20] {
            for t in [1u64, 2] {
                w.push(tput(m, b, t, 1.0 + t as f64 + b as f64 / 1e6, &[]));
            }
        }
    }
    let second: Vec<Value> = [1u64, 2]
        .iter()
        .map(|&t| tput("direct", 1 << 20, t, 0.8 * t as f64, &[]))
        .collect();
    let app: Vec<Value> = ["nt", "pmdk"]
        .iter()
        .flat_map(|m| {
            [1u64, 2].into_iter().flat_map(move |t| {
                [
                    tput(m, 5568, t, 2.0 * t as f64, &["layout: shared"]),
                    tput(m, 5568, t, 2.2 * t as f64, &["layout: per-thread"]),
                ]
            })
        })
        .collect();
    let latency: Vec<Value> = ["load", "store+clwb+sfence"]
        .iter()
        .flat_map(|op| {
            ["dram", "target"].into_iter().map(move |m| {
                json!({"medium": m, "order": "rand", "op": op, "access_bytes": 64,
                       "latency_ns": {"p50": 120, "p99": 300}, "latency_cycles": {"p50": 276},
                       "throughput_gb_per_s": 3.5, "notes": []})
            })
        })
        .collect();
    let join = vec![
        json!({"phase": "build", "lock": "test_and_set", "threads": 1, "placement": "dram", "mtuples_per_s": 20.0, "verified": true, "notes": []}),
        json!({"phase": "build", "lock": "test_and_set", "threads": 2, "placement": "dram", "mtuples_per_s": 12.0, "verified": true, "notes": []}),
        json!({"phase": "probe", "lock": null, "threads": 1, "placement": "dram", "mtuples_per_s": 40.0, "verified": true, "notes": []}),
        json!({"phase": "probe", "lock": null, "threads": 2, "placement": "dram", "mtuples_per_s": 70.0, "verified": false,
               "notes": ["WRONG RESULT: 5 matches (checksum 1), expected 6 (2)"]}),
    ];
    let kernels = vec![
        json!({"kernel": "gemm", "n": 64, "placement": "dram", "page_size_bytes": 4096, "page_size_obtained_bytes": 4096, "seconds": 0.1, "gflops": 1.5, "verified": true, "notes": []}),
        json!({"kernel": "gemm", "n": 64, "placement": "target", "page_size_bytes": 2097152, "page_size_obtained_bytes": 4096, "seconds": 0.1, "gflops": 1.4, "verified": true,
               "notes": ["suspect: 2 MiB pages were asked for, the kernel granted 0% of the arrays on them: this is a 4 KiB-page figure"]}),
    ];
    for (file, suite, results) in [
        ("write.json", "write", w.clone()),
        ("read.json", "read", w),
        ("write-second.json", "write", second.clone()),
        ("read-second.json", "read", second),
        ("app.json", "app", app),
        ("latency.json", "latency", latency),
        ("join.json", "join", join),
        ("kernels.json", "kernels", kernels),
    ] {
        std::fs::write(dir.join(file), doc(suite, results).to_string()).unwrap();
    }
}

#[test]
fn every_figure_is_drawn_and_every_referenced_image_exists() {
    let results = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    write_fixture(results.path());
    let r = snbuf_report::build(results.path(), out.path()).unwrap();
    let stems: Vec<&str> = r.figures.iter().map(|f| f.stem.as_str()).collect();
    for want in [
        "fig2-request-rate-vs-block-size",
        "fig2-request-rate-vs-block-size-second",
        "fig3-write-throughput-vs-threads",
        "fig3-read-throughput-vs-threads",
        "fig5-4k-vs-1m",
        "fig7-app-with-without-pmdk",
        "fig8-app-shared-vs-per-thread",
        "latency-matrix",
        "join-build-per-lock",
        "join-probe-scaling",
        "kernels-dram-vs-target",
    ] {
        assert!(stems.contains(&want), "{want} missing from {stems:?}");
    }
    for f in &r.figures {
        let svg = std::fs::read_to_string(out.path().join(format!("{}.svg", f.stem))).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("</svg>"),
            "{}",
            f.stem
        );
        let png = std::fs::read(out.path().join(format!("{}.png", f.stem))).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "{}", f.stem);
    }
    let html = std::fs::read_to_string(&r.html).unwrap();
    let md = std::fs::read_to_string(&r.markdown).unwrap();
    for page in [&html, &md] {
        for f in &r.figures {
            assert!(page.contains(&format!("{}.svg", f.stem)), "{}", f.stem);
        }
        assert!(page.contains("Table II"));
        assert!(page.contains("WRONG RESULT"), "the wrong join is reported");
        assert!(
            page.contains("4 KiB-page figure"),
            "the huge-page shortfall is reported"
        );
    }
    // Every image the HTML references exists beside it.
    for src in html
        .split("src=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
    {
        assert!(out.path().join(src).is_file(), "{src}");
    }
    assert_eq!(r.findings.len(), 3, "{:?}", r.findings);
}

#[test]
fn a_directory_without_results_is_refused() {
    let empty = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    let e = snbuf_report::build(empty.path(), out.path()).err().unwrap();
    assert!(e.to_string().contains("no results"), "{e}");
    std::fs::write(empty.path().join("write.json"), "{ nope").unwrap();
    let e = snbuf_report::build(empty.path(), out.path()).err().unwrap();
    assert!(e.to_string().contains("not a results file"), "{e}");
}
