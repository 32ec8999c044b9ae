//! How large each link's file of a burst is: the window's chunks plus slack, or less where the
//! output cannot hold that (memory, free space).

use std::path::PathBuf;

use super::BurstFiles;
use crate::chunk::stride_for;

/// Memory a memory-backed output must leave to everything else (the process, the page cache,
/// other processes): a tenth of what is available, at least this much.
const MEMORY_KEPT_FREE_BYTES: u64 = 256 << 20;

/// How much file each link of a burst gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkRegion {
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
pub enum Limit {
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
pub fn link_region(files: &BurstFiles, window_frames: u64) -> LinkRegion {
    // The largest stride on any medium in use: a header block and alignment of up to 4 KiB.
    let stride = stride_for(4096, max_payload_bytes(files), 4096);
    let chunks = window_frames.div_ceil(files.chunk_frames as u64) + slack_chunks(files);
    let wanted = (chunks * stride).div_ceil(2 << 20) * (2 << 20);
    // Memory outputs share one RAM: sized as if every link were on memory.
    let memory_backed = files
        .outputs
        .iter()
        .any(|o| snbuf_persist::medium::probe(o).is_ok_and(|m| m.volatile));
    let room = if memory_backed {
        memory_room_for_each_link(files, stride)
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
fn slack_chunks(files: &BurstFiles) -> u64 {
    4 * files.links as u64 + 16
}

/// The most window frames a link's file of `region_bytes` holds (the inverse of `link_region`).
pub fn frames_fitting(files: &BurstFiles, region_bytes: u64) -> u64 {
    let stride = stride_for(4096, max_payload_bytes(files), 4096);
    assert!(stride > 0, "a chunk takes some bytes");
    (region_bytes / stride).saturating_sub(slack_chunks(files)) * files.chunk_frames as u64
}

/// The largest file each link of the burst being recorded may grow to, from `region_bytes`
/// now: what it has, plus its share of what memory can still give (a memory output: the file's
/// pages were allocated when it was opened) and of what every output's file system has free.
pub fn room_to_grow(files: &BurstFiles, region_bytes: u64) -> u64 {
    let stride = stride_for(4096, max_payload_bytes(files), 4096);
    let memory_backed = files
        .outputs
        .iter()
        .any(|o| snbuf_persist::medium::probe(o).is_ok_and(|m| m.volatile));
    let disk = disk_room_for_each_link(files, stride).0;
    let more = match memory_backed {
        true => disk.min(memory_room_for_each_link(files, stride).unwrap_or(0)),
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
fn memory_room_for_each_link(files: &BurstFiles, stride: u64) -> Option<u64> {
    let available = snbuf_persist::medium::memory_available_bytes()?;
    let usable = available.saturating_sub((available / 10).max(MEMORY_KEPT_FREE_BYTES));
    assert!(files.links > 0, "a unit has links");
    Some(whole_strides_and_pages(
        files,
        usable / files.links as u64,
        stride,
    ))
}

/// Bytes of file each link can have on the outputs' file systems now (a whole number of chunk
/// strides and pages), keeping a twentieth of each one's free space for the manifest and other
/// files: the least any output can give each of its links, and that output. Outputs on one file
/// system share its free space: their links are counted together.
pub fn disk_room_for_each_link(files: &BurstFiles, stride: u64) -> (u64, PathBuf) {
    use std::os::unix::fs::MetadataExt;
    let outputs = &files.outputs;
    let n = outputs.len() as u64;
    let links = files.links as u64;
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
        .map(|(b, o)| (whole_strides_and_pages(files, b, stride), o.clone()))
        .unwrap_or((0, files.home().clone()))
}

fn whole_strides_and_pages(files: &BurstFiles, bytes: u64, stride: u64) -> u64 {
    let page = files.page_size.bytes() as u64;
    assert!(stride > 0 && page > 0, "strides and pages of some bytes");
    let whole = bytes / stride * stride / page * page;
    debug_assert!(whole <= bytes && whole.is_multiple_of(page));
    whole
}

/// The largest chunk payload: `chunk_frames` whole frames.
pub fn max_payload_bytes(files: &BurstFiles) -> usize {
    files.chunk_frames as usize * files.frame_type.frame_bytes() as usize
}
