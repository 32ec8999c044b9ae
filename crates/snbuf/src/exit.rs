//! Exit codes: 0 success, 1 the run failed or found data problems (I/O error, full disk, a burst
//! that does not verify), 2 the command was wrong (bad option, a path that cannot be used) — the
//! same 2 clap uses.

pub use snbuf_console::{usage, Failure, UsageError};
pub use snbuf_offline::command::read_error;

pub fn code_for(e: &anyhow::Error) -> u8 {
    if e.chain().any(|c| c.is::<UsageError>()) {
        2
    } else {
        1
    }
}
