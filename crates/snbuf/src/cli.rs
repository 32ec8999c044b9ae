//! The command line: what each command takes, with help that teaches.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    ///   snbuf record                                  # 10 WIB links, ~10 s, into ./snbuf-data
    ///
    ///   snbuf record --links 4 --rate-per-link 200MB/s --pre 1s --post 5s --method direct
    ///
    ///   snbuf record --profile dune --output /mnt/pmem0   # the paper's unit: 10 x 0.93 GB/s, 100 s
    Record(Box<RecordArgs>),
    /// Run a unit that records on demand: links are emulated into their buffers continuously,
    /// and each trigger sent to its control socket (0600, this host only) records a burst.
    /// Takes the options of `record` (except --trigger-after).
    ///
    ///   snbuf serve --links 4 &
    ///
    ///   snbuf trigger --pre 2s --post 5s --wait
    Serve(Box<ServeArgs>),
    /// Trigger a running `snbuf serve`: record the window around now (or --at TICKS).
    /// One burst at a time: a trigger while a burst is being recorded is refused.
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
    /// List the persistence methods, what each does and whether it is available here.
    Methods {
        /// Also probe this target (directory or file): its file system, DAX, alignment.
        #[arg(long)]
        target: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Persist throughput, request rate and latency vs block size and threads (DUNE Figs 2, 3, 5).
    ///
    /// Each operation copies one block from DRAM to the target and, by default, makes it durable
    /// (--persist-every op), which is what a request means in the papers. Example:
    ///
    ///   snbuf bench write --target /dev/shm --method nt,clwb --block-size 256,4KiB,1MiB --threads 1,2
    ///
    ///   snbuf bench write --target /var/tmp --method direct,uring --block-size 4KiB,1MiB --persist-every end
    Write(Box<ThroughputArgs>),
    /// Read throughput, request rate and latency vs block size and threads (DUNE Fig 3, Table II).
    ///
    /// The region is prefilled with position-stamped data, then read by walking it (never one
    /// cached line); every read is checked. direct and uring bypass the page cache. Example:
    ///
    ///   snbuf bench read --target /var/tmp --method direct,uring --block-size 256,4KiB,1MiB
    Read(Box<ThroughputArgs>),
    /// Latency of single 64 B accesses, and of each way to make a store durable, in DRAM and on
    /// the target (Yoshioka et al.): load, load+lfence, load+mfence, store+sfence, ntstore+sfence,
    /// store+clflush, store+clflushopt+sfence, store+clwb+sfence; sequential and random, with
    /// the matching throughput. Timed with RDTSCP; every line flushed before it is timed.
    ///
    ///   snbuf bench latency --target /mnt/pmem0 --json latency.json
    Latency(LatencyArgs),
    /// A hash join with its table in DRAM or on the target (Yoshioka et al.): build under one
    /// giant lock of each type for 1..N threads, then a lock-free probe for 1..N threads. The
    /// join's count and checksum are checked against what the generated tables imply.
    ///
    ///   snbuf bench join --table-on target --target /mnt/pmem0 --r-rows 4M --s-rows 16M
    Join(JoinArgs),
    /// PolyBench-style kernels (gemm, 2mm, atax, mvt, jacobi-2d) with their arrays in DRAM and on
    /// the target, at 4 KiB and 2 MiB pages (Mason et al.). Records the page size granted;
    /// checks each result against a reference run.
    ///
    ///   snbuf bench kernels --target /mnt/pmem0 --page-size 4KiB,2MiB
    Kernels(KernelsArgs),
    /// The DUNE-like application (DUNE Figs 7, 8): N threads persisting 5568 B frames copied from
    /// DRAM, per method (with and without PMDK), on one shared target and on one per thread.
    ///
    ///   snbuf bench app --target /mnt/pmem0 --method nt,pmdk --threads 1,2,4,8
    App(AppArgs),
    /// Everything above plus the write and read sweeps of DUNE Figs 2, 3 and 5, into one results
    /// directory, at a scale that fits this machine (about 3 minutes; --quick about 20 s). With a
    /// second target, both media side by side (the paper's Table II). Then run `snbuf report`.
    ///
    ///   snbuf bench paper --target /mnt/pmem0 --second-target /var/tmp --out results
    Paper(PaperArgs),
}

