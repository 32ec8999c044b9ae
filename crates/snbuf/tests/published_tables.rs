//! Every generated table in BENCHMARKS.md and RELIABILITY.md is what `bench/tables.py` makes from
//! the raw results kept under bench/results/: a figure typed by hand, or a result changed without
//! its table, fails here.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{output_within, stderr};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `python3 bench/tables.py --check` on the tree at `root`.
fn check(root: &Path) -> std::process::Output {
    let mut c = Command::new("python3");
    c.arg(root.join("bench/tables.py"))
        .arg("--check")
        .arg("--root")
        .arg(root);
    output_within(c, Duration::from_secs(60))
}

#[test]
fn the_published_tables_are_what_the_kept_results_give() {
    let o = check(&root());
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `from` copied to `to`, folders and all (a kept `snbuf bench paper` run is a folder).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_tree(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

#[test]
fn a_table_changed_by_hand_is_caught() {
    // A copy of what the check reads, with one figure of the ingest table changed.
    let copy = tempfile::tempdir().unwrap();
    let bench = copy.path().join("bench");
    std::fs::create_dir_all(bench.join("results")).unwrap();
    std::fs::copy(root().join("bench/tables.py"), bench.join("tables.py")).unwrap();
    copy_tree(&root().join("bench/results"), &bench.join("results"));
    for doc in ["BENCHMARKS.md", "RELIABILITY.md"] {
        std::fs::copy(root().join(doc), copy.path().join(doc)).unwrap();
    }
    assert!(
        check(copy.path()).status.success(),
        "the copy checks as the tree does"
    );
    let path = copy.path().join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find("<!-- table ingest:")
        .expect("BENCHMARKS.md has the ingest table");
    let row = start + text[start..].find("| snbuf, GRO").expect("its GRO row");
    let digit = row + text[row..].find(|c: char| c.is_ascii_digit()).unwrap();
    let mut tampered = text.clone();
    let d = text.as_bytes()[digit];
    tampered.replace_range(digit..digit + 1, if d == b'9' { "8" } else { "9" });
    std::fs::write(&path, tampered).unwrap();
    let o = check(copy.path());
    assert!(
        !o.status.success(),
        "a hand-changed figure passed the check"
    );
    assert!(stderr(&o).contains("BENCHMARKS.md"), "{}", stderr(&o));
}
