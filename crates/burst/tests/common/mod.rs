//! Writes small real bursts (O_DIRECT through the persistence engine) for the tests.
#![allow(dead_code)]

use std::path::Path;

use snbuf_burst::manifest::{link_file_name, now_unix_ns, MANIFEST_FORMAT, MANIFEST_VERSION};
use snbuf_burst::{
    BurstState, ChunkWriter, FrameInfo, LinkRecord, LinkState, Manifest, TriggerInfo,
};
use snbuf_persist::{open, Method, SinkConfig};

pub const FRAME_BYTES: u32 = 5568;
pub const TICKS_PER_FRAME: u64 = 300;
pub const FRAMES_PER_CHUNK: u32 = 4;
pub const CHUNKS: u64 = 6;
pub const FIRST_TS: u64 = 3_000_000;

pub fn frames(link: u32, seq: u64) -> Vec<u8> {
    (0..FRAME_BYTES as usize * FRAMES_PER_CHUNK as usize)
        .map(|i| (i as u64 ^ (seq * 131 + link as u64 * 7)) as u8)
        .collect()
}

/// A sealed burst of `links` links, CHUNKS chunks each, written durably with `direct`.
pub fn write_burst(dir: &Path, links: u32) -> Manifest {
    let mut records = Vec::new();
    for link in 0..links {
        let path = dir.join(link_file_name(link));
        let mut config = SinkConfig::new(Method::Direct, &path, 1 << 20);
        config.max_io_bytes = 64 << 10;
        let sink = open(&config).unwrap();
        let mut w = ChunkWriter::new(
            sink,
            link,
            FRAME_BYTES,
            (FRAME_BYTES * FRAMES_PER_CHUNK) as usize,
        )
        .unwrap();
        let mut ts = FIRST_TS;
        for seq in 0..CHUNKS {
            let last = ts + (FRAMES_PER_CHUNK as u64 - 1) * TICKS_PER_FRAME;
            w.write_chunk(ts, last, &frames(link, seq)).unwrap();
            ts = last + TICKS_PER_FRAME;
        }
        let t = w.totals();
        drop(w);
        // Seal: trim the preallocated region to what holds data.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(t.file_bytes)
            .unwrap();
        records.push(LinkRecord {
            link,
            file: link_file_name(link),
            state: LinkState::Ok,
            chunks: t.chunks,
            frames: t.frames,
            payload_bytes: t.payload_bytes,
            file_bytes: t.file_bytes,
            first_timestamp: t.first_timestamp,
            last_timestamp: t.last_timestamp,
            lost_frames: 0,
            error: None,
        });
    }
    let frames_total = CHUNKS * FRAMES_PER_CHUNK as u64;
    let m = Manifest {
        format: MANIFEST_FORMAT.into(),
        format_version: MANIFEST_VERSION,
        burst_id: "test-burst".into(),
        state: BurstState::Sealed,
        created_unix_ns: now_unix_ns(),
        sealed_unix_ns: Some(now_unix_ns()),
        trigger: Some(TriggerInfo {
            trigger_timestamp: FIRST_TS + 10 * TICKS_PER_FRAME,
            window_start_timestamp: FIRST_TS,
            window_end_timestamp: FIRST_TS + frames_total * TICKS_PER_FRAME,
        }),
        frame: Some(FrameInfo {
            frame_type: "protodune-wib".into(),
            frame_bytes: FRAME_BYTES,
            ticks_per_frame: TICKS_PER_FRAME,
            clock_hz: 50_000_000,
        }),
        method: "direct".into(),
        durability: "fdatasync".into(),
        links: records,
        recovery: None,
    };
    m.write_atomic(dir).unwrap();
    m
}

/// Every file of a directory with its bytes, to prove nothing changed.
pub fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}