#[derive(Args, Debug, Clone)]
pub struct LatencyArgs {
    /// The medium to measure beside DRAM: a directory (a temporary file is mapped there) or a
    /// file. Default: /dev/shm.
    #[arg(long, value_name = "PATH")]
    pub target: Option<PathBuf>,
    /// Bytes per access: a multiple of 64.
    #[arg(long, value_name = "SIZE", default_value = "64", value_parser = parse_size_nonzero)]
    pub access_size: u64,
    /// Region walked (default: 4x the last-level cache, at least 256 MiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_nonzero)]
    pub region: Option<u64>,
    /// Timed accesses per medium, order and operation.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub samples: u64,
    /// Page size of both regions: 4KiB or 2MiB.
    #[arg(long, value_name = "SIZE", default_value = "4KiB", value_parser = parse_page_size)]
    pub page_size: u64,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct JoinArgs {
    /// Where the hash table lives: dram, or target (a mapped file on --target).
    #[arg(long, value_name = "WHERE", default_value = "dram", value_parser = ["dram", "target"])]
    pub table_on: String,
    /// The target for --table-on target. Default: /dev/shm.
    #[arg(long, value_name = "PATH")]
    pub target: Option<PathBuf>,
    /// Rows of R (the build side): 1M, 4M, 1000000.
    #[arg(long, value_name = "N", default_value = "1M", value_parser = parse_count)]
    pub r_rows: u64,
    /// Rows of S (the probe side).
    #[arg(long, value_name = "N", default_value = "4M", value_parser = parse_count)]
    pub s_rows: u64,
    /// Thread counts, comma-separated. Default: 1 up to the number of CPUs.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_threads)]
    pub threads: Vec<usize>,
    /// Giant-lock types for the build: pthread_spinlock, pthread_mutex, test_and_set,
    /// add_fetch_pause (default: all).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub locks: Vec<String>,
    #[arg(long, value_name = "SIZE", default_value = "4KiB", value_parser = parse_page_size)]
    pub page_size: u64,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct KernelsArgs {
    /// The medium to run the kernels on beside DRAM. Default: /dev/shm.
    #[arg(long, value_name = "PATH")]
    pub target: Option<PathBuf>,
    /// Kernels, comma-separated: gemm, 2mm, atax, mvt, jacobi-2d (default: all).
    #[arg(long = "kernel", value_name = "LIST", value_delimiter = ',')]
    pub kernels: Vec<String>,
    /// Problem size (n x n arrays) for every kernel. Default: each kernel's own, far beyond
    /// the cache (gemm 1024, 2mm 768, atax and mvt 6000, jacobi-2d 2000).
    #[arg(long, value_name = "N")]
    pub n: Option<usize>,
    /// Page sizes, comma-separated: 4KiB, 2MiB.
    #[arg(long = "page-size", value_name = "LIST", value_delimiter = ',', default_value = "4KiB,2MiB", value_parser = parse_page_size)]
    pub page_sizes: Vec<u64>,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct AppArgs {
    /// Where to write: a directory (files are made there and removed). Repeat it to give each
    /// thread its own medium in the per-thread layout. Default: /dev/shm.
    #[arg(long = "target", value_name = "PATH")]
    pub targets: Vec<PathBuf>,
    /// Methods, comma-separated (default: nt, and pmdk when built with it).
    #[arg(long = "method", value_name = "LIST", value_delimiter = ',')]
    pub methods: Vec<String>,
    /// Thread counts, comma-separated. Default: 1 up to the number of CPUs.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_threads)]
    pub threads: Vec<usize>,
    /// Measured time per point.
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = parse_duration_nonzero)]
    pub duration: Duration,
    /// Bytes each thread writes through (default 256 MiB).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size_nonzero)]
    pub region: u64,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct PaperArgs {
    /// The medium to characterize (a directory).
    #[arg(long, value_name = "DIR")]
    pub target: PathBuf,
    /// A second medium, measured the same way for the side-by-side table (Table II).
    #[arg(long, value_name = "DIR")]
    pub second_target: Option<PathBuf>,
    /// About a minute instead of about ten: smaller regions, shorter points, fewer sizes.
    #[arg(long)]
    pub quick: bool,
    /// The results directory (created; must be empty if it exists).
    #[arg(long, value_name = "DIR", default_value = "snbuf-results")]
    pub out: PathBuf,
    /// For tests: tiny sizes, a few seconds in all; the figures mean nothing.
    #[arg(long, hide = true)]
    pub smoke: bool,
}

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
pub struct RecordArgs {
    /// A TOML file with any of these options (keys as the long options, with `_` for `-`:
    /// `rate_per_link = "200MB/s"`). The command line wins over the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Readout links to emulate (default 10, one socket's worth in DUNE).
    #[arg(long)]
    pub links: Option<u32>,
    /// Frame type: protodune-wib (5568 B, 300 ticks at 50 MHz; the default), wib2, wibeth,
    /// custom:BYTES:TICKS.
    #[arg(long)]
    pub frame: Option<String>,
    /// Input rate per link: 20MB/s (default), 930MB/s (a real WIB link), 1GiB/s.
    #[arg(long, value_name = "RATE")]
    pub rate_per_link: Option<String>,
    /// Seconds of each link the DRAM latency buffer holds (default 3s; dune: 10s).
    #[arg(long, value_name = "TIME", value_parser = parse_duration_nonzero)]
    pub buffer: Option<Duration>,
    /// How far before the trigger the window starts (default 2s; dune: 10s). At most --buffer.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub pre: Option<Duration>,
    /// How far after the trigger the window ends (default 3s; dune: 100s).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub post: Option<Duration>,
    /// When the trigger fires, from the start (default: --pre + 1s, so the buffer holds the pre-trigger data).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub trigger_after: Option<Duration>,
    /// auto (the default: nt on DAX; else direct with a writer per one or two links, uring with
    /// fewer writers), or any method of `snbuf methods`.
    #[arg(long)]
    pub method: Option<String>,
    /// Writer threads (default: one per link, as in the paper).
    #[arg(long)]
    pub writers: Option<usize>,
    /// Frames per chunk (default: about 1 MiB of frames).
    #[arg(long)]
    pub chunk_frames: Option<u32>,
    /// Chunks appended per persist (default 8): 1 acknowledges each chunk with its own
    /// fdatasync or fence; more keeps writes in flight and flushes less often.
    #[arg(long, value_name = "N")]
    pub chunks_per_persist: Option<u32>,
    /// CPUs to pin to: the first runs the link emulation; the writers take the list in turn from
    /// the second, wrapping around (so on 0,1 they alternate between 1 and 0).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Page size of the latency buffers: 4KiB (default) or 2MiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_page_size)]
    pub page_size: Option<u64>,
    /// Loop frame payloads from this file instead of a pattern (timestamps are rewritten).
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Where bursts go: DIR/<burst-id>/ (default ./snbuf-data).
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// The burst's directory name (default: UTC time and process id).
    #[arg(long)]
    pub burst_id: Option<String>,
    /// Preset: `dune` = 10 links x 0.93 GB/s, 10 s buffer, 10 s before, 100 s after.
    #[arg(long)]
    pub profile: Option<String>,
    /// Write the summary as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Keep the live state in this JSON file, rewritten ~10 times a second while a burst
    /// records: per link, the durable watermark (chunks, frames and newest timestamp that are
    /// durable), loss and failure. What it ever said survives a crash.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// For reliability tests: inject a fault into the links' files (repeatable).
    /// write-eio:link=1,after=4MiB (a write past 4 MiB fails with EIO), write-enospc:after=8MiB,
    /// persist-eio:link=0,after=3 (the 4th fdatasync/fence fails), slow:rate=50MB/s (a throttled
    /// medium). Without link=N, every link.
    #[arg(long, value_name = "FAULT")]
    pub inject_fault: Vec<String>,
    /// The `[s3]` table of the config file (export settings and credentials); not an option.
    #[arg(skip)]
    pub s3: Option<snbuf_export::S3Settings>,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub record: RecordArgs,
    /// The control socket (default: OUTPUT/snbuf.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Serve Prometheus metrics over HTTP at this address (e.g. 127.0.0.1:9464): per link input,
    /// output, loss, buffer fill, backlog and durable watermark; bursts by state. Read-only.
    /// See docs/METRICS.md.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,
    /// Join a fleet over NATS (JetStream): take triggers broadcast with `snbuf trigger --nats`,
    /// report a heartbeat to `snbuf fleet status`, publish burst events. Without a URL:
    /// nats://127.0.0.1:4222. If NATS is unreachable the unit records locally and keeps trying.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = DEFAULT_NATS)]
    pub nats: Option<String>,
    /// This unit's name in the fleet (letters, digits, '-', '_'). Default: the host name.
    #[arg(long, value_name = "ID")]
    pub unit: Option<String>,
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// Export every sealed burst to this destination (s3://BUCKET/PREFIX or file:///DIR, as
    /// `snbuf export`), one at a time in the background; bursts left unexported by an earlier
    /// run are exported too.
    #[arg(long, value_name = "URL")]
    pub export_to: Option<String>,
    /// At most this export rate (e.g. 100MB/s), so that exporting never starves recording.
    #[arg(long, value_name = "RATE")]
    pub export_rate: Option<String>,
    /// Remove each burst locally once every object has been read back and matched.
    #[arg(long)]
    pub delete_after_verify: bool,
}

pub const DEFAULT_NATS: &str = "nats://127.0.0.1:4222";

/// Credentials and TLS for NATS, handled by the client library.
#[derive(Args, Debug, Clone, Default)]
pub struct NatsAuthArgs {
    /// A NATS credentials file (.creds: JWT and NKey seed). Never printed.
    #[arg(long, value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// A CA certificate to trust; turns TLS on (or use a tls:// URL).
    #[arg(long, value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct TriggerArgs {
    /// The server's control socket.
    #[arg(long, value_name = "PATH", default_value = "./snbuf-data/snbuf.sock")]
    pub socket: PathBuf,
    /// Centre of the window: `now`, or a detector timestamp in ticks.
    #[arg(long, default_value = "now")]
    pub at: String,
    /// Window start before the trigger (default: the server's --pre).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub pre: Option<Duration>,
    /// Window end after the trigger (default: the server's --post).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub post: Option<Duration>,
    /// Name of the burst (default: the server numbers them).
    #[arg(long)]
    pub burst_id: Option<String>,
    /// Wait until the burst is sealed and verified, and print its outcome (socket only).
    #[arg(long)]
    pub wait: bool,
    /// Broadcast to every unit of a fleet over NATS instead of one server's socket. `now` is
    /// sent as wall-clock time, which each unit turns into its own ticks: all record the same
    /// window. --burst-id becomes the trigger id (a second delivery records nothing more).
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = DEFAULT_NATS)]
    pub nats: Option<String>,
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
}

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// Every unit that reported to the fleet: state, buffer fill, durable watermark, last burst,
    /// and which stopped reporting (missing after 3 s without a heartbeat).
    ///
    ///   snbuf fleet status --nats nats://127.0.0.1:4222
    Status(FleetStatusArgs),
    /// The burst events the units published (sealed, failed, missed, refused, ...), oldest first.
    Events(FleetStatusArgs),
    /// Trigger delivery latency to many lightweight units (each its own connection and durable
    /// consumer, no data): p50, p99 and max from sending to receipt. Uses its own subject, so
    /// real units never see its triggers.
    ///
    ///   snbuf fleet bench --nats nats://127.0.0.1:4222 --units 150 --triggers 100
    Bench(FleetBenchArgs),
}

