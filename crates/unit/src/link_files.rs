//! Each link's file of a burst: how large (the window's chunks plus slack), and opened through
//! the persistence engine with the unit's method, page size and injected faults.

use std::path::{Path, PathBuf};

use snbuf_burst::chunk::stride_for;
use snbuf_persist::fault::{inject, FaultKind};
use snbuf_persist::sink::SourceMemory;
use snbuf_persist::{open, PersistError, Sink, SinkConfig};

use crate::config::RecordConfig;

/// Memory a memory-backed output must leave to everything else (the process, the page cache,
/// other processes): a tenth of what is available, at least this much.
const MEMORY_KEPT_FREE_BYTES: u64 = 256 << 20;

/// How much file each link of a burst gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LinkRegion {
    /// Bytes of file per link: the window's chunks plus slack, or less (below).
    pub region_bytes: u64,
    /// Bytes from one chunk's start to the next.
    pub stride_bytes: u64,
    /// What the window needs per link.
    pub wanted_bytes: u64,
    /// Why `region_bytes` is less than `wanted_bytes`, if it is.
    pub limited_by: Option<Limit>,
}

/// What keeps a burst's files smaller than its window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Limit {
    /// The output's file system is memory (tmpfs): its pages are RAM, and filling it past what
    /// is available gets the process killed.
    Memory,
    /// The output's file system has no more free space.
    Disk,
}

/// The files of a burst whose window holds `window_frames` frames per link: room for the
/// window's chunks plus slack for partial chunks, rounded to 2 MiB (huge-page mappings). On a
/// memory-backed output it is cut, before anything is allocated, to what memory can hold; each
/// link then stops, failed "full", when its share is used, and the rest of its window is lost
/// (counted).
pub(crate) fn link_region(config: &RecordConfig, window_frames: u64) -> LinkRegion {
    // The largest stride on any medium in use: a header block and alignment of up to 4 KiB.
    let stride = stride_for(4096, max_payload_bytes(config), 4096);
    let chunks = window_frames.div_ceil(config.chunk_frames as u64) + slack_chunks(config);
    let wanted = (chunks * stride).div_ceil(2 << 20) * (2 << 20);
    // Memory outputs share one RAM: sized as if every link were on memory.
    let memory_backed = config
        .outputs()
        .iter()
        .any(|o| snbuf_persist::medium::probe(o).is_ok_and(|m| m.volatile));
    let room = if memory_backed {
        memory_room_for_each_link(config, stride)
    } else {
        None
    };
    assert!(
        stride > 0 && wanted.is_multiple_of(2 << 20),
        "whole huge pages of whole strides"
    );
    match room {
        Some(room) if room < wanted => LinkRegion {
            region_bytes: room,
            stride_bytes: stride,
            wanted_bytes: wanted,
            limited_by: Some(Limit::Memory),
        },
        _ => LinkRegion {
            region_bytes: wanted,
            stride_bytes: stride,
            wanted_bytes: wanted,
            limited_by: None,
        },
    }
}

/// Chunks of file every link gets beyond its window's: partial chunks, and slack.
fn slack_chunks(config: &RecordConfig) -> u64 {
    4 * config.links as u64 + 16
}

/// The most window frames a link's file of `region_bytes` holds (the inverse of `link_region`).
pub(crate) fn frames_fitting(config: &RecordConfig, region_bytes: u64) -> u64 {
    let stride = stride_for(4096, max_payload_bytes(config), 4096);
    assert!(stride > 0, "a chunk takes some bytes");
    (region_bytes / stride).saturating_sub(slack_chunks(config)) * config.chunk_frames as u64
}

/// The largest file each link of the burst being recorded may grow to, from `region_bytes`
/// now: what it has, plus its share of what memory can still give (a memory output: the file's
/// pages were allocated when it was opened) and of what every output's file system has free.
pub(crate) fn room_to_grow(config: &RecordConfig, region_bytes: u64) -> u64 {
    let stride = stride_for(4096, max_payload_bytes(config), 4096);
    let memory_backed = config
        .outputs()
        .iter()
        .any(|o| snbuf_persist::medium::probe(o).is_ok_and(|m| m.volatile));
    let disk = disk_room_for_each_link(config, stride).0;
    let more = match memory_backed {
        true => disk.min(memory_room_for_each_link(config, stride).unwrap_or(0)),
        false => disk,
    };
    let room = region_bytes + more;
    debug_assert!(
        room >= region_bytes,
        "a file's room to grow is at least what it has"
    );
    room
}

