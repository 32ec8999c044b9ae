//! The files a sweep writes: a temporary file in each directory target, removed at the end, or
//! the user's own file, kept.

use std::path::{Path, PathBuf};

use crate::error::BenchError;
use crate::throughput::config::ThroughputConfig;

/// The files a sweep writes: a temporary file per directory target (removed on drop), or the
/// user's file as given (kept).
pub struct TargetFiles {
    files: Vec<(PathBuf, bool)>,
}

impl TargetFiles {
    pub fn prepare(config: &ThroughputConfig) -> Result<Self, BenchError> {
        let mut files = Vec::new();
        for (i, t) in config.targets.iter().enumerate() {
            if t.is_dir() {
                let path = t.join(format!("snbuf-bench-{}-{i}.dat", std::process::id()));
                // Creating it now turns an unwritable directory into an error before the sweep.
                std::fs::File::create(&path).map_err(|e| BenchError::Target {
                    path: t.clone(),
                    why: format!("cannot create a file there: {e}"),
                })?;
                files.push((path, true));
            } else {
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(t)
                    .map_err(|e| BenchError::Target {
                        path: t.clone(),
                        why: format!("cannot open for writing: {e}"),
                    })?;
                files.push((t.clone(), false));
            }
        }
        Ok(TargetFiles { files })
    }

    pub fn paths(&self) -> Vec<&Path> {
        self.files.iter().map(|(p, _)| p.as_path()).collect()
    }
}

impl Drop for TargetFiles {
    fn drop(&mut self) {
        for (p, owned) in &self.files {
            if *owned {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}
