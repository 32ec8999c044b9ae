//! `snbuf show` through the real binary on a recorded burst that lost frames (a medium slower
//! than its links): the page says as many frames missing as the recorder counted lost, in gaps
//! along the window; `--json` prints the page's data; the page renders in headless Chromium
//! (Debian's chromium) with every figure and no broken image. Without Chromium the rendering
//! part skips and says so, unless SNBUF_REQUIRE_CHROMIUM is set (CI sets it).

mod common;

use std::process::Command;

use common::{installed_tool, small_recording, snbuf, snbuf_owned, stderr};
use serde_json::Value;
use snbuf_burst::Manifest;

#[test]
fn a_lossy_burst_shows_its_loss_and_renders_in_chromium() {
    let work = tempfile::tempdir().unwrap();
    let rec = small_recording(
        work.path(),
        "lossy",
        &[
            ("--frame", "wibeth"),
            ("--rate-per-link", "20MB/s"),
            ("--buffer", "300ms"),
            ("--pre", "200ms"),
            ("--inject-fault", "slow:rate=8MB/s"),
        ],
    );
    let o = snbuf_owned(&rec);
    assert!(o.status.success(), "{}", stderr(&o));
    let burst = work.path().join("lossy");
    let m = Manifest::read(&burst).unwrap();
    let lost: u64 = m.links.iter().map(|l| l.lost_frames).sum();
    assert!(lost > 0, "the recording lost frames");
    let page = work.path().join("page");
    let o = snbuf(&[
        "show",
        burst.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let shown: Value = serde_json::from_slice(&o.stdout).unwrap();
    let mut missing = 0;
    for (l, rec) in shown["links"].as_array().unwrap().iter().zip(&m.links) {
        assert_eq!(l["frames"], rec.data.frames, "every stored frame read");
        let gap_frames: u64 = l["gaps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["frames"].as_u64().unwrap())
            .sum();
        let link_missing = l["expected_frames"].as_u64().unwrap() - rec.data.frames;
        assert_eq!(
            gap_frames, link_missing,
            "the gaps hold every missing frame"
        );
        missing += link_missing;
    }
    assert_eq!(missing, lost, "as many missing as the recorder lost");
    assert!(stderr(&o).contains("page: "), "{}", stderr(&o));
    let html_path = page.join("index.html");
    let html = std::fs::read_to_string(&html_path).unwrap();
    assert!(html.contains("Every chunk in the window was read"));
    let figures: Vec<String> = html
        .split("<figure id=\"")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap()].to_string())
        .collect();
    assert!(figures.len() >= 11, "{figures:?}");
    // Shown again into the same directory: the page is rewritten. Into a directory of other
    // files: refused, the files untouched.
    let again = snbuf(&[
        "show",
        burst.to_str().unwrap(),
        "--out",
        page.to_str().unwrap(),
    ]);
    assert!(again.status.success(), "{}", stderr(&again));
    let other = work.path().join("notes");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("index.html"), "mine").unwrap();
    let o = snbuf(&[
        "show",
        burst.to_str().unwrap(),
        "--out",
        other.to_str().unwrap(),
    ]);
    common::assert_refused(&o, 2, "other files");
    assert_eq!(
        std::fs::read_to_string(other.join("index.html")).unwrap(),
        "mine"
    );

    let Some(chromium) = installed_tool(
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"].map(std::path::PathBuf::from),
        "SNBUF_REQUIRE_CHROMIUM",
        "Chromium, to render the page: apt-get install chromium",
    ) else {
        return;
    };
    let profile = tempfile::tempdir().unwrap();
    let mut c = Command::new(&chromium);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--allow-file-access-from-files",
        "--dump-dom",
        "--virtual-time-budget=5000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("file://{}", html_path.display()));
    let dom = common::output_within(c, std::time::Duration::from_secs(120));
    assert!(dom.status.success(), "{}", stderr(&dom));
    let dom = String::from_utf8_lossy(&dom.stdout);
    assert!(dom.contains("<h1>Burst lossy</h1>"), "{dom}");
    for id in &figures {
        assert!(dom.contains(&format!("<figure id=\"{id}\"")), "{id}");
    }
    assert!(
        !dom.contains("data-broken=\"1\""),
        "an image failed to load in Chromium"
    );
}