/// Bytes each link's file may take from memory now, whole strides and pages.
fn memory_room_for_each_link(config: &RecordConfig, stride: u64) -> Option<u64> {
    let available = snbuf_persist::medium::memory_available_bytes()?;
    let usable = available.saturating_sub((available / 10).max(MEMORY_KEPT_FREE_BYTES));
    assert!(config.links > 0, "a unit has links");
    Some(whole_strides_and_pages(
        config,
        usable / config.links as u64,
        stride,
    ))
}

/// Bytes of file each link can have on the outputs' file systems now (a whole number of chunk
/// strides and pages), keeping a twentieth of each one's free space for the manifest and other
/// files: the least any output can give each of its links, and that output. Outputs on one file
/// system share its free space: their links are counted together.
pub(crate) fn disk_room_for_each_link(config: &RecordConfig, stride: u64) -> (u64, PathBuf) {
    use std::os::unix::fs::MetadataExt;
    let outputs = config.outputs();
    let n = outputs.len() as u64;
    let links = config.links as u64;
    // Links i with i mod n == k.
    let links_on = |k: usize| (links + n - 1 - k as u64) / n;
    let devices: Vec<Option<u64>> = outputs
        .iter()
        .map(|o| std::fs::metadata(o).map(|m| m.dev()).ok())
        .collect();
    outputs
        .iter()
        .enumerate()
        .map(|(k, o)| {
            let sharing: u64 = match devices[k] {
                Some(d) => (0..outputs.len())
                    .filter(|&j| devices[j] == Some(d))
                    .map(links_on)
                    .sum(),
                None => links_on(k),
            };
            let free = snbuf_persist::medium::free_bytes(o).unwrap_or(0);
            (free / 20 * 19 / sharing.max(1), o)
        })
        .min_by_key(|&(room, _)| room)
        .map(|(b, o)| (whole_strides_and_pages(config, b, stride), o.clone()))
        .unwrap_or((0, config.output_dir.clone()))
}

fn whole_strides_and_pages(config: &RecordConfig, bytes: u64, stride: u64) -> u64 {
    let page = config.page_size.bytes() as u64;
    assert!(stride > 0 && page > 0, "strides and pages of some bytes");
    let whole = bytes / stride * stride / page * page;
    debug_assert!(whole <= bytes && whole.is_multiple_of(page));
    whole
}

/// Tells the operator, once per process, that a latency buffer could not be registered with
/// io_uring and why (the writes still work; the kernel pins their pages per request instead).
fn say_once_if_source_not_registered(report: &snbuf_persist::SinkReport) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SAID: AtomicBool = AtomicBool::new(false);
    let not = snbuf_persist::backends::uring::SOURCE_NOT_REGISTERED;
    if let Some(note) = report.notes.iter().find(|n| n.starts_with(not)) {
        if !SAID.swap(true, Ordering::Relaxed) {
            tracing::warn!("{note}");
        }
    }
}

/// The largest chunk payload: `chunk_frames` whole frames.
pub(crate) fn max_payload_bytes(config: &RecordConfig) -> usize {
    config.chunk_frames as usize * config.frame_type.frame_bytes() as usize
}

/// Opens one link's sink. `populate`: map and touch every page now (ahead of a trigger), or
/// leave the pages to the first writes (at a trigger, where time is short).
pub(crate) fn open_link_sink(
    config: &RecordConfig,
    link: u32,
    path: &Path,
    region_bytes: u64,
    stride: u64,
    populate: bool,
    source: Option<SourceMemory>,
) -> Result<Box<dyn Sink>, PersistError> {
    let mut c = SinkConfig::new(config.method, path, region_bytes);
    // The link's latency buffer, which its chunks are written from (io_uring registers it).
    c.source = source;
    c.max_io_bytes = stride as usize;
    c.page_size = config.page_size;
    c.sync_mode = config.sync_mode;
    c.populate = populate;
    c.completion_deadline = config.completion_deadline;
    let sink = open(&c)?;
    say_once_if_source_not_registered(sink.report());
    let faults: Vec<FaultKind> = config
        .faults
        .iter()
        .filter(|f| f.applies_to(link))
        .map(|f| f.kind)
        .collect();
    Ok(if faults.is_empty() {
        sink
    } else {
        Box::new(inject(sink, faults, config.completion_deadline))
    })
}
