//! Arguments of the commands that take a burst to its readers: `convert`, `inspect`, `extract`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use snbuf_quantity::values::{parse_duration_nonzero, parse_size_nonzero};

pub use crate::filter::Hdf5Filter;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConvertTo {
    /// DUNE HDF5 raw-data files (hdf5libs file layout 6, TimeSlice records).
    DuneHdf5,
}

#[derive(Args, Debug, Clone)]
pub struct ConvertArgs {
    /// The burst directory.
    pub burst_dir: PathBuf,
    /// The format: dune-hdf5.
    #[arg(long, value_enum, default_value = "dune-hdf5")]
    pub to: ConvertTo,
    /// Where the files go (created if missing; existing files are never overwritten).
    pub out_dir: PathBuf,
    /// The length of one record (TimeSlice), in the detector's time: no fragment is longer.
    #[arg(long, value_name = "TIME", default_value = "1s", value_parser = parse_duration_nonzero)]
    pub slice: Duration,
    /// Start a new file before a record would take a file past this size.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_size_nonzero)]
    pub max_file_size: u64,
    /// The files' operational_environment attribute and the first part of their names.
    #[arg(long, value_name = "NAME", default_value = "snbuf")]
    pub operational_environment: String,
    /// The files' offline_data_stream attribute.
    #[arg(long, value_name = "NAME", default_value = "snb")]
    pub offline_data_stream: String,
    /// Mark the files as from a run for test purposes.
    #[arg(long)]
    pub test_run: bool,
    /// Store each fragment through this HDF5 filter. Of the standard filters measured on the
    /// detector's data as DUNE's files hold it (`snbuf bench codec`), blosc-zstd keeps the
    /// fewest bytes at a usable speed; DUNE's own files are unfiltered.
    #[arg(long, value_enum, value_name = "FILTER", default_value = "none")]
    pub filter: Hdf5Filter,
    /// Write a summary as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct InspectArgs {
    /// The burst directory.
    pub burst_dir: PathBuf,
    /// Only this link.
    #[arg(long, value_name = "N")]
    pub link: Option<u32>,
    /// Only this chunk (by sequence number) of each link shown.
    #[arg(long, value_name = "K")]
    pub chunk: Option<u64>,
    /// Decode each frame's header: crate, slot, stream, seq_id, timestamp.
    #[arg(long)]
    pub frames: bool,
    /// Dump each frame's first 64 bytes in hex (with --frames).
    #[arg(long)]
    pub hex: bool,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ExtractArgs {
    /// The burst directory.
    pub burst_dir: PathBuf,
    /// The link whose frames to extract.
    #[arg(long, value_name = "N")]
    pub link: u32,
    /// The file to write (must not exist): frames back to back, as DUNE's readout records them.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// From this detector timestamp (ticks; default: the first frame).
    #[arg(long, value_name = "TICKS")]
    pub from: Option<u64>,
    /// Up to this detector timestamp, excluded (ticks; default: past the last frame).
    #[arg(long, value_name = "TICKS")]
    pub to: Option<u64>,
}
