//! `--config FILE`: the options of `record` and `serve` in a TOML file. Every long option of the
//! command is a key, with `_` for `-` (`rate_per_link = "200MB/s"`, `output = ["/a", "/b"]`
//! for a repeated option, `delete_after_verify = true` for a flag), and one table that is not an
//! option: `[s3]`, the export destination's settings and credentials. The keys are not listed
//! here: they are the command's own arguments, read from its clap definition, and each value is
//! parsed by the option's own parser, so the file and the command line cannot disagree.
//! Unknown keys are an error (a typo must not be silently ignored). Values given on the command
//! line win over the file. Relative paths are relative to the file.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, Parser, ValueHint};

use crate::cli::{Cli, Command};
use crate::exit::usage;

/// Keys of the file that are not options of the command.
const TABLES: &[&str] = &["s3"];

/// Options that are never keys: the file itself, and clap's own.
const NOT_KEYS: &[&str] = &["config", "help", "version"];
/// Options only a command line gives (the injected faults: asked for each time, never by a
/// file a unit is left running with).
const COMMAND_LINE_ONLY: &[&str] = &["inject-fault", "unsafe-faults-for-tests"];

/// The command line parsed, with the options of a `record` or `serve` `--config` file added
/// where the command line does not give them. Exits as clap does on a bad command line; a bad
/// config file is a usage error naming the file and the key.
pub fn parse() -> anyhow::Result<Cli> {
    parse_from(std::env::args_os().collect())
}

/// As `parse`, for the command line `argv` (the program's name first).
fn parse_from(argv: Vec<OsString>) -> anyhow::Result<Cli> {
    let matches = Cli::command().get_matches_from(&argv);
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let Some((name, path)) = config_of(&cli) else {
        return Ok(cli);
    };
    let table = read(&path)?;
    let (_, given) = matches.subcommand().expect("record or serve was parsed");
    // Before a trailing `--`, after which clap takes nothing as an option.
    let mut merged = argv;
    let at = merged
        .iter()
        .position(|a| a == "--")
        .unwrap_or(merged.len());
    let from_file = file_args(name, &path, &table, given)?;
    merged.splice(at..at, from_file);
    let mut cli = Cli::try_parse_from(&merged).map_err(|e| clap_error(&path, &table, &e))?;
    let s3 = s3_of(&path, &table)?;
    // Only a service exports; `record` checks the table and leaves it.
    if let Command::Serve(a) = &mut cli.command {
        a.s3 = s3;
    }
    Ok(cli)
}

/// clap's refusal of a value from the file, on one line, naming the file and the key.
fn clap_error(path: &Path, table: &toml::Table, e: &clap::Error) -> anyhow::Error {
    let text = e.render().to_string();
    let text = text.split("For more information").next().unwrap_or("");
    let text = one_line(text.trim_start_matches("error: "));
    let key = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => arg
            .split_whitespace()
            .next()
            .map(|long| long.trim_start_matches("--").replace('-', "_"))
            .filter(|key| table.contains_key(key)),
        _ => None,
    };
    match key {
        Some(key) => usage(format!("--config {}: {key}: {text}", path.display())),
        None => usage(format!("--config {}: {text}", path.display())),
    }
}

/// The subcommand's name and its `--config` file, when it has one.
fn config_of(cli: &Cli) -> Option<(&'static str, PathBuf)> {
    match &cli.command {
        Command::Record(a) => Some(("record", a.unit.config.clone()?)),
        Command::Serve(a) => Some(("serve", a.unit.config.clone()?)),
        _ => None,
    }
}

/// The keys a config file of `command` (`record` or `serve`) may hold: its long options, with
/// `_` for `-`, and the tables.
pub fn keys(command: &str) -> Vec<String> {
    let cmd = Cli::command();
    let sub = cmd
        .find_subcommand(command)
        .expect("record and serve are commands");
    let mut keys: Vec<String> = sub
        .get_arguments()
        .filter_map(|a| a.get_long())
        .filter(|l| is_key(l))
        .map(|l| l.replace('-', "_"))
        .collect();
    keys.extend(TABLES.iter().map(|t| t.to_string()));
    keys
}

fn is_key(long: &str) -> bool {
    !NOT_KEYS.contains(&long) && !COMMAND_LINE_ONLY.contains(&long)
}

/// Refuses `key` where it names an option only a command line gives.
fn command_line_only(path: &Path, key: &str) -> anyhow::Result<()> {
    let long = key.replace('_', "-");
    match COMMAND_LINE_ONLY.contains(&long.as_str()) {
        true => Err(usage(format!("--config {}: `{key}` is taken from a command line only, never a file a unit runs with: give --{long} there", path.display()))),
        false => Ok(()),
    }
}

