//! snbuf-console: what every command shows on the terminal and how it says the user was wrong.
//! Results and notes (`out`: `say!` on standard output, `note!` on standard error), aligned
//! tables in human units (`table`), progress bars with the time left (`progress`), and
//! the two errors that set a command's exit code: a usage error, a mistake in the command (a
//! bad option, a path that cannot be used: exit 2, the same as clap's), and a failure already
//! said in full (exit 1, one line).

#![forbid(unsafe_code)]

pub mod out;
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

/// A finding already printed in full (a burst that does not verify): exit 1 with one line.
#[derive(Debug)]
pub struct Failure(pub String);

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

/// An error that says the command was wrong (exit code 2).
pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(msg.into()))
}
