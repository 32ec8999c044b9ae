//! Zero-copy writes: a chunk's payload goes to the device straight from the latency buffer, so a
//! link that overwrites those ring slots while the write is in flight would put other bytes on
//! disk than the writer meant. Forced here: the sink lets the "link" overwrite the whole ring
//! in the middle of the payload's write, before or after the device took the bytes. Such a
//! chunk is never acknowledged and never gets a header; the next chunk takes its place; a crash
//! at any point leaves no chunk that verifies with the wrong frames.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use snbuf_burst::{scan, ChunkWriter, End, Expect};
use snbuf_persist::sim::{SimKind, SimSink};
use snbuf_persist::{PageSize, Sink, SinkReport};
use snbuf_readout::{latency_buffer, FrameLayout, FrameType, Producer, ReadError};

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

/// A block sink through which the link gets to run in the middle of a payload write.
struct LinkRunsDuringWrites {
    inner: SimSink,
    producer: Arc<Mutex<Producer>>,
    when: Arc<AtomicU8>,
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

#[test]
fn a_chunk_overwritten_in_the_ring_while_written_is_never_acknowledged() {
    for when in [BEFORE_THE_DEVICE_READS, AFTER_THE_DEVICE_READ] {
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
            producer: producer.clone(),
            when: arm.clone(),
        };
        let mut w = ChunkWriter::new(sink, 0, FRAME as u32, 4 * FRAME).unwrap();

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
            matches!(r, Err(ReadError::Overwritten { .. })),
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
                ticks_per_frame: Some(TICKS),
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
