//! `snbuf export`: a sealed burst to an object store or a directory.

use std::path::PathBuf;

use clap::Args;
use snbuf_quantity::values::parse_size_nonzero;

#[derive(Args, Debug, Clone)]
pub struct ExportArgs {
    /// The burst directory.
    #[arg(value_name = "BURST_DIR")]
    pub burst_dir: PathBuf,
    /// Where to: s3://BUCKET/PREFIX or file:///DIR.
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// At most this rate (e.g. 100MB/s), so that exporting never starves recording.
    #[arg(long, value_name = "RATE")]
    pub rate: Option<String>,
    /// Multipart part size (at least 5 MiB for S3).
    #[arg(long, value_name = "SIZE", default_value = "16MiB", value_parser = parse_size_nonzero)]
    pub part_size: u64,
    /// Remove the local burst once every object has been read back and matched.
    #[arg(long)]
    pub delete_after_verify: bool,
    /// How link files travel: `none`, as they are; `frames`, through snbuf's lossless frame
    /// codec (about a third of the bytes of DUNE's ADC data), each as `<file>.snbl`, with a
    /// manifest that says so. `snbuf verify`, `extract`, `convert` and `show` read such a copy
    /// as the burst it is, and so does the Python reader.
    #[arg(long, value_name = "CODEC", default_value = "none")]
    pub codec: snbuf_export::ExportCodec,
    #[arg(long)]
    pub json: bool,
    /// A config file whose `[s3]` table holds endpoint, region, access_key_id and
    /// secret_access_key (over the environment).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// For benchmarks: upload the files again as plain multipart uploads (keys ending in .raw,
    /// no journal, no checks, no pacing) and print that rate beside the export's.
    #[arg(long, hide = true)]
    pub raw_compare: bool,
}
