//! Zero-copy writes: a chunk's payload goes to the device straight from the latency buffer, so a
//! link that overwrites those ring slots while the write is in flight would put other bytes on
//! disk than the writer meant. Forced here: the sink lets the "link" overwrite the whole ring
//! in the middle of the payload's write, before or after the device took the bytes, or while the
//! write waits in a queue after the read that lent the frames ended (io_uring). Such a
//! chunk is never acknowledged and never gets a header; the next chunk takes its place; a crash
//! at any point leaves no chunk that verifies with the wrong frames.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use snbuf_burst::{scan, ChunkWriter, End, Expect, WriteError};
use snbuf_persist::sim::{SimKind, SimMedium, SimSink};
use snbuf_persist::{PageSize, Sink, SinkReport};
use snbuf_platform::Hold;
use snbuf_readout::{
    latency_buffer, FrameLayout, FrameType, LatencyBuffer, Producer, RingReadError,
};

/// Frames of 1 KiB (whole 512 B sectors, so every chunk is written from the ring), timestamp at
/// bytes 0..8, 25 ticks apart.
const FRAME: usize = 1024;
const TICKS: u64 = 25;
const RING_FRAMES: u64 = 16;
const SECTOR: u64 = 512;

fn layout() -> FrameLayout {
    FrameType::Custom {
        frame_bytes: FRAME as u32,
        ticks_per_frame: TICKS,
        timestamp_offset: 0,
    }
    .layout()
}

fn push(producer: &mut Producer, frames: u64) {
    for _ in 0..frames {
        producer.push(|seq, f| {
            f[..8].copy_from_slice(&(seq * TICKS).to_le_bytes());
            for (i, b) in f.iter_mut().enumerate().skip(8) {
                *b = (seq as usize * 131 + i) as u8;
            }
        });
    }
}

/// When the link overwrites the ring during a payload write.
const NEVER: u8 = 0;
/// Before the device reads the bytes: it writes the new frames, whose checksum then matches.
const BEFORE_THE_DEVICE_READS: u8 = 1;
/// After: the device wrote the old frames, the checksum is taken from the new ones.
const AFTER_THE_DEVICE_READ: u8 = 2;
/// A sink with a queue (io_uring): `start_in_place` only submits, and the link runs before the
/// device gets to the bytes, in `wait_in_place`. So the ring's own check at the end of the read
/// passes, and only the check after the write can tell.
const WHILE_QUEUED: u8 = 3;

/// A block sink through which the link gets to run in the middle of a payload write.
struct LinkRunsDuringWrites {
    inner: SimSink,
    producer: Arc<Mutex<Producer>>,
    when: Arc<AtomicU8>,
    /// Payload writes submitted and not yet carried out (`WHILE_QUEUED`).
    queued: Vec<(u64, Vec<u8>)>,
}

impl LinkRunsDuringWrites {
    fn overwrite_ring_if(&self, now: u8) {
        if self.when.load(Ordering::SeqCst) == now {
            self.when.store(NEVER, Ordering::SeqCst);
            push(&mut self.producer.lock().unwrap(), RING_FRAMES);
        }
    }
}

impl Sink for LinkRunsDuringWrites {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> snbuf_persist::error::Result<()> {
        // Payload writes are the ones of whole frames; header blocks are one sector.
        let payload = data.len() >= FRAME;
        if payload {
            self.overwrite_ring_if(BEFORE_THE_DEVICE_READS);
        }
        let r = self.inner.write_at(offset, data);
        if payload {
            self.overwrite_ring_if(AFTER_THE_DEVICE_READ);
        }
        r
    }
    fn start_in_place(
        &mut self,
        offset: u64,
        parts: &[&[u8]],
        _held: &Hold,
    ) -> snbuf_persist::error::Result<()> {
        if self.when.load(Ordering::SeqCst) != WHILE_QUEUED {
            return self.write_in_place(offset, parts);
        }
        self.queued.push((offset, parts.concat()));
        Ok(())
    }
    fn wait_in_place(&mut self) -> snbuf_persist::error::Result<()> {
        if !self.queued.is_empty() {
            self.overwrite_ring_if(WHILE_QUEUED);
        }
        for (offset, bytes) in std::mem::take(&mut self.queued) {
            self.inner.write_at(offset, &bytes)?;
        }
        Ok(())
    }
    fn persist(&mut self) -> snbuf_persist::error::Result<()> {
        self.inner.persist()
    }
    fn read_at(&mut self, offset: u64, buf: &mut [u8]) -> snbuf_persist::error::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn report(&self) -> &SinkReport {
        self.inner.report()
    }
}

/// A ring with 8 frames, and a chunk writer on a simulated block device through which the link
/// overwrites the whole ring at `when`.
fn ring_and_writer(
    when: u8,
) -> (
    LatencyBuffer,
    ChunkWriter<LinkRunsDuringWrites>,
    Arc<Mutex<SimMedium>>,
    Arc<AtomicU8>,
) {
    let (producer, ring) = latency_buffer(layout(), RING_FRAMES, PageSize::Small4K).unwrap();
    let producer = Arc::new(Mutex::new(producer));
    push(&mut producer.lock().unwrap(), 8);
    let (sim, medium) = SimSink::new(
        SimKind::Block {
            sector_bytes: SECTOR,
        },
        1 << 20,
        vec![],
    );
    let arm = Arc::new(AtomicU8::new(when));
    let sink = LinkRunsDuringWrites {
        inner: sim,
        producer,
        when: arm.clone(),
        queued: Vec::new(),
    };
    let w = ChunkWriter::new(sink, 0, FRAME as u32, 4 * FRAME).unwrap();
    (ring, w, medium, arm)
}

