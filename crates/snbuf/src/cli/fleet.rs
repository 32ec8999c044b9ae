//! `snbuf fleet ...`: many units over NATS.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};
use snbuf_quantity::values::parse_duration_nonzero;

use super::record::{NatsArgs, DEFAULT_NATS};

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// Every unit that reported to the fleet: state, buffer fill, durable watermark, last burst,
    /// and which stopped reporting (missing after 3 s without a heartbeat).
    ///
    ///   snbuf fleet status --nats nats://127.0.0.1:4222
    Status(FleetStatusArgs),
    /// The burst events the units published (sealed, failed, missed with the reason,
    /// duplicate, ...), oldest first.
    Events(FleetReadArgs),
    /// Trigger delivery latency to many lightweight units (each its own connection and durable
    /// consumer, no data): p50, p99 and max from sending to receipt. Uses its own subject, so
    /// real units never see its triggers.
    ///
    ///   snbuf fleet bench --nats nats://127.0.0.1:4222 --units 150 --triggers 100
    Bench(FleetBenchArgs),
    /// Creates the fleet's streams (triggers, events, status), or changes existing ones to the
    /// fleet's settings and --nats-replicas copies (default 3 on a cluster of 3 or more
    /// servers). Units and commands create missing streams themselves; this is for changing
    /// them, e.g. after a single server grew into a cluster.
    ///
    ///   snbuf fleet setup --nats nats://h1:4222,nats://h2:4222,nats://h3:4222 --nats-replicas 3
    Setup(FleetSetupArgs),
    /// Makes a user NKey for each role of a cluster that grants permissions by role
    /// (deploy/nats-secure.conf): DIR/admin.nk, unit.nk, trigger.nk, monitor.nk (seeds, mode
    /// 0600: give one with --nats-nkey) and DIR/roles.env (the public keys, for the servers).
    /// Never replaces a file.
    ///
    ///   snbuf fleet keys /etc/snbuf/nats-keys
    Keys {
        /// Where the keys go (created, mode 0700).
        dir: PathBuf,
    },
}

#[derive(Args, Debug, Clone)]
pub struct FleetSetupArgs {
    /// The cluster's servers, comma separated.
    #[arg(long, value_name = "URLS", default_value = DEFAULT_NATS)]
    pub nats: String,
    #[command(flatten)]
    pub nats_auth: NatsArgs,
}

#[derive(Args, Debug, Clone)]
pub struct FleetBenchArgs {
    #[arg(long, value_name = "URL", default_value = DEFAULT_NATS)]
    pub nats: String,
    #[command(flatten)]
    pub nats_auth: NatsArgs,
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
    #[command(flatten)]
    pub read: FleetReadArgs,
    /// A full-screen view, refreshed every second (q quits), missing units highlighted; on a
    /// terminal only, elsewhere the one-shot table.
    #[arg(long, conflicts_with = "json")]
    pub watch: bool,
}

/// What a reader of the fleet's streams gives: where they are, and how to print them.
#[derive(Args, Debug, Clone)]
pub struct FleetReadArgs {
    /// The fleet's NATS servers, comma separated (any one answering is enough).
    #[arg(long, value_name = "URLS", default_value = DEFAULT_NATS)]
    pub nats: String,
    #[command(flatten)]
    pub nats_auth: NatsArgs,
    /// Print as JSON.
    #[arg(long)]
    pub json: bool,
}
