//! Why a benchmark cannot run, or why its figure cannot be believed. A configuration the
//! machine cannot run is the user's to change; a figure whose data did not read back, or that
//! no operation produced, is refused rather than reported.

use std::path::PathBuf;

use snbuf_persist::{Method, PersistError};

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Config(String),
    #[error("target {path}: {why}")]
    Target { path: PathBuf, why: String },
    #[error("{method}, {block} B, {threads} thread(s): {cause}")]
    Persist {
        method: Method,
        block: u64,
        threads: usize,
        cause: PersistError,
    },
    /// The data read back is not what was written: the figure would not be real.
    #[error("{method}, {block} B, {threads} thread(s): {what}: the figure would not be real")]
    Integrity {
        method: Method,
        block: u64,
        threads: usize,
        what: String,
    },
    #[error("{0}")]
    Implausible(String),
    #[error("bench {suite}: {cause}")]
    Suite {
        suite: &'static str,
        cause: std::io::Error,
    },
    #[error("write {path}: {cause}")]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
}
