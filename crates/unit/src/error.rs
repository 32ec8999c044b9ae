//! Why a unit could not start, or a trigger could not be recorded.

use std::path::PathBuf;

use crate::config::ConfigError;
use crate::window::WindowError;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Window(#[from] WindowError),
    #[error("{what} {path}: {cause}")]
    OutputDir {
        what: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("the latency buffers need {} and this machine (or its memory cgroup) has {} available: lower --buffer, --rate-per-link or --links", snbuf_quantity::Bytes(*need_bytes), snbuf_quantity::Bytes(*available_bytes))]
    NotEnoughMemory {
        need_bytes: u64,
        available_bytes: u64,
    },
    #[error("latency buffer for link {link}: {cause}")]
    Buffer { link: u32, cause: std::io::Error },
    #[error("start the {thread} thread: {cause}")]
    Thread {
        thread: String,
        cause: std::io::Error,
    },
    #[error("{dir}: no room left (space, or memory on a memory-backed file system) for even one chunk per link")]
    NoSpace { dir: PathBuf },
    #[error("a writer thread panicked; the burst {dir} is unsealed, run `snbuf recover`")]
    WriterPanicked { dir: PathBuf },
    #[error(transparent)]
    Burst(#[from] snbuf_burst::BurstError),
    #[error("verify the sealed burst: {0}")]
    Verify(#[from] snbuf_burst::verify::BurstDirError),
    #[error("a burst is being recorded; this trigger is refused (retry when it is sealed)")]
    Busy,
    #[error("the recording failed inside snbuf ({0}); the burst is left for `snbuf recover`, and the unit takes triggers again")]
    Panicked(String),
}

/// What a caught panic said (its message, when it has one).
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

impl From<snbuf_burst::OpenError> for RecordError {
    fn from(e: snbuf_burst::OpenError) -> RecordError {
        match e {
            snbuf_burst::OpenError::NoSpace { dir } => RecordError::NoSpace { dir },
            snbuf_burst::OpenError::Burst(e) => RecordError::Burst(e),
        }
    }
}

impl RecordError {
    /// Whether the caller asked for something that cannot be (exit 2 on the command line), as
    /// opposed to the machine failing to do it.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            RecordError::Config(_) | RecordError::Window(_) | RecordError::NotEnoughMemory { .. }
        )
    }
}
