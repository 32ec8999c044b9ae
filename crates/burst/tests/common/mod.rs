//! Writes small real bursts for the tests: through `BurstWriter`, the recorder's own way, with
//! O_DIRECT through the persistence engine.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use snbuf_burst::{BurstSpec, BurstWriter, FrameInfo, Manifest, Window};
use snbuf_persist::{open, Method, SinkConfig};

pub const FRAME_BYTES: u32 = 5568;
pub const TICKS_PER_FRAME: u64 = 300;
pub const FRAMES_PER_CHUNK: u32 = 4;
pub const CHUNKS: u64 = 6;
pub const FIRST_TS: u64 = 3_000_000;

/// Chunk `seq` of `link`: ProtoDUNE WIB superchunks from `first_ts`, their bytes a pattern of
/// link and chunk, their timestamps where the frame type keeps them.
pub fn frames(link: u32, seq: u64, first_ts: u64) -> Vec<u8> {
    let mut b: Vec<u8> = (0..FRAME_BYTES as usize * FRAMES_PER_CHUNK as usize)
        .map(|i| (i as u64 ^ (seq * 131 + link as u64 * 7)) as u8)
        .collect();
    let layout = snbuf_frames::FrameType::ProtoDuneWib.layout();
    for (k, f) in b.chunks_exact_mut(FRAME_BYTES as usize).enumerate() {
        layout.write_timestamp(f, first_ts + k as u64 * TICKS_PER_FRAME);
    }
    b
}

/// A burst in a temporary directory (removed when this is dropped).
pub struct TestBurst {
    _root: tempfile::TempDir,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

impl TestBurst {
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

/// A sealed burst of `links` links, CHUNKS chunks each, whose trigger window is exactly its
/// frames.
pub fn write_burst(links: u32) -> TestBurst {
    let root = tempfile::tempdir().unwrap();
    let frames_total = CHUNKS * FRAMES_PER_CHUNK as u64;
    let spec = BurstSpec {
        burst_id: "test-burst".into(),
        frame: FrameInfo {
            frame_type: "protodune-wib".into(),
            frame_bytes: FRAME_BYTES,
            ticks_per_frame: TICKS_PER_FRAME,
            clock_hz: 50_000_000,
            frame_step_ticks: None,
        },
        trigger: Some(Window {
            trigger_timestamp: FIRST_TS + 10 * TICKS_PER_FRAME,
            window_start_timestamp: FIRST_TS,
            window_end_timestamp: FIRST_TS + frames_total * TICKS_PER_FRAME,
            ..Window::default()
        }),
        method: "direct".into(),
        links: (0..links).collect(),
        max_payload_bytes: (FRAME_BYTES * FRAMES_PER_CHUNK) as usize,
        identities: vec![],
        run_number: None,
        unit: None,
        injected_faults: Vec::new(),
    };
    let mut burst = BurstWriter::create(root.path(), spec, |_, path| {
        let mut config = SinkConfig::new(Method::Direct, path, 1 << 20);
        config.max_io_bytes = 64 << 10;
        open(&config)
    })
    .unwrap();
    for link in 0..links {
        let mut ts = FIRST_TS;
        for seq in 0..CHUNKS {
            let last = ts + (FRAMES_PER_CHUNK as u64 - 1) * TICKS_PER_FRAME;
            burst
                .write_chunk(link as usize, ts, last, &frames(link, seq, ts))
                .unwrap();
            ts = last + TICKS_PER_FRAME;
        }
    }
    let dir = burst.dir().to_path_buf();
    let manifest = burst.seal().unwrap();
    TestBurst {
        _root: root,
        dir,
        manifest,
    }
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
