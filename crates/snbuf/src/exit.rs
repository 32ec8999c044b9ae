//! Exit codes: 0 success, 1 the run failed or found data problems (I/O error, full disk, a burst
//! that does not verify), 2 the command was wrong (bad option, a path that cannot be used) — the
//! same 2 clap uses.

pub use snbuf_console::{usage, UsageError};

/// A finding already printed in full (a burst that does not verify): exit 1 with one line.
#[derive(Debug)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// A path that is not a burst, or a link it does not have, is the user's mistake (exit 2); any
/// other failure to read a burst is the run's (exit 1).
pub fn read_error(e: snbuf_burst::ReadError) -> anyhow::Error {
    use snbuf_burst::manifest::ManifestError;
    use snbuf_burst::ReadError;
    match e {
        ReadError::Manifest(ManifestError::Missing { .. })
        | ReadError::Manifest(ManifestError::Invalid { .. })
        | ReadError::NoSuchLink { .. }
        | ReadError::NoFrameType { .. } => usage(format!("{e} (is it a burst directory?)")),
        other => anyhow::Error::new(other),
    }
}

pub fn code_for(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<UsageError>()) {
        2
    } else {
        1
    }
}
