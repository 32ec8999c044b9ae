//! Progress bars on the terminal for anything that runs longer than a second or two, with the
//! time left.

use indicatif::{ProgressBar, ProgressStyle};

/// A progress bar over `len` steps, with the time left.
pub fn bar(len: u64) -> ProgressBar {
    let b = ProgressBar::new(len);
    b.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len}, about {eta} left  {msg}",
        )
        .expect("the template is valid"),
    );
    b
}

/// A step callback for a suite's runner that advances `bar`.
pub fn steps(bar: &ProgressBar) -> impl FnMut(&str) + '_ {
    |label: &str| {
        bar.set_message(label.to_string());
        bar.inc(1);
    }
}

/// A progress bar over bytes read, with the rate and the time left.
pub fn bytes_bar() -> ProgressBar {
    let b = ProgressBar::new(0);
    b.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {bytes}/{total_bytes} ({bytes_per_sec}), about {eta} left",
        )
        .expect("the template is valid"),
    );
    b
}
