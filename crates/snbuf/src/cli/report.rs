//! `snbuf report`: the figures and pages made of a paper run's results. The suites' own
//! arguments (`snbuf bench ...`, `snbuf plan`) are the bench crate's (`snbuf_bench::command`).

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// A results directory written by `snbuf bench paper`.
    #[arg(value_name = "RESULTS_DIR")]
    pub results: PathBuf,
    /// Where the plots (SVG and PNG), report.md and report.html go.
    #[arg(long, value_name = "DIR", default_value = "snbuf-report")]
    pub out: PathBuf,
}
