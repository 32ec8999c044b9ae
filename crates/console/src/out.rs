//! The one way a command writes to the terminal: its result on standard output (`say!`, what a
//! pipe or a script reads), notes on standard error (`note!`: what runs, what was written, what
//! was skipped), so that the two never mix. A reader that went away (`snbuf inspect | head`) ends
//! nothing: the line is dropped, where `println!` would panic.

use std::fmt::Arguments;
use std::io::Write;

/// Writes `args` and a newline to standard output.
pub fn say_line(args: Arguments) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_fmt(args).and_then(|()| out.write_all(b"\n"));
}

/// Writes `text` as it is (a rendered table ends in its own newline) to standard output.
pub fn say_text(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

/// Writes `args` and a newline to standard error.
pub fn note_line(args: Arguments) {
    let mut err = std::io::stderr().lock();
    let _ = err.write_fmt(args).and_then(|()| err.write_all(b"\n"));
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
