//! The one way a command writes to the terminal: its result on standard output (`say!`, what a
//! pipe or a script reads), notes on standard error (`note!`: what runs, what was written, what
//! was skipped), so that the two never mix. A reader that went away (`snbuf inspect | head`) ends
//! nothing: the line is dropped (where `println!` would panic), and the command finishes what it
//! writes elsewhere. Any other failure to write (a full disk under `> file`) is said in one line
//! and the command exits 1: its output is incomplete, and it must not look like it succeeded.

use std::fmt::Arguments;
use std::io::Write;

/// The outcome of a write to the terminal: a closed pipe is dropped, anything else ends the
/// command with exit code 1.
fn written(what: &str, r: std::io::Result<()>) {
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            let _ = writeln!(
                std::io::stderr(),
                "snbuf: error: {what} could not be written: {e}"
            );
            std::process::exit(1);
        }
        _ => {}
    }
}

/// Writes `args` and a newline to standard output.
pub fn say_line(args: Arguments) {
    let mut out = std::io::stdout().lock();
    let r = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush());
    written("the output", r);
}

/// Writes `text` as it is (a rendered table ends in its own newline) to standard output.
pub fn say_text(text: &str) {
    let mut out = std::io::stdout().lock();
    let r = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    written("the output", r);
}

/// Writes `args` and a newline to standard error.
pub fn note_line(args: Arguments) {
    let mut err = std::io::stderr().lock();
    let r = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
    written("a note", r);
}

/// A line of a command's result, on standard output: `say!("{} B", n)`.
#[macro_export]
macro_rules! say {
    () => { $crate::out::say_text("\n") };
    ($($arg:tt)*) => { $crate::out::say_line(format_args!($($arg)*)) };
}

/// A note for the person at the terminal, on standard error: `note!("wrote {}", path)`.
#[macro_export]
macro_rules! note {
    ($($arg:tt)*) => { $crate::out::note_line(format_args!($($arg)*)) };
}
