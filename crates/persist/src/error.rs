//! Typed errors of the persistence engine. Every I/O error names the operation and the file.

use std::io;
use std::path::PathBuf;

use crate::Method;

#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    // The OS error is part of the message, not a `source`: chained error printers would repeat it.
    #[error("{op} {path}: {cause}")]
    Io {
        op: &'static str,
        path: PathBuf,
        cause: io::Error,
    },
    #[error("{op} {path}: no space left on the target file system")]
    NoSpace { op: &'static str, path: PathBuf },
    #[error("{op} {path}: wrote {written} of {expected} bytes and could not go on")]
    ShortWrite {
        op: &'static str,
        path: PathBuf,
        written: usize,
        expected: usize,
    },
    #[error("{path}: an earlier {cause}; the sink is latched failed and accepts no more writes")]
    Latched { path: PathBuf, cause: String },
    #[error("method {method} is not available: {why}")]
    Unsupported { method: Method, why: String },
    #[error("{len} B at offset {offset} is outside the region of {region_bytes} B")]
    OutOfRange {
        offset: u64,
        len: usize,
        region_bytes: u64,
    },
    #[error("offset {offset} is not a multiple of the {alignment_bytes} B direct-I/O alignment")]
    Misaligned { offset: u64, alignment_bytes: u64 },
    #[error("a {len} B write is larger than the {max_bytes} B the sink was opened for")]
    TooLarge { len: usize, max_bytes: usize },
    #[error("{op} {path}: nothing completed within {waited:?}: the device stopped answering")]
    Stalled {
        op: &'static str,
        path: PathBuf,
        waited: std::time::Duration,
    },
    #[error("{0}")]
    Config(String),
}

impl PersistError {
    /// Wraps an OS error, turning ENOSPC into the `NoSpace` case that callers report plainly.
    pub fn io(op: &'static str, path: impl Into<PathBuf>, cause: io::Error) -> Self {
        let path = path.into();
        let e = if cause.raw_os_error() == Some(libc::ENOSPC) {
            PersistError::NoSpace { op, path }
        } else {
            PersistError::Io { op, path, cause }
        };
        debug_assert!(
            e.poisons_sink(),
            "an OS error leaves the target in an unknown state"
        );
        e
    }

    /// True for errors that leave the target in an unknown state: after one of these a sink must
    /// never be used again as if nothing happened (see `latch`). Caller mistakes (out of range,
    /// misaligned, too large) are refused before anything is written and do not poison the sink.
    pub fn poisons_sink(&self) -> bool {
        matches!(
            self,
            PersistError::Io { .. }
                | PersistError::NoSpace { .. }
                | PersistError::ShortWrite { .. }
                | PersistError::Stalled { .. }
                | PersistError::Latched { .. }
        )
    }
}

pub type Result<T, E = PersistError> = std::result::Result<T, E>;