#[derive(Args, Debug, Clone)]
pub struct FleetBenchArgs {
    #[arg(long, value_name = "URL", default_value = DEFAULT_NATS)]
    pub nats: String,
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    /// Units to emulate.
    #[arg(long, default_value_t = 150, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub units: u32,
    /// Triggers to send.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub triggers: u32,
    /// Time between triggers.
    #[arg(long, value_name = "TIME", default_value = "50ms", value_parser = parse_duration_nonzero)]
    pub interval: Duration,
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct FleetStatusArgs {
    #[arg(long, value_name = "URL", default_value = DEFAULT_NATS)]
    pub nats: String,
    #[command(flatten)]
    pub nats_auth: NatsAuthArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// The server's control socket.
    #[arg(long, value_name = "PATH", default_value = "./snbuf-data/snbuf.sock")]
    pub socket: PathBuf,
    /// Print the server's reply as JSON.
    #[arg(long)]
    pub json: bool,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PatternArg {
    /// Walk the region from start to end, wrapping around.
    Seq,
    /// Uniformly random block-aligned offsets in the region.
    Rand,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SyncArg {
    /// fdatasync at each persist point (one flush can cover many writes).
    Fdatasync,
    /// Open with O_DSYNC: every write is durable when it completes.
    Dsync,
}

#[derive(Args, Debug, Clone)]
pub struct ThroughputArgs {
    /// Where to write: a directory (a temporary file is made and removed) or a file (used as is).
    /// Repeat it for one target per thread (the paper's non-interleaved case); thread i uses
    /// target i mod N. Default: /dev/shm (RAM, the stand-in for pmem), else the temp directory.
    #[arg(long = "target", value_name = "PATH")]
    pub targets: Vec<PathBuf>,

    /// Persistence methods, comma-separated: nt, clwb, clflushopt, clflush, msync (mapped file);
    /// direct, uring (O_DIRECT); buffered (page cache); pmdk (libpmem, needs --features pmdk).
    /// See `snbuf methods`.
    #[arg(
        long = "method",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "nt"
    )]
    pub methods: Vec<String>,

    /// Block sizes, comma-separated: 256, 4k, 4KiB, 5568, 64KiB, 1MiB. Sizes the medium cannot
    /// address directly (5568 B with O_DIRECT) are padded to its alignment, never refused.
    #[arg(
        long = "block-size",
        value_name = "LIST",
        value_delimiter = ',',
        default_value = "256,4KiB,5568,64KiB,1MiB",
        value_parser = parse_size_nonzero
    )]
    pub block_sizes: Vec<u64>,

    /// Thread counts, comma-separated. Default: 1 up to the number of CPUs.
    #[arg(long, value_name = "LIST", value_delimiter = ',', value_parser = parse_threads)]
    pub threads: Vec<usize>,

    /// Access pattern.
    #[arg(long, value_enum, default_value = "seq")]
    pub pattern: PatternArg,

    /// Timed duration of each point (after the warm-up): 2s, 500ms.
    #[arg(long, value_name = "TIME", default_value = "2s", value_parser = parse_duration_nonzero)]
    pub duration: Duration,

    /// Untimed warm-up before each point.
    #[arg(long, value_name = "TIME", default_value = "500ms", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Page size of the target mapping and of DRAM buffers: 4KiB, or 2MiB (transparent or
    /// hugetlbfs pages; what the kernel granted is recorded and a shortfall is reported).
    #[arg(long, value_name = "SIZE", default_value = "4KiB", value_parser = parse_page_size)]
    pub page_size: u64,

    /// CPUs to pin threads to, as the kernel writes lists (0-3,8). Default: the CPUs this process
    /// may use, in order.
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,

    /// Bytes of target each thread walks. Default: 4x the last-level cache (at least 256 MiB), so
    /// neither reads nor writes are served by the cache.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_nonzero)]
    pub region: Option<u64>,

    /// io_uring writes in flight per thread (uring only).
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub queue_depth: u32,

    /// How direct, uring and buffered make writes durable.
    #[arg(long, value_enum, default_value = "fdatasync")]
    pub sync: SyncArg,

    /// When a write point is made durable: `op` (after every block, the default), `end` (once, at
    /// the end of the point, inside the timing: raw medium speed), or a size (every 1MiB).
    #[arg(long, value_name = "WHEN", default_value = "op")]
    pub persist_every: String,

    /// Time one operation in N for the latency percentiles: 1 times every operation; N > 1 a
    /// random sample averaging one in N; 0 none (throughput only, as fio's gtod_reduce). Each
    /// clock read costs ~10 ns, a few percent of a 256 B persist.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub latency_every: u32,

    /// Let a --target that is an existing, non-empty file be overwritten (refused otherwise).
    #[arg(long)]
    pub overwrite: bool,

    /// Write the results as JSON (schema in docs/RESULTS.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the results as CSV, one row per point.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

