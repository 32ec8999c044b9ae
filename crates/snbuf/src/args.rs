//! Checks of command-line values that several commands share.

use std::path::Path;

use crate::exit::usage;

/// A file a command will write must have somewhere to go: refused now (exit 2), not after a run.
pub fn check_parent_dir(flag: &str, path: &Path) -> anyhow::Result<()> {
    snbuf_unit::config::check_parent_dir(flag, path).map_err(|e| usage(e.to_string()))
}
