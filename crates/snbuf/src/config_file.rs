//! `--config FILE`: the options of `record` and `serve` in a TOML file. Keys are the long
//! options with `_` for `-`; unknown keys are an error (a typo must not be silently ignored).
//! Values given on the command line win over the file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use snbuf_quantity::parse_duration;
use snbuf_quantity::values::parse_page_size;

use crate::cli::RecordArgs;
use crate::exit::usage;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecordFile {
    links: Option<u32>,
    frame: Option<String>,
    rate_per_link: Option<String>,
    buffer: Option<String>,
    pre: Option<String>,
    post: Option<String>,
    trigger_after: Option<String>,
    method: Option<String>,
    writers: Option<usize>,
    chunk_frames: Option<u32>,
    chunks_per_persist: Option<u32>,
    cpus: Option<String>,
    page_size: Option<String>,
    replay: Option<PathBuf>,
    output: Option<PathBuf>,
    burst_id: Option<String>,
    profile: Option<String>,
    status_file: Option<PathBuf>,
    source: Option<String>,
    #[serde(default)]
    streams: Vec<u8>,
    header_version: Option<String>,
    rcvbuf: Option<String>,
    gro: Option<bool>,
    receive_nap: Option<String>,
    run: Option<u32>,
    unit: Option<String>,
    #[serde(default)]
    source_ids: Vec<u32>,
    #[serde(default)]
    inject_fault: Vec<String>,
    completion_deadline: Option<String>,
    /// `serve`'s fleet: the NATS servers, comma separated, and the streams' replicas.
    nats: Option<String>,
    nats_replicas: Option<u32>,
    /// The export destination's settings and credentials (`[s3]`): never printed.
    s3: Option<snbuf_export::S3Settings>,
}

/// `args` with every option it lacks taken from its `--config` file, if any.
pub fn merge(args: &RecordArgs) -> anyhow::Result<RecordArgs> {
    let Some(path) = &args.config else {
        return Ok(args.clone());
    };
    let f = read(path)?;
    let dur = |key: &str, v: &Option<String>| -> anyhow::Result<Option<std::time::Duration>> {
        v.as_deref()
            .map(|s| {
                parse_duration(s)
                    .map_err(|e| usage(format!("--config {}: {key}: {e}", path.display())))
            })
            .transpose()
    };
    let page = f
        .page_size
        .as_deref()
        .map(|s| {
            parse_page_size(s)
                .map_err(|e| usage(format!("--config {}: page_size: {e}", path.display())))
        })
        .transpose()?;
    let mut a = args.clone();
    a.links = a.links.or(f.links);
    a.frame = a.frame.or(f.frame);
    a.rate_per_link = a.rate_per_link.or(f.rate_per_link);
    a.buffer = a.buffer.or(dur("buffer", &f.buffer)?);
    a.pre = a.pre.or(dur("pre", &f.pre)?);
    a.post = a.post.or(dur("post", &f.post)?);
    a.trigger_after = a.trigger_after.or(dur("trigger_after", &f.trigger_after)?);
    a.method = a.method.or(f.method);
    a.writers = a.writers.or(f.writers);
    a.chunk_frames = a.chunk_frames.or(f.chunk_frames);
    a.chunks_per_persist = a.chunks_per_persist.or(f.chunks_per_persist);
    a.completion_deadline = a
        .completion_deadline
        .or(dur("completion_deadline", &f.completion_deadline)?);
    a.cpus = a.cpus.or(f.cpus);
    a.page_size = a.page_size.or(page);
    a.replay = a.replay.or_else(|| f.replay.map(|p| relative_to(path, p)));
    if a.output.is_empty() {
        a.output.extend(f.output.map(|p| relative_to(path, p)));
    }
    a.burst_id = a.burst_id.or(f.burst_id);
    a.profile = a.profile.or(f.profile);
    a.status_file = a
        .status_file
        .or_else(|| f.status_file.map(|p| relative_to(path, p)));
    if a.inject_fault.is_empty() {
        a.inject_fault = f.inject_fault;
    }
    a.source = a.source.or(f.source);
    if a.streams.is_empty() {
        a.streams = f.streams;
    }
    a.header_version = a.header_version.or(f.header_version);
    a.rcvbuf = match (a.rcvbuf, f.rcvbuf.as_deref()) {
        (Some(b), _) => Some(b),
        (None, Some(s)) => Some(
            snbuf_quantity::values::parse_size_nonzero(s)
                .map_err(|e| usage(format!("--config {}: rcvbuf: {e}", path.display())))?,
        ),
        (None, None) => None,
    };
    a.gro = a.gro.or(f.gro);
    a.receive_nap = match (a.receive_nap, f.receive_nap.as_deref()) {
        (Some(n), _) => Some(n),
        (None, Some(s)) => Some(
            crate::cli::parse_receive_nap(s)
                .map_err(|e| usage(format!("--config {}: receive_nap: {e}", path.display())))?,
        ),
        (None, None) => None,
    };
    a.run = a.run.or(f.run);
    a.unit = a.unit.or(f.unit);
    if a.source_ids.is_empty() {
        a.source_ids = f.source_ids;
    }
    a.s3 = f.s3;
    a.nats_from_config = f.nats;
    a.nats_replicas_from_config = f.nats_replicas;
    Ok(a)
}

/// Relative paths in a config file are relative to the file, not to wherever snbuf runs.
fn relative_to(config: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() {
        p
    } else {
        config.parent().unwrap_or(Path::new(".")).join(p)
    }
}

/// The config file at `path`, parsed; either failure is a usage error naming the file.
fn read(path: &Path) -> anyhow::Result<RecordFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("--config {}: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        usage(format!(
            "--config {}: {}",
            path.display(),
            one_line(&e.to_string())
        ))
    })
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The `[s3]` table of a config file, for `snbuf export --config FILE`.
pub fn s3_settings(path: &Path) -> anyhow::Result<snbuf_export::S3Settings> {
    let f = read(path)?;
    Ok(f.s3.unwrap_or_default())
}