fn parse_size_nonzero(s: &str) -> Result<u64, String> {
    match snbuf_units::parse_bytes(s) {
        Ok(0) => Err("must be more than 0 bytes".to_string()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// A row count: 4000000, 4M (10^6), 4Mi (2^20).
fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("Mi") {
        (n, 1u64 << 20)
    } else if let Some(n) = t.strip_suffix('M') {
        (n, 1_000_000)
    } else if let Some(n) = t.strip_suffix("Ki") {
        (n, 1 << 10)
    } else if let Some(n) = t.strip_suffix('K').or_else(|| t.strip_suffix('k')) {
        (n, 1000)
    } else {
        (t, 1)
    };
    match num.parse::<u64>() {
        Ok(0) => Err("must be more than 0".into()),
        Ok(n) => n
            .checked_mul(mult)
            .ok_or_else(|| format!("'{s}' is too large")),
        Err(_) => Err(format!("'{s}' is not a count (examples: 1000000, 4M, 4Mi)")),
    }
}

fn parse_threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".to_string()),
        Ok(n) if n > 4096 => Err("more than 4096 threads is not a sensible point".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{s}' is not a whole number")),
    }
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    snbuf_units::parse_duration(s).map_err(|e| e.to_string())
}

fn parse_duration_nonzero(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be more than 0".to_string()),
        d => Ok(d),
    }
}

pub fn parse_page_size(s: &str) -> Result<u64, String> {
    match snbuf_units::parse_bytes(s) {
        Ok(4096) => Ok(4096),
        Ok(2097152) => Ok(2097152),
        Ok(_) => Err("page size must be 4KiB or 2MiB".to_string()),
        Err(e) => Err(e.to_string()),
    }
}

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
