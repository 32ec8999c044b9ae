//! `snbuf completions` and `snbuf man`: shell completion and man pages, generated from the
//! same clap definitions as the help, so they never disagree with it.

use std::path::Path;

use clap::CommandFactory;

use crate::cli::Cli;
use crate::exit::usage;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "snbuf", &mut std::io::stdout());
    Ok(())
}

/// `snbuf.1`, and `snbuf-<command>.1` (`snbuf-bench-write.1`, ...) for every subcommand.
pub fn man_pages(dir: &Path) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        return Err(usage(format!("{}: not a directory", dir.display())));
    }
    std::fs::create_dir_all(dir).map_err(|e| usage(format!("{}: {e}", dir.display())))?;
    let mut written = 0;
    write_pages(&Cli::command(), "snbuf", dir, &mut written)?;
    eprintln!("{written} man pages in {}", dir.display());
    Ok(())
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut usize,
) -> anyhow::Result<()> {
    let cmd = cmd
        .clone()
        .name(name.to_string())
        .bin_name(name.replace('-', " "));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    let path = dir.join(format!("{name}.1"));
    snbuf_persist::replace::replace_file(
        &path,
        &page,
        snbuf_persist::replace::ReplaceDurability::Atomic,
    )?;
    *written += 1;
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}
