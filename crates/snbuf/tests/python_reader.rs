//! The Python package (`python/`, numpy only) against bursts this binary records: its pytest
//! suite, run with Debian's python3 (needs python3-numpy and python3-pytest; skipped without
//! them unless SNBUF_REQUIRE_PYTEST is set, as in CI).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

#[test]
fn the_python_reader_agrees_with_the_binary() {
    let Some(python) = common::installed_tool(
        [PathBuf::from("/usr/bin/python3")],
        "SNBUF_REQUIRE_PYTEST",
        "apt-get install python3-numpy python3-pytest",
    ) else {
        return;
    };
    let has = |module: &str| {
        common::succeeds_within(
            Command::new(&python).args(["-c", &format!("import {module}")]),
            Duration::from_secs(60),
        )
    };
    if !(has("numpy") && has("pytest")) {
        assert!(
            std::env::var_os("SNBUF_REQUIRE_PYTEST").is_none(),
            "SNBUF_REQUIRE_PYTEST is set but numpy or pytest is missing"
        );
        eprintln!(
            "skip: numpy or pytest is not installed for {}",
            python.display()
        );
        return;
    }
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python");
    let mut c = Command::new(&python);
    c.args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
        .current_dir(&package)
        .env("SNBUF_BIN", env!("CARGO_BIN_EXE_snbuf"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let o = common::output_within(c, Duration::from_secs(600));
    assert!(
        o.status.success(),
        "pytest failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        common::stderr(&o)
    );
}
