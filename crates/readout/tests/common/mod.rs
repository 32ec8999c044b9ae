//! Test frames shared by the latency-buffer tests: a timestamp at bytes 0..8 (the layout's),
//! and the test's own sequence number at 8..16 to tell frames apart.

#![allow(dead_code)] // each test binary uses its own share of these

use snbuf_readout::{FrameLayout, FrameType};

pub fn layout(frame_bytes: u32, ticks_per_frame: u64) -> FrameLayout {
    FrameType::Custom {
        frame_bytes,
        ticks_per_frame,
        timestamp_offset: 0,
    }
    .layout()
}

pub fn stamp(f: &mut [u8], ts: u64, seq: u64) {
    f[..8].copy_from_slice(&ts.to_le_bytes());
    f[8..16].copy_from_slice(&seq.to_le_bytes());
}

pub fn sequence_of(f: &[u8]) -> u64 {
    u64::from_le_bytes(f[8..16].try_into().unwrap())
}

pub fn timestamp_of(f: &[u8]) -> u64 {
    u64::from_le_bytes(f[..8].try_into().unwrap())
}
