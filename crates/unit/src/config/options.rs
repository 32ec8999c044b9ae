//! A unit's options as given: `snbuf record`'s and `snbuf serve`'s command line, with what its
//! config file adds, before any default or check. Named after the long options (`--rate-per-link`
//! is `rate_per_link`), which the errors quote. `from_options` turns them into a `RecordConfig`.

use std::path::PathBuf;
use std::time::Duration;

use snbuf_quantity::parse_duration;
use snbuf_quantity::values::{
    parse_duration_nonzero, parse_on_off, parse_page_size, parse_size_nonzero,
};

/// Every option of a recording unit, each None (or empty) when not given. The one declaration of
/// them: `snbuf record` and `snbuf serve` flatten it into their command lines (the doc comments
/// are their `--help`), and their config file's keys are its long options.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct UnitOptions {
    /// Readout links to emulate (default 10, one socket's worth in DUNE).
    #[arg(long)]
    pub links: Option<u32>,
    /// Frame type, in DUNE's own layout: protodune-wib (5568 B superchunks, 300 ticks at
    /// 50 MHz; the default), wib2 (5664 B superchunks), wibeth (7200 B, 2048 ticks at 62.5 MHz),
    /// tdeeth, daphneeth-stream, custom:BYTES:TICKS[:OFFSET] (a u64 timestamp at OFFSET).
    #[arg(long)]
    pub frame: Option<String>,
    /// Where the links' frames come from: `emulate` (the default: emulated detector frames, or
    /// --replay), or `udp://ADDR:PORT` to receive them from the network, one frame per UDP
    /// datagram as DUNE's Ethernet readout sends them (`snbuf emit` is such a sender). The
    /// rate then sizes the buffers; --pre and --post are seconds of the frame type's clock
    /// whatever the rate.
    #[arg(long, value_name = "SOURCE")]
    pub source: Option<String>,
    /// With --source udp: the DAQEthHeader stream_id that feeds each link, in link order
    /// (default 0,1,2,...: stream N is link N).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub streams: Vec<u8>,
    /// With --source udp: the DAQEthHeader version frames must carry (others are counted and
    /// dropped), or `any`. Default 1, what `snbuf emit` sends: set your detector's.
    #[arg(long, value_name = "N|any")]
    pub header_version: Option<String>,
    /// With --source udp: the socket receive buffer per link (default 16MiB; beyond
    /// net.core.rmem_max needs root, which snbuf uses when it has it).
    #[arg(long, value_name = "SIZE", value_parser = parse_size_nonzero)]
    pub rcvbuf: Option<u64>,
    /// With --source udp: receive runs of datagrams that the kernel coalesced (UDP GRO: a NIC's
    /// GRO, or a sender's UDP_SEGMENT batches on loopback) as one buffer straight into the
    /// ring, instead of one datagram per slot (default on; where the kernel refuses it, off:
    /// the summary and `snbuf status` say so).
    #[arg(long, value_name = "on|off", value_parser = parse_on_off)]
    pub gro: Option<bool>,
    /// With --source udp: the longest the receive thread sleeps after it has read every socket
    /// empty, so that data gathers into fuller receives and the thread wakes less often
    /// (`auto`, the default: 2ms; `off`: never sleep, the lowest latency and the most
    /// wakeups; or a time up to 100ms). Never longer than a sixteenth of the time the socket
    /// buffer takes to fill at --rate-per-link, so a sleep cannot overflow it.
    #[arg(long, value_name = "auto|off|TIME", value_parser = parse_receive_nap)]
    pub receive_nap: Option<Duration>,
    /// With --source udp and GRO: the most coalesced buffers one receive call takes, while
    /// they come full (default 1: one call a buffer, which cost no more CPU on loopback than 8;
    /// try 8 where system calls are dear). A buffer that comes short sends the socket back to
    /// one a call, since the frames after it must be moved down in the ring.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub receive_batch: Option<u32>,
    /// The run number written into every burst's manifest (DUNE's offline files need it).
    #[arg(long, value_name = "N")]
    pub run: Option<u32>,
    /// This unit's name: in every burst's manifest, and in the fleet (letters, digits, '-',
    /// '_'). Default: the host name.
    #[arg(long, value_name = "ID")]
    pub unit: Option<String>,
    /// Each link's DUNE SourceID, in link order (default: the link number).
    #[arg(long, value_name = "LIST", value_delimiter = ',')]
    pub source_ids: Vec<u32>,
    /// Input rate per link; it sizes the latency buffer. Default: the frame type's own rate for a
    /// network or replayed source (219.7MB/s for WIBEth, 928MB/s for a ProtoDUNE WIB link), and
    /// 20MB/s for the emulator, a sub-sampled detector (one frame in k on the detector's real
    /// clock, so a second is still the frame type's clock: 50e6 ticks for protodune-wib,
    /// 62.5e6 for wibeth). Times are always the detector's clock.
    #[arg(long, value_name = "RATE")]
    pub rate_per_link: Option<String>,
    /// Seconds of each link, of the detector's clock, the DRAM latency buffer holds (default 3s;
    /// dune: 10s), at --rate-per-link. A stream faster than that holds fewer: `snbuf status`
    /// shows the span each buffer really holds.
    #[arg(long, value_name = "TIME", value_parser = parse_duration_nonzero)]
    pub buffer: Option<Duration>,
    /// How far before the trigger the window starts (default 2s; dune: 10s). At most --buffer.
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub pre: Option<Duration>,
    /// How far after the trigger the window ends (default 3s; dune: 100s).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub post: Option<Duration>,
    /// auto (the default: nt on DAX; else uring, one writer per output keeping all its links'
    /// writes in flight; direct where io_uring is unavailable or --writers gives each writer at
    /// most two links), or any method of `snbuf methods`.
    #[arg(long)]
    pub method: Option<String>,
    /// Writer threads (default: one per output for uring; one per link for direct, and on
    /// memory as in the paper, but there no more than the CPUs they run on).
    #[arg(long)]
    pub writers: Option<usize>,
    /// Frames per chunk (default: about 1 MiB of frames, rounded down to whole 4 KiB blocks
    /// for O_DIRECT: 128 frames, 0.68 MiB, for protodune-wib; 128, 0.88 MiB, for wibeth).
    #[arg(long)]
    pub chunk_frames: Option<u32>,
    /// Chunks appended per persist (default 8): 1 acknowledges each chunk with its own
    /// fdatasync or fence; more keeps writes in flight and flushes less often.
    #[arg(long, value_name = "N")]
    pub chunks_per_persist: Option<u32>,
    /// CPUs to pin to: the first runs the link emulation or the network receiver (the
    /// receiver: the first on the NUMA node of the interface it listens on, where there is
    /// one); the writers take the list in turn from the second, wrapping around (so on 0,1 they
    /// alternate between 1 and 0).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Page size of the latency buffers (and of mapped outputs): 2MiB (default: huge pages from
    /// the hugetlbfs pool, else transparent huge pages; the summary says what the kernel
    /// granted) or 4KiB.
    #[arg(long, value_name = "SIZE", value_parser = parse_page_size)]
    pub page_size: Option<u64>,
    /// Replay a DUNE raw recording (frames back to back, as DUNE's readout writes
    /// `<SourceID>.bin`) on every link, looping: only the timestamps (and sequence numbers) are
    /// rewritten, at their own places in the frames.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// Where bursts go: DIR/<burst-id>/ (default ./snbuf-data). Repeat it to spread the links
    /// over several devices (one directory per device or pmem namespace): link i is written to
    /// output i mod N, the first output holds each burst's manifest, and the others' files
    /// appear in the burst directory as symbolic links.
    #[arg(long, value_name = "DIR")]
    pub output: Vec<PathBuf>,
    /// The burst's directory name (default: UTC time and process id).
    #[arg(long)]
    pub burst_id: Option<String>,
    /// Preset: `dune` = 10 links x 0.93 GB/s, 10 s buffer, 10 s before, 100 s after.
    #[arg(long)]
    pub profile: Option<String>,
    /// Keep the live state in this JSON file, rewritten ~10 times a second while a burst
    /// records: per link, the durable watermark (chunks, frames and newest timestamp that are
    /// durable), loss and failure. What it ever said survives a crash.
    #[arg(long, value_name = "FILE")]
    pub status_file: Option<PathBuf>,
    /// For reliability tests: inject a fault into the links' files (repeatable).
    /// write-eio:link=1,after=4MiB (a write past 4 MiB fails with EIO), write-enospc:after=8MiB,
    /// persist-eio:link=0,after=3 (the 4th fdatasync/fence fails), slow:rate=50MB/s (a throttled
    /// medium). Writes started from the latency buffer (io_uring's zero-copy path):
    /// slow-completion:delay=500ms (each completes that late, the device reading the buffer
    /// only then), stall:after=2MiB (past 2 MiB none completes: see --completion-deadline).
    /// hang:after=2MiB: past 2 MiB a write blocks and never returns (a call stuck in the
    /// kernel; the watchdog gives its writer up).
    /// Without link=N, every link. Faults that only a power cut reveals, which
    /// bench/powercut.sh must catch: lost-flush (persists succeed and do nothing), late-flush
    /// (each persist is done only at the next), lost-dir-sync (no directory fsync): these make
    /// the unit acknowledge data that is not durable, and are taken only with
    /// --unsafe-faults-for-tests. Every burst recorded with a fault says so in its manifest,
    /// and `verify` says it. Not a config-file key: a command line asks for it each time.
    #[arg(long, value_name = "FAULT")]
    pub inject_fault: Vec<String>,
    /// Takes --inject-fault's lost-flush, late-flush and lost-dir-sync: for the power-cut
    /// trials, which must catch them. Never on a unit whose data matters.
    #[arg(long)]
    pub unsafe_faults_for_tests: bool,
    /// How long a write or flush may go without completing before its link is failed, its
    /// loss counted (the other links go on; a stalled device never holds them): a device that
    /// stops answering must not hang the unit. Default: half of --buffer, between 1s and 60s.
    /// io_uring's waits end there; a writer stuck in the kernel (a pwrite, fdatasync or msync
    /// that never returns) is given up by a watchdog half as long again (at least 1s later),
    /// and the burst sealed without it.
    #[arg(long, value_name = "TIME", value_parser = parse_duration_nonzero)]
    pub completion_deadline: Option<std::time::Duration>,
    /// The longest trigger window (--pre + --post) the unit records (default 120s: DUNE's 10 s
    /// before and 100 s after a supernova trigger, with room). A trigger asking for more is
    /// refused with the reason.
    #[arg(long, value_name = "TIME", value_parser = parse_duration_nonzero)]
    pub max_window: Option<Duration>,
    /// The longest one burst grows to as triggers join it (default: twice --max-window). Past
    /// it the burst stops and the rest of the windows that joined it goes on at once as the next
    /// burst, with no gap between them (both manifests say so), so that each is sealed, checked
    /// and exported while the next records. At least --max-window.
    #[arg(long, value_name = "TIME", value_parser = parse_duration_nonzero)]
    pub max_burst: Option<Duration>,
}

/// Options that make no unit: the user's mistake (`Usage`, one line quoting the option), or the
/// machine's (`Machine`: a medium that could not be probed).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Machine(String),
}

impl SetupError {
    pub fn usage(why: impl Into<String>) -> SetupError {
        SetupError::Usage(why.into())
    }
}

/// `--receive-nap`: `auto` (the receiver's default), `off` (zero), or a time up to 100 ms.
pub fn parse_receive_nap(s: &str) -> Result<Duration, String> {
    let nap = match s {
        "auto" => Ok(snbuf_readout::udp::DEFAULT_MAX_NAP),
        "off" => Ok(Duration::ZERO),
        t => parse_duration(t)
            .map_err(|e| e.to_string())
            .and_then(|d| {
                if d <= Duration::from_millis(100) {
                    Ok(d)
                } else {
                    Err(format!("'{t}' is more than 100ms: the socket buffer would be the only thing left to keep the data"))
                }
            }),
    };
    debug_assert!(
        nap.as_ref()
            .map_or(true, |d| *d <= Duration::from_millis(100)),
        "a nap of at most 100 ms"
    );
    nap
}
