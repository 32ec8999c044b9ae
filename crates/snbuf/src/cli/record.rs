//! `snbuf record`, `serve`, `trigger` and `status`: a unit's options, and its clients'.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use snbuf_quantity::parse_duration;
use snbuf_unit::config::UnitOptions;

/// `snbuf record`: a unit's options, when its trigger fires, and where its summary goes.
#[derive(Args, Debug, Clone)]
pub struct RecordArgs {
    #[command(flatten)]
    pub unit: UnitArgs,
    /// When the trigger fires, from the start (default: the larger of --pre and 1s, plus 1s, so
    /// the buffer holds the pre-trigger data; never earlier than --pre).
    #[arg(long, value_name = "TIME", value_parser = parse_duration)]
    pub trigger_after: Option<Duration>,
    /// Write the summary as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// The options of a unit, which `record` and `serve` share (`UnitOptions`, declared once in the
/// unit crate), with the config file they may come from; each option is also a key of it.
#[derive(Args, Debug, Clone)]
pub struct UnitArgs {
    /// A TOML file with any of these options (keys as the long options, with `_` for `-`:
    /// `rate_per_link = "200MB/s"`). The command line wins over the file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub options: UnitOptions,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub unit: UnitArgs,
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
    /// nats://127.0.0.1:4222; a cluster as several, comma separated
    /// (nats://h1:4222,nats://h2:4222,nats://h3:4222), or `nats` in the config file. If NATS is
    /// unreachable the unit records locally and keeps trying every server.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = DEFAULT_NATS)]
    pub nats: Option<String>,
    #[command(flatten)]
    pub nats_auth: NatsArgs,
    /// Export every sealed burst to this destination (s3://BUCKET/PREFIX or file:///DIR, as
    /// `snbuf export`), one at a time in the background; bursts left unexported by an earlier
    /// run are exported too.
    #[arg(long, value_name = "URL")]
    pub export_to: Option<String>,
    /// At most this export rate (e.g. 100MB/s), so that exporting never starves recording.
    #[arg(long, value_name = "RATE")]
    pub export_rate: Option<String>,
    /// How the link files travel (as `snbuf export --codec`): `frames` through snbuf's lossless
    /// frame codec, about a third of the bytes of DUNE's ADC data, coded at the export's low
    /// priority; `none` as they are.
    #[arg(long, value_name = "CODEC")]
    pub export_codec: Option<snbuf_export::ExportCodec>,
    /// Remove each burst locally once every object has been read back and matched.
    #[arg(long)]
    pub delete_after_verify: bool,
    /// On SIGTERM (or Ctrl-C) the unit takes no more triggers, finishes and seals the burst in
    /// progress, and exits 0: a drain. Past this long it exits 1 instead, the burst persisted as
    /// far as it got and recoverable (default: --max-burst + --max-window + 3 x --buffer + 30 s,
    /// the longest a burst and the continuation it may leave can take). A second signal stops
    /// at once.
    #[arg(long, value_name = "TIME", value_parser = snbuf_quantity::values::parse_duration_nonzero)]
    pub drain_timeout: Option<std::time::Duration>,
    /// Log lines as text (for a person) or json (one object per line, for a collector).
    /// Levels by RUST_LOG (default info; e.g. RUST_LOG=debug).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: crate::logging::LogFormat,
    /// The `[s3]` table of the config file (export settings and credentials); not an option.
    #[arg(skip)]
    pub s3: Option<snbuf_export::S3Settings>,
}

pub use snbuf_fleet::DEFAULT_NATS_URL as DEFAULT_NATS;

/// Credentials, TLS and stream replication for NATS (the client library handles the first two).
#[derive(Args, Debug, Clone, Default)]
pub struct NatsArgs {
    /// Copies of each fleet stream (triggers, events, status) when this command creates them;
    /// default 3 when the cluster has at least 3 servers, else 1. A stream that exists is used
    /// as it is, with a warning if it differs (`snbuf fleet setup` changes it).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=5))]
    pub nats_replicas: Option<u32>,
    /// A NATS credentials file (.creds: JWT and NKey seed). Never printed.
    #[arg(long, value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,
    /// A file with this client's user NKey seed, for a cluster that grants permissions by role
    /// (deploy/nats-secure.conf; `snbuf fleet keys` makes one per role). Never printed.
    #[arg(long, value_name = "FILE")]
    pub nats_nkey: Option<PathBuf>,
    /// A CA certificate to trust; turns TLS on (or use a tls:// URL).
    #[arg(long, value_name = "FILE")]
    pub nats_ca: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct TriggerArgs {
    /// The server's control socket.
    #[arg(long, value_name = "PATH", default_value = "./snbuf-data/snbuf.sock")]
    pub socket: PathBuf,
    /// Centre of the window: `now` (the newest data the unit holds; with --nats, each unit's
    /// data at the moment the trigger was issued, whatever its clock's offset from the wall
    /// clock), a detector timestamp in ticks, or (with --nats) `unix:NANOSECONDS`, a wall-clock
    /// instant: what the retry of an unanswered trigger gives, to keep its window.
    #[arg(long, default_value = "now")]
    pub at: String,
    /// Window start before the trigger, in seconds of the detector's clock (default: the
    /// server's --pre; at most the server's --buffer). What has left the buffer is recorded
    /// as lost.
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
    /// Cancel the burst being recorded, burst ID, instead of triggering (socket only): it ends
    /// about a second past the newest data, sealed and verified with what was written; the
    /// rest of its window is not recorded, and not counted lost (an operator's decision).
    #[arg(long, value_name = "ID", conflicts_with_all = ["at", "pre", "post", "burst_id", "nats"])]
    pub cancel: Option<String>,
    /// Broadcast to every unit of a fleet over NATS instead of one server's socket. `now` is
    /// sent as wall-clock time, which each unit turns into its own ticks: all record the same
    /// window. --burst-id becomes the trigger id (a second delivery records nothing more). A
    /// cluster as several URLs, comma separated: the trigger is retried across them for up to
    /// 6 s, and the id the cluster stored is printed. Without an answer it is looked up in the
    /// stream (3 s more at most): `stored`, `NOT stored` or `UNKNOWN`, with the command that
    /// sends it again safely.
    #[arg(long, value_name = "URL", num_args = 0..=1, default_missing_value = DEFAULT_NATS)]
    pub nats: Option<String>,
    #[command(flatten)]
    pub nats_auth: NatsArgs,
}

#[derive(Args, Debug, Clone)]
pub struct StatusArgs {
    /// The server's control socket.
    #[arg(long, value_name = "PATH", default_value = "./snbuf-data/snbuf.sock")]
    pub socket: PathBuf,
    /// Print the server's reply as JSON.
    #[arg(long)]
    pub json: bool,
    /// A full-screen view, refreshed every second (q quits); on a terminal only, elsewhere the
    /// one-shot report.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
}
