//! `snbuf report` and `snbuf plan`: what is made of the suites' results. The suites' own
//! arguments (`snbuf bench ...`) are the bench crate's (`snbuf_bench::command`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use snbuf_quantity::values::{parse_duration_nonzero, parse_size_nonzero};

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// A results directory written by `snbuf bench paper`.
    #[arg(value_name = "RESULTS_DIR")]
    pub results: PathBuf,
    /// Where the plots (SVG and PNG), report.md and report.html go.
    #[arg(long, value_name = "DIR", default_value = "snbuf-report")]
    pub out: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct PlanArgs {
    /// Input rate of the unit: 10GB/s.
    #[arg(long, value_name = "RATE")]
    pub input_rate: String,
    /// How long a trigger records: 100s.
    #[arg(long, value_name = "TIME", value_parser = parse_duration_nonzero)]
    pub time: Duration,
    /// The medium's sustained write rate, if known.
    #[arg(long, value_name = "RATE", conflicts_with = "bench")]
    pub output_rate: Option<String>,
    /// Or: a `snbuf bench write --json` results file to take the output rate from.
    #[arg(long, value_name = "FILE")]
    pub bench: Option<PathBuf>,
    /// With --bench: the method to take (default: the fastest in the file).
    #[arg(long)]
    pub method: Option<String>,
    /// With --bench: the block size to take (default: any).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_nonzero)]
    pub block_size: Option<u64>,
}