/// The file's options as command-line arguments (`--long=value`), leaving out every option
/// `given` on the command line.
fn file_args(
    command: &str,
    path: &Path,
    table: &toml::Table,
    given: &ArgMatches,
) -> anyhow::Result<Vec<OsString>> {
    let cmd = Cli::command();
    let sub = cmd
        .find_subcommand(command)
        .expect("record and serve are commands");
    let mut out = Vec::new();
    for (key, value) in table {
        if TABLES.contains(&key.as_str()) {
            continue;
        }
        let long = key.replace('_', "-");
        // One spelling: `rate-per-link` and `rate_per_link` both set would clash in clap.
        let arg = (!key.contains('-')).then_some(()).and_then(|()| {
            sub.get_arguments()
                .find(|a| a.get_long() == Some(long.as_str()) && is_key(&long))
        });
        let Some(arg) = arg else {
            command_line_only(path, key)?;
            if command == "record" && keys("serve").contains(key) {
                eprintln!(
                    "--config {}: `{key}` is an option of `serve`; `record` leaves it alone",
                    path.display()
                );
                continue;
            }
            return Err(usage(format!(
                "--config {}: unknown key `{key}`; `{command}` takes: {}",
                path.display(),
                keys(command).join(", ")
            )));
        };
        let id = arg.get_id().as_str();
        if given.value_source(id) == Some(ValueSource::CommandLine) {
            continue;
        }
        let bad = |why: &str| {
            usage(format!(
                "--config {}: {key}: {why} (as --{long} takes)",
                path.display()
            ))
        };
        let is_flag = matches!(arg.get_action(), ArgAction::SetTrue);
        // An option whose value may be left out (`--nats` alone: the default server): `true`
        // gives it bare, `false` leaves it out.
        let value_optional = arg.get_num_args().is_some_and(|n| n.min_values() == 0);
        let is_path = matches!(
            arg.get_value_hint(),
            ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath
        );
        let items: Vec<&toml::Value> = match value {
            toml::Value::Array(items) if arg.get_action().takes_values() => {
                if !matches!(arg.get_action(), ArgAction::Append) && items.len() != 1 {
                    return Err(bad("a list, where one value is expected"));
                }
                items.iter().collect()
            }
            v => vec![v],
        };
        for item in items {
            let text = match item {
                toml::Value::String(s) => s.clone(),
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(x) => x.to_string(),
                toml::Value::Boolean(b) if is_flag || value_optional => {
                    if *b {
                        out.push(OsString::from(format!("--{long}")));
                    }
                    continue;
                }
                toml::Value::Boolean(b) => b.to_string(),
                _ => return Err(bad("a table, a list of lists or a date")),
            };
            if is_flag {
                return Err(bad("a flag: true or false"));
            }
            if text.is_empty() {
                // As the command line refuses `--output ''`: an empty path would be the
                // config file's own directory.
                return Err(bad("an empty value"));
            }
            let text = if is_path {
                relative_to(path, PathBuf::from(text))
                    .to_string_lossy()
                    .into_owned()
            } else {
                text
            };
            out.push(OsString::from(format!("--{long}={text}")));
        }
    }
    Ok(out)
}

/// Relative paths in a config file are relative to the file, not to wherever snbuf runs.
fn relative_to(config: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        config.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// The config file at `path` as a TOML table; either failure is a usage error naming the file.
fn read(path: &Path) -> anyhow::Result<toml::Table> {
    use std::io::Read;
    let fail = |why: String| usage(format!("--config {}: {why}", path.display()));
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| fail(e.to_string()))?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(fail(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    // The message and where, never the line itself: it may hold an [s3] secret.
    toml::from_str(&text).map_err(|e: toml::de::Error| {
        let line = e
            .span()
            .map(|s| format!("line {}: ", text[..s.start].matches('\n').count() + 1))
            .unwrap_or_default();
        fail(format!("{line}{}", one_line(e.message())))
    })
}

/// The largest config file read: a real one is a few hundred bytes.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `[s3]` table of a config file, parsed; none when the file has none.
fn s3_of(path: &Path, table: &toml::Table) -> anyhow::Result<Option<snbuf_export::S3Settings>> {
    table
        .get("s3")
        .map(|v| {
            v.clone().try_into().map_err(|e: toml::de::Error| {
                // A wrong type is said without its value, which may be a secret.
                let why = e.message();
                let why = match why.find("unknown field") {
                    Some(_) => one_line(why),
                    None => "a setting of the wrong type (each is a string), or not a table; values are not shown".into(),
                };
                usage(format!("--config {}: s3: {why}", path.display()))
            })
        })
        .transpose()
}

/// The `[s3]` table of a config file, for `snbuf export --config FILE`.
pub fn s3_settings(path: &Path) -> anyhow::Result<snbuf_export::S3Settings> {
    Ok(s3_of(path, &read(path)?)?.unwrap_or_default())
}

#[cfg(test)]
#[path = "config_file_tests.rs"]
mod tests;
