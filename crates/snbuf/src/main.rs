//! snbuf: the command-line program. A thin layer over the crates below it: it parses arguments,
//! shows progress and tables in human units, and writes machine-readable results on request.

#![forbid(unsafe_code)]

mod args;
mod cli;
mod cmd_bench;
mod cmd_burst;
mod cmd_checksum;
mod cmd_emit;
mod cmd_export;
mod cmd_fleet;
mod cmd_ls;
mod cmd_man;
mod cmd_methods;
mod cmd_offline;
mod cmd_paper;
mod cmd_plan;
mod cmd_record;
mod cmd_serve;
mod cmd_show;
mod cmd_suites;
mod config_file;
mod exit;
mod export_setup;
mod fleet_args;
mod fleet_rows;
mod ingest_words;
mod live;
mod logging;
mod progress;
mod suite_runner;
mod table;
mod unit_config;

use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match config_file::parse() {
        Ok(cli) => cli,
        Err(e) => return fail(e),
    };
    if cli.command.writes_only_to_the_terminal() {
        snbuf_platform::process::exit_quietly_on_broken_pipe();
    }
    if !matches!(cli.command, cli::Command::Serve(_)) {
        logging::init_for_command();
    }
    let result = match cli.command {
        cli::Command::Bench(cmd) => match cmd {
            cli::BenchCommand::Write(a) => cmd_bench::throughput(snbuf_bench::Direction::Write, *a),
            cli::BenchCommand::Read(a) => cmd_bench::throughput(snbuf_bench::Direction::Read, *a),
            cli::BenchCommand::Latency(a) => cmd_suites::latency(a),
            cli::BenchCommand::Join(a) => cmd_suites::join(a),
            cli::BenchCommand::Kernels(a) => cmd_suites::kernels(a),
            cli::BenchCommand::App(a) => cmd_suites::app(a),
            cli::BenchCommand::Checksum(a) => cmd_checksum::run(a),
            cli::BenchCommand::Paper(a) => cmd_paper::run(a),
        },
        cli::Command::Record(args) => cmd_record::run(*args),
        cli::Command::Plan(args) => cmd_plan::run(&args),
        cli::Command::Serve(args) => cmd_serve::serve(*args),
        cli::Command::Emit(args) => cmd_emit::run(&args),
        cli::Command::Trigger(args) => match &args.nats {
            Some(servers) => cmd_fleet::trigger(&args, servers),
            None => cmd_serve::trigger(&args),
        },
        cli::Command::Status(args) => cmd_serve::status(&args),
        cli::Command::Report(args) => cmd_paper::report(&args),
        cli::Command::Fleet(cmd) => cmd_fleet::run(cmd),
        cli::Command::Export(args) => cmd_export::run(&args),
        cli::Command::Convert(args) => cmd_offline::convert(&args),
        cli::Command::Inspect(args) => cmd_offline::inspect(&args),
        cli::Command::Show(args) => cmd_show::run(&args),
        cli::Command::Extract(args) => cmd_offline::extract(&args),
        cli::Command::Ls { dir, verify, json } => cmd_ls::run(&dir, json, verify),
        cli::Command::Completions { shell } => cmd_man::completions(shell),
        cli::Command::Man { dir } => cmd_man::man_pages(&dir),
        cli::Command::Methods { target } => cmd_methods::run(target.as_deref()),
        cli::Command::Verify { burst_dir, json } => cmd_burst::verify(&burst_dir, json),
        cli::Command::Recover {
            burst_dir,
            dry_run,
            json,
        } => cmd_burst::recover(&burst_dir, dry_run, json),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}

/// One line a person can act on (the chain of contexts names file, method, operation), and the
/// exit code that says whose mistake it was.
fn fail(e: anyhow::Error) -> ExitCode {
    eprintln!("snbuf: error: {e:#}");
    ExitCode::from(exit::code_for(&e))
}
