//! snbuf: the command-line program. A thin layer over the crates below it: it parses arguments,
//! shows progress and tables in human units, and writes machine-readable results on request.

#![forbid(unsafe_code)]

mod args;
mod cli;
mod cmd_burst;
mod cmd_emit;
mod cmd_export;
mod cmd_fleet;
mod cmd_ls;
mod cmd_man;
mod cmd_record;
mod cmd_report;
mod cmd_serve;
mod cmd_show;
mod config_file;
mod exit;
mod export_setup;
mod fleet_args;
mod logging;
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
        cli::Command::Bench(cmd) => snbuf_bench::command::run(cmd),
        cli::Command::Record(args) => cmd_record::run(*args),
        cli::Command::Plan(args) => snbuf_bench::command::plan::run(&args),
        cli::Command::Serve(args) => cmd_serve::serve(*args),
        cli::Command::Emit(args) => cmd_emit::run(&args),
        cli::Command::Trigger(args) => match &args.nats {
            Some(servers) => cmd_fleet::trigger(&args, servers),
            None => cmd_serve::trigger(&args),
        },
        cli::Command::Status(args) => cmd_serve::status(&args),
        cli::Command::Report(args) => cmd_report::run(&args),
        cli::Command::Fleet(cmd) => cmd_fleet::run(cmd),
        cli::Command::Export(args) => cmd_export::run(&args),
        cli::Command::Convert(args) => snbuf_offline::command::convert(&args),
        cli::Command::Inspect(args) => snbuf_offline::command::inspect(&args),
        cli::Command::Show(args) => cmd_show::run(&args),
        cli::Command::Extract(args) => snbuf_offline::command::extract(&args),
        cli::Command::Ls { dir, verify, json } => cmd_ls::run(&dir, json, verify),
        cli::Command::Completions { shell } => cmd_man::completions(shell),
        cli::Command::Man { dir } => cmd_man::man_pages(&dir),
        cli::Command::Methods { target } => snbuf_bench::command::methods::run(target.as_deref()),
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
