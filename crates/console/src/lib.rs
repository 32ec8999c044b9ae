//! snbuf-console: what every command shows on the terminal and how it says the user was wrong.
//! Aligned tables in human units (`table`), progress bars with the time left (`progress`), and
//! the usage error: a mistake in the command (a bad option, a path that cannot be used), which
//! the binary turns into exit code 2, the same as clap's.

#![forbid(unsafe_code)]

pub mod progress;
pub mod table;

pub use table::Table;

/// Marks an error as the user's input being wrong, for exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// An error that says the command was wrong (exit code 2).
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}
