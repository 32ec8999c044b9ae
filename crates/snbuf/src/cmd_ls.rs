//! `snbuf ls`: the bursts under an output directory, one line each.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use snbuf_burst::coded_link::SUFFIX;
use snbuf_burst::{verify_burst, BurstState, Manifest};
use snbuf_quantity::{utc_stamp, Bytes};

use crate::exit::usage;
use snbuf_console::Table;

/// One burst as `ls` shows it.
struct Entry {
    id: String,
    state: String,
    created_unix_ns: Option<u64>,
    window_s: Option<f64>,
    bytes: u64,
    lost_frames: Option<u64>,
    frames: Option<u64>,
    verified: String,
    exported: String,
}

pub fn run(dir: &Path, json_out: bool, verify: bool) -> anyhow::Result<()> {
    if !dir.is_dir() {
        return Err(usage(format!("{}: not a directory", dir.display())));
    }
    // A unit serving this directory says which burst it is recording, and any recorder holds
    // its burst's lock (a "recording" manifest with neither is an interrupted burst).
    let recording = recording_now(&dir.join("snbuf.sock"));
    let mut entries: Vec<Entry> = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !path.is_dir() {
            continue;
        }
        if let Some(entry) = entry(&path, &name, recording.as_deref(), verify) {
            entries.push(entry);
        }
    }
    entries.sort_by(|a, b| (a.created_unix_ns, &a.id).cmp(&(b.created_unix_ns, &b.id)));
    if json_out {
        let v: Vec<Value> = entries
            .iter()
            .map(|e| {
                json!({
                    "burst_id": e.id, "state": e.state, "created_unix_ns": e.created_unix_ns,
                    "window_s": e.window_s, "bytes": e.bytes, "frames": e.frames,
                    "lost_frames": e.lost_frames, "verified": e.verified, "exported": e.exported,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    if entries.is_empty() {
        println!("no bursts in {}", dir.display());
        return Ok(());
    }
    let mut t = Table::new(&[
        ("burst", false),
        ("state", false),
        ("triggered (UTC)", false),
        ("window", true),
        ("size", true),
        ("lost", true),
        ("verified", false),
        ("exported", false),
    ]);
    for e in &entries {
        t.row(vec![
            e.id.clone(),
            e.state.clone(),
            e.created_unix_ns
                .map(|ns| utc_stamp(ns / 1_000_000_000))
                .unwrap_or_else(|| "-".into()),
            e.window_s.map_or("-".into(), |s| format!("{s:.1} s")),
            Bytes(e.bytes).to_string(),
            e.lost_frames.map_or("-".into(), |l| l.to_string()),
            e.verified.clone(),
            e.exported.clone(),
        ]);
    }
    print!("{}", t.render());
    Ok(())
}

/// The burst in `path`, or None when it holds no burst (no manifest and no link file).
fn entry(path: &Path, name: &str, recording: Option<&str>, verify: bool) -> Option<Entry> {
    let files: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            // A link file, or its coded copy (`export --codec frames`): the bytes it takes here.
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let name = name.strip_suffix(SUFFIX).unwrap_or(name);
            snbuf_burst::manifest::link_of_file_name(name).is_some()
        })
        .collect();
    let bytes: u64 = files
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .sum();
    let manifest = Manifest::read(path).ok();
    if manifest.is_none() && files.is_empty() {
        return None;
    }
    let state = state_words(path, name, manifest.as_ref(), recording);
    let verified = verified_words(path, manifest.as_ref(), verify);
    let exported = snbuf_export::export_state(path);
    let window_s = manifest.as_ref().and_then(|m| {
        let (t, f) = (m.trigger.as_ref()?, m.frame.as_ref()?);
        let ticks = t
            .window_end_timestamp
            .checked_sub(t.window_start_timestamp)?;
        Some(ticks as f64 / f.clock_hz.max(1) as f64)
    });
    Some(Entry {
        id: name.to_string(),
        state,
        created_unix_ns: manifest.as_ref().map(|m| m.created_unix_ns),
        window_s,
        bytes,
        lost_frames: manifest
            .as_ref()
            .map(|m| m.links.iter().map(|l| l.lost_frames).sum()),
        frames: manifest
            .as_ref()
            .map(|m| m.links.iter().map(|l| l.data.frames).sum()),
        verified,
        exported,
    })
}

/// How `ls` words a burst's state: "recording" while a unit records it, "interrupted" where
/// its recording stopped short, else its manifest's state.
fn state_words(
    path: &Path,
    name: &str,
    manifest: Option<&Manifest>,
    recording: Option<&str>,
) -> String {
    match manifest {
        None => "interrupted (no manifest)".to_string(),
        Some(m) => match m.state {
            BurstState::Recording
                if recording == Some(name) || snbuf_burst::being_recorded(path) =>
            {
                "recording".into()
            }
            BurstState::Recording => "interrupted".into(),
            other if m.coded.is_some() => format!("{other:?}, coded copy").to_lowercase(),
            other => format!("{other:?}").to_lowercase(),
        },
    }
}

/// How `ls` words whether a burst verified: checked now (`--verify`), or as its manifest last
/// recorded it.
fn verified_words(path: &Path, manifest: Option<&Manifest>, verify: bool) -> String {
    if verify {
        match verify_burst(path) {
            Ok(r) if r.valid => "yes (now)".into(),
            Ok(r) => format!(
                "NO ({} problems)",
                r.problems.len() + r.links.iter().map(|l| l.problems.len()).sum::<usize>()
            ),
            Err(e) => format!("NO ({e})"),
        }
    } else {
        match manifest.and_then(|m| m.verified) {
            Some(v) if v.valid => "yes".into(),
            Some(v) => format!("NO ({} problems)", v.problems),
            None => "-".into(),
        }
    }
}

/// The burst a unit serving `socket` is recording, if one answers within its timeout.
fn recording_now(socket: &Path) -> Option<String> {
    if !socket.exists() {
        return None;
    }
    let s: snbuf_unit::protocol::UnitStatus =
        snbuf_unit::server::control::ask(socket, &snbuf_unit::protocol::Request::Status).ok()?;
    s.recording_burst.map(|b| b.burst_id)
}
