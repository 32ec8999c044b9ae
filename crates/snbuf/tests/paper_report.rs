//! `snbuf bench paper` then `snbuf report`, end to end at smoke scale: the results directory
//! holds every suite, the report has every figure, and report.html renders in headless Chromium
//! (Debian's chromium) with no broken image. Without Chromium the rendering part skips and says
//! so, unless SNBUF_REQUIRE_CHROMIUM is set (CI installs it and sets it).

mod common;

use std::path::Path;
use std::process::Command;

use common::{installed_tool, snbuf, stderr};

fn shm_or_tmp() -> tempfile::TempDir {
    if Path::new("/dev/shm").is_dir() {
        tempfile::tempdir_in("/dev/shm").unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

#[test]
fn a_paper_run_becomes_a_report_that_renders_in_chromium() {
    let first = shm_or_tmp();
    let second = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let results = work.path().join("results");
    let report = work.path().join("report");
    let o = snbuf(&[
        "bench",
        "paper",
        "--smoke",
        "--target",
        first.path().to_str().unwrap(),
        "--second-target",
        second.path().to_str().unwrap(),
        "--out",
        results.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "paper.json",
        "write.json",
        "read.json",
        "write-second.json",
        "read-second.json",
        "latency.json",
        "join.json",
        "kernels.json",
        "app.json",
    ] {
        assert!(results.join(f).is_file(), "{f}");
    }
    // The targets are left as they were found.
    assert_eq!(std::fs::read_dir(first.path()).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(second.path()).unwrap().count(), 0);
    // A results directory is never mixed with another run's.
    let again = snbuf(&[
        "bench",
        "paper",
        "--smoke",
        "--target",
        first.path().to_str().unwrap(),
        "--out",
        results.to_str().unwrap(),
    ]);
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));

    let o = snbuf(&[
        "report",
        results.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let html_path = report.join("report.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    let figures: Vec<&str> = html
        .split("<figure id=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
        .collect();
    assert!(figures.len() >= 11, "{figures:?}");
    for src in html
        .split("src=\"")
        .skip(1)
        .map(|s| &s[..s.find('"').unwrap()])
    {
        assert!(
            report.join(src).is_file(),
            "{src} is referenced but missing"
        );
    }

    let Some(chromium) = installed_tool(
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(std::path::PathBuf::from),
        "SNBUF_REQUIRE_CHROMIUM",
        "Chromium, to render report.html: apt-get install chromium",
    ) else {
        return;
    };
    let profile = tempfile::tempdir().unwrap();
    let shot = work.path().join("shot.png");
    let chrome = |extra: &[&str]| {
        let mut c = Command::new(&chromium);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--allow-file-access-from-files",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(format!("file://{}", html_path.display()));
        common::output_within(c, std::time::Duration::from_secs(120))
    };
    let dom = chrome(&["--dump-dom", "--virtual-time-budget=5000"]);
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<h1>snbuf report</h1>"), "{dom}");
    for id in &figures {
        assert!(
            dom.contains(&format!("<figure id=\"{id}\"")),
            "{id} not rendered"
        );
    }
    assert!(
        !dom.contains("data-broken=\"1\""),
        "an image failed to load in Chromium"
    );
    let o = chrome(&[
        &format!("--screenshot={}", shot.display()),
        "--window-size=1000,2400",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} B",
        png.len()
    );
}
