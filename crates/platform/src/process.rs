//! Process-wide behaviour a command line needs from the operating system.

/// Ends the process silently, as `ls` or `cat` do, when its output is a pipe whose reader has
/// gone (`snbuf ls | head -1`): the default action of SIGPIPE, which Rust programs start with
/// ignored (a write would then fail with EPIPE, and `println!` panic on it). Only for commands
/// that write to no socket: a server must not die when one client hangs up.
pub fn exit_quietly_on_broken_pipe() {
    // SAFETY: signal(2) with a valid signal number and SIG_DFL; no handler code runs.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
