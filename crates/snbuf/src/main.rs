//! snbuf: the command-line program. A thin layer over the crates below it: it parses arguments,
//! shows progress and tables in human units, and writes machine-readable results on request.

mod cli;
mod cmd_bench;
mod cmd_burst;
mod cmd_export;
mod cmd_fleet;
mod cmd_methods;
mod cmd_paper;
mod cmd_plan;
mod cmd_record;
mod cmd_serve;
mod cmd_suites;
mod config_file;
mod exit;
mod table;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Bench(cmd) => cmd_bench::run(cmd),
        cli::Command::Record(args) => cmd_record::run(*args),
        cli::Command::Plan(args) => cmd_plan::run(&args),
        cli::Command::Serve(args) => cmd_serve::serve(*args),
        cli::Command::Trigger(args) => cmd_serve::trigger(&args),
        cli::Command::Status(args) => cmd_serve::status(&args),
        cli::Command::Report(args) => cmd_paper::report(&args),
        cli::Command::Fleet(cmd) => cmd_fleet::run(cmd),
        cli::Command::Export(args) => cmd_export::run(&args),
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
        Err(e) => {
            // One line a person can act on; the chain of contexts names file, method, operation.
            eprintln!("snbuf: error: {e:#}");
            ExitCode::from(exit::code_for(&e))
        }
    }
}
