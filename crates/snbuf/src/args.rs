//! Checks of command-line values that several commands share.

use std::path::Path;

use crate::exit::usage;

/// A file snbuf will write at the end must have somewhere to go: refused now, not after a run.
pub fn check_parent_dir(flag: &str, path: &Path) -> anyhow::Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(usage(format!(
            "{flag} {}: {} is not a directory",
            path.display(),
            parent.display()
        )));
    }
    Ok(())
}
