//! The command line: what each command takes, with help that teaches. One file per role, as
//! the commands group: `record` (record, serve, trigger, status), `report`, `show`, `emit`,
//! `fleet`, `export`; the suites' arguments (`snbuf bench`, `plan`) are the bench crate's and
//! the offline commands' (`convert`, `inspect`, `extract`) the offline crate's, each beside
//! the code that runs them. Values are parsed by `snbuf_quantity` (sizes, rates, durations,
//! counts), so every command reads them the same way.

mod emit;
mod export;
mod fleet;
mod record;
mod report;
mod show;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

pub use emit::EmitArgs;
pub use export::ExportArgs;
pub use fleet::{FleetBenchArgs, FleetCommand, FleetReadArgs, FleetSetupArgs, FleetStatusArgs};
pub use record::{NatsArgs, RecordArgs, ServeArgs, StatusArgs, TriggerArgs, UnitArgs};
pub use report::ReportArgs;
pub use show::ShowArgs;
pub use snbuf_bench::command::{BenchCommand, PlanArgs};
pub use snbuf_offline::command::{ConvertArgs, ExtractArgs, InspectArgs};

#[derive(Parser, Debug)]
#[command(
    name = "snbuf",
    version,
    about = "Trigger-driven persistent storage buffer for streaming detector data, and the suite \
             that measures whether a storage medium can carry it.",
    long_about = "snbuf persists a window of streaming detector data (a supernova-burst trigger in \
                  DUNE: ~100 s at ~10 GB/s per socket) through the fastest correct path the medium \
                  offers, and measures media the way the DUNE persistent-memory papers do.\n\n\
                  Start with `snbuf bench write` (persist throughput of /dev/shm, the pmem stand-in) \
                  or `snbuf methods` (what this machine can do)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Record a burst: emulated readout links feed DRAM latency buffers; after --trigger-after a
    /// trigger opens the window [trigger - pre, trigger + post); writer threads persist it as
    /// checksummed chunks, count every frame they could not save, seal the burst and verify it.
    ///
    ///   snbuf record                                  # 10 WIB links, ~8 s, into ./snbuf-data
    ///
    ///   snbuf record --links 4 --rate-per-link 200MB/s --pre 1s --post 5s --method direct
    ///
    ///   snbuf record --profile dune --output /mnt/pmem0   # the paper's unit: 10 x 0.93 GB/s, 100 s
    Record(Box<RecordArgs>),
    /// Run a unit that records on demand: links are emulated into their buffers continuously,
    /// and each trigger sent to its control socket (0600, this host only) records a burst.
    /// Takes the options of `record`, except --trigger-after and --json.
    ///
    ///   snbuf serve --links 4 &
    ///
    ///   snbuf trigger --pre 2s --post 5s --wait
    Serve(Box<ServeArgs>),
    /// Be a detector: send frames in DUNE's own layout, one per UDP datagram, at a set rate per
    /// link, on the detector's clock (a receiver agrees on time at any rate).
    ///
    ///   snbuf emit --to udp://127.0.0.1:5000 --links 4 --frame wibeth --rate-per-link 100MB/s
    ///
    ///   snbuf emit --to udp://127.0.0.1:5000 --replay link0.bin --replay link1.bin --duration 10s
    Emit(EmitArgs),
    /// Trigger a running `snbuf serve`: record the window around now (or --at TICKS).
    /// A trigger whose window begins at or after the start of the burst being recorded joins it
    /// (the burst's end moves out to hold it); one that comes as a burst ends, or while it is
    /// sealed, starts a burst of its own at once. Only one whose window begins before the burst
    /// being recorded is refused (over --nats it waits for that burst instead).
    Trigger(TriggerArgs),
    /// Show a running `snbuf serve`: links, the burst being recorded, past bursts.
    Status(StatusArgs),
    /// Size a unit (DUNE Fig 6): DRAM needed = (input rate - output rate) x recording time.
    ///
    ///   snbuf plan --input-rate 10GB/s --time 100s --output-rate 7GiB/s
    ///
    ///   snbuf plan --input-rate 10GB/s --time 100s --bench results.json --method nt --block-size 5568
    Plan(PlanArgs),
    /// Characterize a medium (the papers' measurements).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Check a recorded burst: every chunk's checksums, sequence and timestamps, the manifest,
    /// the trigger window's coverage. Changes nothing. Exit 0 valid, 1 problems found, 2 usage.
    ///
    ///   snbuf verify snbuf-data/20261121T231000Z-0001
    Verify {
        /// The burst directory.
        burst_dir: PathBuf,
        /// Print the full report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// After a crash: keep each link's longest valid prefix, cut off torn or corrupt tails
    /// (reporting file, offset, bytes and why), rebuild the manifest. Never invents data.
    ///
    ///   snbuf recover snbuf-data/20261121T231000Z-0001 --dry-run
    Recover {
        /// The burst directory.
        burst_dir: PathBuf,
        /// Say what would be done, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Convert a burst for offline analysis: DUNE HDF5 raw-data files (DUNE-DAQ release
    /// fddaq-coredaq-v5.7.1: hdf5libs file layout 6, FragmentHeader v6): one TimeSlice record per --slice of the window, one fragment per link (a DUNE
    /// FragmentHeader, then the link's frames unchanged; frames lost are marked incomplete).
    /// Needs a build with --features hdf5 (Debian: libhdf5-dev).
    ///
    ///   snbuf convert snbuf-data/20261121T231000Z-0001 --to dune-hdf5 converted/
    Convert(ConvertArgs),
    /// Look at a burst: an HTML page (figures as SVG and PNG beside it, the data behind them in
    /// show.json) with, on the detector's clock with the trigger at 0, each link's frames
    /// recorded and lost along the window, and for DUNE's frame types (WIBEth, TDEEth, WIB2,
    /// ProtoDUNE WIB, DAPHNE streams; not custom frames) a channel x time heat map of the baseline-subtracted signal, one channel's
    /// waveform, and each channel's baseline and noise with dead and noisy channels flagged.
    /// Reads only verified chunks, once, in bounded memory; says what it skipped.
    ///
    ///   snbuf show snbuf-data/20261121T231000Z-0001 --out snb-page
    ///
    ///   snbuf show snbuf-data/20261121T231000Z-0001 --link 3 --channel 17
    Show(ShowArgs),
    /// Look inside a burst: the manifest, each link's chunk headers (offset, sequence,
    /// timestamps, frames, CRC), and with --frames each frame's header decoded.
    ///
    ///   snbuf inspect snbuf-data/20261121T231000Z-0001 --link 0 --chunk 3 --frames
    Inspect(InspectArgs),
    /// Write one link's frames back to back, as DUNE's readout records them (`<SourceID>.bin`,
    /// which `snbuf record --replay` and DUNE's tools read), every chunk's CRC checked first.
    ///
    ///   snbuf extract snbuf-data/20261121T231000Z-0001 --link 0 --out link0.bin
    Extract(ExtractArgs),
    /// Plots and a report from a `snbuf bench paper` results directory: SVG and PNG figures
    /// named after the papers' (request rate vs block size, throughput vs threads, the app with
    /// and without PMDK, shared vs per-thread targets, the latency matrix, join and kernels),
    /// report.md and report.html with the machine and the tables.
    ///
    ///   snbuf report snbuf-results --out snbuf-report
    Report(ReportArgs),
    /// Send a sealed burst to an object store (S3 API: s3://BUCKET/PREFIX, endpoint in
    /// SNBUF_S3_ENDPOINT, credentials in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) or a directory
    /// (file:///DIR). At a bounded rate; resumable (parts already sent are not sent again);
    /// every object read back and checked (size, CRC-32C) before the burst is marked exported.
    ///
    ///   snbuf export snbuf-data/20261121T231000Z-0001 --to s3://dune-sn/apa-01 --rate 100MB/s
    Export(ExportArgs),
    /// A fleet of units over NATS: their status, and their burst events.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// The bursts under an output directory, one line each: id, state (sealed, recovered,
    /// failed, interrupted, recording), trigger time, window, size, frames lost, verified,
    /// exported.
    ///
    ///   snbuf ls                      # ./snbuf-data
    ///
    ///   snbuf ls /data/snbuf --verify --json
    Ls {
        /// The output directory (default ./snbuf-data).
        #[arg(default_value = "snbuf-data")]
        dir: PathBuf,
        /// Verify every burst now (reads all its data) instead of showing the recorder's check.
        #[arg(long)]
        verify: bool,
        /// Print as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script: bash, zsh, fish, elvish or powershell.
    ///
    ///   snbuf completions bash > /etc/bash_completion.d/snbuf
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write man pages for snbuf and every subcommand into a directory.
    ///
    ///   snbuf man /usr/local/share/man/man1
    Man {
        /// Where the pages go (created if missing).
        dir: PathBuf,
    },
    /// List the persistence methods, what each does and whether it is available here.
    Methods {
        /// Also probe this target (directory or file): its file system, DAX, alignment.
        #[arg(long)]
        target: Option<PathBuf>,
    },
}

impl Command {
    /// Commands whose only output is their report (no socket, no network): they may end
    /// quietly when the pipe they print into closes (`snbuf ls | head -1`).
    pub fn writes_only_to_the_terminal(&self) -> bool {
        matches!(
            self,
            Command::Ls { .. }
                | Command::Inspect(_)
                | Command::Verify { .. }
                | Command::Recover { .. }
                | Command::Methods { .. }
                | Command::Plan(_)
                | Command::Completions { .. }
                | Command::Man { .. }
                | Command::Extract(_)
        )
    }
}

#[cfg(test)]
mod help_defaults_tests;
