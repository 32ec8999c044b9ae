//! A burst over several outputs (devices, pmem namespaces): which output holds which link's
//! file, and how a reader still finds every file in the burst directory.
//!
//! The first output is the burst's home: `<home>/<burst-id>/` holds the manifest and the files
//! of the links it keeps. A link on another output has its file in `<output>/<burst-id>/`, and
//! the burst directory holds a symbolic link to it under the usual name (`link-0003.dat`), so
//! everything that reads a burst (`verify`, `recover`, `export`, `inspect`, `convert`, the Python
//! reader) opens the same paths as for a burst on one output. The manifest names where each such
//! file lives (`path`). Links go round-robin over the outputs (link i of the burst's links on
//! output i mod n), the papers' non-interleaved layout: each device carries whole links.

use std::path::{Path, PathBuf};

use crate::manifest::Manifest;

/// The output that holds the `index`-th link of a burst written to `outputs` (home first).
pub fn output_for(outputs: &[PathBuf], index: usize) -> &Path {
    assert!(!outputs.is_empty(), "a burst has at least one output");
    let output = &outputs[index % outputs.len()];
    debug_assert!(index >= outputs.len() || output == &outputs[index]);
    output
}

/// Removes a burst: its directory and, for links whose files live on other outputs, those files
/// and their directories there (once empty). What cannot be removed is reported, not ignored.
pub fn remove_burst(dir: &Path) -> std::io::Result<()> {
    let elsewhere: Vec<PathBuf> = Manifest::read(dir)
        .map(|m| {
            m.links
                .iter()
                .filter_map(|l| l.path.as_ref().map(PathBuf::from))
                .collect()
        })
        .unwrap_or_default();
    for file in &elsewhere {
        match std::fs::remove_file(file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        if let Some(parent) = file.parent() {
            // Empty once its links' files are gone; another burst's directory never is.
            let _ = std::fs::remove_dir(parent);
        }
    }
    std::fs::remove_dir_all(dir)
}
