//! `snbuf bench ...` as the command line runs it: each suite's arguments (`args.rs`), how they
//! become the suite's config, and the run with its progress bar, its table in human units, its
//! notes and its JSON (`runner.rs`). A new suite adds its arguments here and a line to `run`;
//! the binary only parses and calls.

mod args;
mod checksum;
mod codec;
pub mod methods;
mod paper;
pub mod plan;
mod runner;
mod suites;
mod throughput;

pub use args::{
    AppArgs, BenchCommand, ChecksumArgs, CodecArgs, JoinArgs, KernelsArgs, LatencyArgs, PaperArgs,
    PatternArg, PlanArgs, SyncArg, ThroughputArgs,
};

use crate::Direction;

/// Runs one `snbuf bench` command to the end: its results printed and kept as asked. An error
/// made by the user's options is a `snbuf_console::UsageError`.
pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Write(a) => throughput::throughput(Direction::Write, *a),
        BenchCommand::Read(a) => throughput::throughput(Direction::Read, *a),
        BenchCommand::Latency(a) => suites::latency(a),
        BenchCommand::Join(a) => suites::join(a),
        BenchCommand::Kernels(a) => suites::kernels(a),
        BenchCommand::App(a) => suites::app(a),
        BenchCommand::Checksum(a) => checksum::run(a),
        BenchCommand::Codec(a) => codec::run(a),
        BenchCommand::Paper(a) => paper::run(a),
    }
}
