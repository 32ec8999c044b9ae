//! `snbuf show`: a burst as pictures.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct ShowArgs {
    /// The burst directory.
    pub burst_dir: PathBuf,
    /// Where the page goes (default ./show-<burst id>); created if missing.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Only this link (repeat for several; default: every link).
    #[arg(long, value_name = "N")]
    pub link: Vec<u32>,
    /// Draw this channel's waveform (default: each link's channel of largest excursion).
    #[arg(long, value_name = "C")]
    pub channel: Option<usize>,
    /// Screen columns of the ADC displays: each keeps its smallest and largest sample.
    #[arg(long, value_name = "N", default_value_t = 800, value_parser = clap::value_parser!(u32).range(16..=20000))]
    pub columns: u32,
    /// Print what the page shows as JSON on stdout (the page's show.json).
    #[arg(long)]
    pub json: bool,
}
