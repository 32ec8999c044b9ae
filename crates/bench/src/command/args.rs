//! `snbuf bench ...`: the arguments of each characterization suite, with help that teaches.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use snbuf_quantity::parse_duration;
use snbuf_quantity::values::{
    parse_count, parse_duration_nonzero, parse_page_size, parse_size_nonzero, parse_threads,
};

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
    /// CRC-32C, the checksum of every recorded byte: each implementation at hand in cache and
    /// from DRAM, and a writer's two ways to checksum a chunk it streams to memory (copy, then
    /// checksum; or checksum each small block while in L1, then stream it out). Every result is
    /// checked against an independent CRC. Prints core-seconds per GiB: what a writer pays.
    ///
    ///   snbuf bench checksum --dram-size 512MiB --json checksum.json
    Checksum(ChecksumArgs),
    /// snbuf's lossless frame codec beside zstd (-1, -3, -19), xz, lz4 and the HDF5 filters
    /// bitshuffle and Blosc2 (through h5py and hdf5plugin, where installed), on the same bytes,
    /// one core each: coded size over raw, encode and decode GiB/s, and the entropy bound of
    /// the codec's residuals. By default on emulated frames whose noise is every frame's own
    /// (ProtoDUNE-HD's); or on any file of frames (DUNE's raw `<SourceID>.bin`, or `snbuf
    /// extract`'s output). Every decode is checked against the raw bytes.
    ///
    ///   snbuf bench codec
    ///
    ///   snbuf bench codec --input link3.bin --frame-type wibeth --json codec.json
    Codec(CodecArgs),
    /// Everything above plus the write and read sweeps of DUNE Figs 2, 3 and 5, into one results
    /// directory, at a scale that fits this machine (about 2.5 minutes on a 2-core machine;
    /// --quick about 16 s). With a second target, both media side by side (the paper's Table II).
    /// Then run `snbuf report`.
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
pub struct CodecArgs {
    /// The frames' type: wibeth, tdeeth, wib2, protodune-wib, daphneeth-stream, or
    /// custom:BYTES:TICKS[:OFFSET] (stored raw by the codec).
    #[arg(long, value_name = "TYPE", default_value = "wibeth")]
    pub frame_type: String,
    /// A file of frames back to back to measure on, instead of emulated ones (any bytes after
    /// the last whole frame are left out): DUNE's raw `<SourceID>.bin`, or what `snbuf
    /// extract` writes (a burst's link file holds chunk headers between its frames).
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Emulated frames to make (one link's, every frame its own noise).
    #[arg(long, value_name = "N", default_value_t = 4096, value_parser = parse_count)]
    pub frames: u64,
    /// Frames per chunk the codec codes, as export codes a burst's link files chunk by chunk.
    /// Default: a recorder's default chunk (about 1 MiB: 128 WIBEth frames); 0 codes all the
    /// frames as one chunk. The peers compress the whole input, as their tools would.
    #[arg(long, value_name = "N")]
    pub chunk_frames: Option<u64>,
    /// Timed passes per compressor; the fastest is reported.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub passes: u32,
    /// Where the run makes a directory of its own for the peers' files (removed after).
    /// Default: /dev/shm where there is one, else the temporary directory.
    #[arg(long, value_name = "DIR")]
    pub scratch: Option<PathBuf>,
    /// Also write the results, with the machine they ran on, to this JSON file. The targets
    /// printed under the table are judged, not enforced: the exit is non-zero only where a
    /// compressor did not give the bytes back.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct ChecksumArgs {
    /// Bytes streamed from DRAM per pass: several times the last-level cache (two buffers of
    /// this size are allocated). A whole number of MiB.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size_nonzero)]
    pub dram_size: u64,
    /// Timed passes per variant (after a warm-up); the fastest is reported.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub passes: u32,
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
    /// About 16 s instead of about 2.5 minutes: smaller regions, shorter points, fewer sizes.
    #[arg(long)]
    pub quick: bool,
    /// The results directory (created; must be empty if it exists).
    #[arg(long, value_name = "DIR", default_value = "snbuf-results")]
    pub out: PathBuf,
    /// For tests: tiny sizes, a few seconds in all; the figures mean nothing.
    #[arg(long, hide = true)]
    pub smoke: bool,
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
