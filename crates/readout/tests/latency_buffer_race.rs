//! A reader racing the producer on a tiny ring: every copy it accepts is an intact frame (every
//! byte derived from the frame's own sequence number), every frame it misses is reported as
//! overwritten, each frame it accepts comes with its own checksum, and the producer never waits.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod common;

use common::{sequence_of, stamp};
use snbuf_platform::PageSize;
use snbuf_readout::latency_buffer::frame_crc32c;
use snbuf_readout::{latency_buffer, FrameLayout, RingReadError};

const FRAME: usize = 256;

/// 256-byte frames, 25 ticks apart.
fn layout() -> FrameLayout {
    common::layout(FRAME as u32, 25)
}

fn fill(seq: u64, f: &mut [u8]) {
    for (i, b) in f.iter_mut().enumerate().skip(16) {
        *b = (seq as usize * 31 + i) as u8;
    }
    stamp(f, seq * 25, seq);
}

fn intact(f: &[u8]) -> bool {
    let seq = sequence_of(f);
    f.iter()
        .enumerate()
        .skip(16)
        .all(|(i, &b)| b == (seq as usize * 31 + i) as u8)
}

#[test]
fn a_racing_reader_never_accepts_a_torn_frame() {
    let (mut producer, buffer) = latency_buffer(layout(), 16, PageSize::Small4K).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut n = 0u64;
        while !stop2.load(Ordering::Relaxed) && n < 20_000_000 {
            producer.push(fill);
            n += 1;
        }
        n
    });
    let mut out = vec![0u8; FRAME * 4];
    let (mut accepted, mut lost, mut next) = (0u64, 0u64, 0u64);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    while std::time::Instant::now() < deadline {
        match buffer.read(next, &mut out) {
            Ok(n) => {
                for f in out.chunks(FRAME).take(n) {
                    assert!(
                        intact(f),
                        "a torn frame was accepted: seq {}",
                        sequence_of(f)
                    );
                    assert_eq!(sequence_of(f), next, "frames come in order");
                    next += 1;
                    accepted += 1;
                }
            }
            Err(RingReadError::Overwritten { oldest }) => {
                lost += oldest - next;
                next = oldest;
            }
            Err(RingReadError::NotYet) => std::hint::spin_loop(),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let produced = writer.join().unwrap();
    assert!(accepted > 0, "the reader read something");
    assert!(next <= produced);
    eprintln!("produced {produced}, accepted {accepted}, reported lost {lost}");
}

#[test]
fn streamed_frames_published_in_batches_are_never_read_torn_nor_with_a_wrong_checksum() {
    use snbuf_platform::instructions::StreamingCopy;
    let (mut producer, buffer) = latency_buffer(layout(), 16, PageSize::Small4K).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let copy = StreamingCopy::detect();
        let mut frame = vec![0u8; FRAME];
        let mut n = 0u64;
        while !stop2.load(Ordering::Relaxed) && n < 20_000_000 {
            // Made in "cache" and checksummed there, as the emulator does; the even frames
            // leave the checksum to the ring (read back from the slot).
            fill(n, &mut frame);
            if n.is_multiple_of(2) {
                producer.stage(|_, slot| copy.copy(slot, &frame));
            } else {
                let crc = frame_crc32c(&frame);
                producer.stage_with_crc(Some(crc), |_, slot| copy.copy(slot, &frame));
            }
            n += 1;
            if n.is_multiple_of(7) {
                producer.publish();
            }
        }
        n
    });
    let (mut accepted, mut next) = (0u64, 0u64);
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
    while std::time::Instant::now() < deadline {
        match buffer.read_with(next, 4, |run| {
            (0..run.frames()).all(|i| {
                intact(run.frame(i))
                    && sequence_of(run.frame(i)) == next + i as u64
                    && run.frame_crc(i) == frame_crc32c(run.frame(i))
            })
        }) {
            Ok((n, all_intact)) => {
                assert!(
                    all_intact,
                    "a torn or misplaced frame was accepted near {next}"
                );
                next += n as u64;
                accepted += n as u64;
            }
            Err(RingReadError::Overwritten { oldest }) => next = oldest,
            Err(RingReadError::NotYet) => std::hint::spin_loop(),
        }
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    assert!(accepted > 0, "the reader read something");
}