#[test]
fn a_chunk_overwritten_in_the_ring_while_written_is_never_acknowledged() {
    for when in [BEFORE_THE_DEVICE_READS, AFTER_THE_DEVICE_READ] {
        let (ring, mut w, medium, arm) = ring_and_writer(when);

        // The writer's protocol (crates/unit/src/writers.rs): stage from the ring in place,
        // then learn from the ring whether the frames were overwritten meanwhile.
        let stage = |w: &mut ChunkWriter<LinkRunsDuringWrites>, first: u64| {
            ring.read_with(first, 4, |run| {
                let parts: Vec<&[u8]> = run.parts(0..run.frames()).collect();
                w.stage(&parts)
            })
        };
        let r = stage(&mut w, 0);
        assert!(
            matches!(r, Err(RingReadError::Overwritten { .. })),
            "the link ran during the write: {:?}",
            r.map(|(n, s)| (n, s.is_ok()))
        );
        assert_eq!(arm.load(Ordering::SeqCst), NEVER, "the overwrite happened");
        assert_eq!(w.pending_chunks(), 0, "nothing appended");
        // The payload's bytes are on the medium with no header: a crash now leaves no chunk.
        {
            let m = medium.lock().unwrap();
            assert!(m.live()[SECTOR as usize..].iter().any(|&b| b != 0));
            for seed in 0..64 {
                let image = m.crash(seed);
                let report = scan(&image[..], Expect::default()).unwrap();
                assert!(report.chunks.is_empty(), "seed {seed}: {:?}", report.chunks);
                assert!(
                    matches!(report.end, End::Clean { .. } | End::TornTail { .. }),
                    "seed {seed}: {:?}",
                    report.end
                );
            }
        }

        // The writer goes on from the oldest frame left; its chunk takes the same place.
        let oldest = ring.oldest();
        let (n, staged) = stage(&mut w, oldest).expect("no overwrite this time");
        assert_eq!(n, 4);
        staged.unwrap();
        let first_ts = oldest * TICKS;
        w.append_staged(first_ts, first_ts + 3 * TICKS).unwrap();
        assert_eq!(w.chunks_from_source(), 1, "written from the ring, no copy");
        assert_eq!(w.persist_appended().unwrap(), 1);

        let durable = medium.lock().unwrap().durable().to_vec();
        let report = scan(
            &durable[..],
            Expect {
                link: Some(0),
                frame_step_ticks: Some(TICKS),
                frame: Some(layout()),
            },
        )
        .unwrap();
        assert_eq!(report.chunks.len(), 1, "{:?}", report.end);
        let c = report.chunks[0];
        assert_eq!(
            (c.offset, c.sequence),
            (0, 0),
            "in the abandoned chunk's place"
        );
        assert_eq!(c.first_timestamp, first_ts);
        // Byte for byte the frames the link wrote for those sequence numbers.
        let payload = &durable[c.payload_offset as usize..][..4 * FRAME];
        for (k, f) in payload.chunks_exact(FRAME).enumerate() {
            let seq = oldest + k as u64;
            assert_eq!(&f[..8], &(seq * TICKS).to_le_bytes());
            assert!(f
                .iter()
                .enumerate()
                .skip(8)
                .all(|(i, &b)| b == (seq as usize * 131 + i) as u8));
        }
    }
}

#[test]
fn a_chunk_overwritten_after_its_read_while_its_write_is_queued_is_never_acknowledged() {
    let (ring, mut w, medium, arm) = ring_and_writer(WHILE_QUEUED);
    let held = ring.held_memory();

    // The one-writer-many-links protocol (crates/unit/src/writers.rs): start the write from the
    // ring, wait for it, then ask the ring whether the frames outlived the write.
    let (n, started) = ring
        .read_with(0, 4, |run| {
            let parts: Vec<&[u8]> = run.parts(0..run.frames()).collect();
            w.start_stage(&parts, None, &held)
        })
        .expect("the link has not run yet when the read ends");
    assert_eq!(n, 4);
    started.unwrap();
    let refused = w.append_staged(0, 3 * TICKS);
    assert!(
        matches!(refused, Err(WriteError::BadChunk { .. })),
        "appended before its write was waited for: {refused:?}"
    );
    // `append_staged` consumed the staging; stage again, as the writer would never do, to get
    // back to the protocol's state.
    ring.read_with(0, 4, |run| {
        let parts: Vec<&[u8]> = run.parts(0..run.frames()).collect();
        w.start_stage(&parts, None, &held)
    })
    .unwrap()
    .1
    .unwrap();
    w.wait_staged().unwrap();
    assert_eq!(arm.load(Ordering::SeqCst), NEVER, "the overwrite happened");
    assert!(
        matches!(ring.still_holds(0), Err(RingReadError::Overwritten { .. })),
        "the link overwrote the frames while their write was queued"
    );
    assert_eq!(w.pending_chunks(), 0, "nothing appended");
    let m = medium.lock().unwrap();
    assert!(
        m.live()[SECTOR as usize..].iter().any(|&b| b != 0),
        "payload landed"
    );
    for seed in 0..64 {
        let report = scan(&m.crash(seed)[..], Expect::default()).unwrap();
        assert!(report.chunks.is_empty(), "seed {seed}: {:?}", report.chunks);
    }
}
