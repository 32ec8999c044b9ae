//! Logs of a running unit (`snbuf serve`): `tracing` events, one per line, with the unit, the
//! link and the burst as fields; levels filtered by RUST_LOG (default `info`); plain text for a
//! person or JSON (`--log-format json`) for a collector (journald, Loki, Elasticsearch). A unit
//! outlives its terminal: when stderr is gone, lines are dropped, never the unit.

use std::io::{IsTerminal, Write};

use clap::ValueEnum;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::EnvFilter;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// stderr, whose write errors (a closed pipe, a gone terminal) are swallowed.
#[derive(Clone, Copy)]
pub struct QuietStderr;

impl Write for QuietStderr {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stderr().write_all(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stderr().flush();
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for QuietStderr {
    type Writer = QuietStderr;
    fn make_writer(&'a self) -> Self::Writer {
        QuietStderr
    }
}

/// For a command that is not a service (`record`, `verify`, ...): what the libraries log at
/// warning level or worse (RUST_LOG widens it), to stderr as text without a time stamp; its own
/// output the command prints itself.
pub fn init_for_command() {
    // snbuf's own crates only (targets `snbuf*`): a library's internal error (the NATS client
    // on refused credentials) is the command's one-line error, not lines of its own.
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("snbuf=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(QuietStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false)
        .without_time()
        .try_init();
}

/// Installs the subscriber for a service (`snbuf serve`).
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(QuietStderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}
