//! deploy/: the alerting rules and the Grafana dashboard, checked by the real tools and against
//! the metrics a real unit exports. `promtool check rules` and `promtool test rules` (every alert
//! fires and clears); every metric a rule or a panel names is one `snbuf serve --metrics`
//! exports (a renamed metric fails here); and a real Prometheus scrapes a real unit and answers
//! a query through its HTTP API, with the rules loaded. Debian's `prometheus` package; skipped
//! without it unless SNBUF_REQUIRE_PROMETHEUS is set.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::KillOnDrop;
use serde_json::Value;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(
        out.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    )
}

/// A unit with every metric family present (network links, an export queue) and its metrics
/// address.
fn unit_with_every_metric(dir: &Path) -> (KillOnDrop, String) {
    let export = dir.join("exported");
    std::fs::create_dir_all(&export).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_snbuf"))
        .args(["serve", "--output", dir.join("data").to_str().unwrap()])
        .args([
            "--source",
            "udp://127.0.0.1:0",
            "--frame",
            "wibeth",
            "--links",
            "2",
        ])
        .args([
            "--rate-per-link",
            "5MB/s",
            "--buffer",
            "1s",
            "--pre",
            "300ms",
        ])
        .args(["--export-to", &format!("file://{}", export.display())])
        .args(["--metrics", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = KillOnDrop(child);
    let addr = common::metrics_address(stderr);
    (server, addr)
}

fn exported_families(addr: &str) -> BTreeSet<String> {
    let body = http_get(addr, "/metrics").expect("metrics answer");
    body.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every `snbuf_*` metric name in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("snbuf_") {
        let name: String = text[i..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        // Alert names and uids are not metrics.
        if name.len() > "snbuf_".len() {
            out.insert(name);
        }
    }
    out
}

fn promtool() -> Option<PathBuf> {
    common::installed_tool(
        [PathBuf::from("/usr/bin/promtool")],
        "SNBUF_REQUIRE_PROMETHEUS",
        "apt-get install prometheus",
    )
}

#[test]
fn the_alert_rules_pass_promtool_and_every_alert_fires_and_clears() {
    let Some(promtool) = promtool() else {
        return;
    };
    for args in [
        vec!["check", "rules", "alerts.yml"],
        vec!["test", "rules", "alerts_test.yml"],
    ] {
        let mut c = Command::new(&promtool);
        c.args(&args).current_dir(deploy());
        let o = common::output_within(c, Duration::from_secs(120));
        assert!(
            o.status.success(),
            "promtool {args:?}:\n{}\n{}",
            String::from_utf8_lossy(&o.stdout),
            common::stderr(&o)
        );
    }
    // Each alert of the rules is tested.
    let rules = std::fs::read_to_string(deploy().join("alerts.yml")).unwrap();
    let tests = std::fs::read_to_string(deploy().join("alerts_test.yml")).unwrap();
    for line in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {line}")),
            "{line} has no test"
        );
    }
}

#[test]
fn rules_and_dashboard_name_only_metrics_a_unit_exports() {
    let dir = tempfile::tempdir().unwrap();
    let (_unit, addr) = unit_with_every_metric(dir.path());
    let exported = exported_families(&addr);
    assert!(
        exported.contains("snbuf_link_ingest_missing_frames_total"),
        "{exported:?}"
    );
    assert!(
        exported.contains("snbuf_export_lag_seconds"),
        "{exported:?}"
    );
    let dashboard_text = std::fs::read_to_string(deploy().join("grafana-dashboard.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&dashboard_text).unwrap();
    // The dashboard as Grafana reads it: panels with ids, positions and Prometheus queries,
    // and a unit variable.
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(panels.len() >= 10);
    let mut ids = BTreeSet::new();
    let mut exprs = String::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().unwrap()),
            "panel ids are unique"
        );
        assert!(p["title"].is_string() && p["type"].is_string());
        for k in ["x", "y", "w", "h"] {
            assert!(p["gridPos"][k].is_u64(), "{p}");
        }
        for t in p["targets"].as_array().unwrap() {
            assert!(t["refId"].is_string());
            let e = t["expr"].as_str().unwrap();
            assert!(
                e.contains("$instance") || e.contains("instance=~"),
                "{e}: per unit"
            );
            exprs.push_str(e);
            exprs.push('\n');
        }
    }
    let vars = dashboard["templating"]["list"].as_array().unwrap();
    assert!(vars.iter().any(|v| v["name"] == "instance"));
    assert!(dashboard["uid"].is_string() && dashboard["schemaVersion"].is_u64());
    let rules = std::fs::read_to_string(deploy().join("alerts.yml")).unwrap();
    let rule_exprs: String = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("expr: "))
        .collect::<Vec<_>>()
        .join("\n");
    for (what, text) in [("dashboard", exprs), ("alert rules", rule_exprs)] {
        let names = names_in(&text);
        assert!(!names.is_empty());
        for n in names {
            assert!(
                exported.contains(&n),
                "the {what} name {n}, which no unit exports"
            );
        }
    }
}

#[test]
fn a_real_prometheus_scrapes_a_unit_with_the_rules_loaded() {
    let Some(_) = promtool() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_unit, addr) = unit_with_every_metric(dir.path());
    let port = common::free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: snbuf\n    static_configs:\n      - targets: ['{addr}']\n",
            deploy().join("alerts.yml").display()
        ),
    )
    .unwrap();
    let prometheus = Command::new("/usr/bin/prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("prometheus starts");
    let _prometheus = KillOnDrop(prometheus);
    let api = format!("127.0.0.1:{port}");
    let until = Instant::now() + Duration::from_secs(90);
    let mut last = String::new();
    loop {
        assert!(
            Instant::now() < until,
            "no series through the API within 90 s: {last}"
        );
        if let Some(body) = http_get(&api, "/api/v1/query?query=snbuf_link_input_frames_total") {
            if let Ok(v) = serde_json::from_str::<Value>(&body) {
                let results = v["data"]["result"].as_array().cloned().unwrap_or_default();
                if results.len() == 2 {
                    assert!(results.iter().all(|r| r["metric"]["job"] == "snbuf"));
                    break;
                }
            }
            last = body;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let rules: Value =
        serde_json::from_str(&http_get(&api, "/api/v1/rules").expect("rules answer")).unwrap();
    let loaded = rules["data"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .len();
    let written = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/alerts.yml"
    ))
    .unwrap()
    .matches("- alert:")
    .count();
    assert!(written >= 9);
    assert_eq!(loaded, written, "every alert rule loaded");
}
