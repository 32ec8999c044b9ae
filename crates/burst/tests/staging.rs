//! Staging a chunk's payload (copy now, decide later) on a block method and a mapped one: a
//! discarded stage never becomes data, an appended one reads back exactly.

use snbuf_burst::scan::{scan, End, Expect};
use snbuf_burst::ChunkWriter;
use snbuf_persist::{open, Method, SinkConfig};

const FRAME: u32 = 64;

fn frames(tag: u8, n: usize) -> Vec<u8> {
    (0..FRAME as usize * n)
        .map(|i| tag.wrapping_mul(31) ^ i as u8)
        .collect()
}

fn staged_chunks_read_back(method: Method) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("link-0000.dat");
    let mut config = SinkConfig::new(method, &path, 1 << 20);
    config.max_io_bytes = 64 << 10;
    let sink = open(&config).unwrap();
    let mut w = ChunkWriter::new(sink, 0, FRAME, FRAME as usize * 8).unwrap();

    // Chunk 0 from two parts (as a ring that wraps lends them).
    let a = frames(1, 5);
    w.stage(&[&a[..3 * FRAME as usize], &a[3 * FRAME as usize..]])
        .unwrap();
    w.append_staged(100, 104).unwrap();
    // A stage that is thrown away (its source turned out overwritten), then chunk 1.
    w.stage(&[&frames(9, 8)]).unwrap();
    let b = frames(2, 2);
    w.stage(&[&b]).unwrap();
    w.append_staged(105, 106).unwrap();
    // Appending needs something staged, and each stage is appended at most once.
    assert!(w.append_staged(107, 107).is_err());
    // Partial frames are refused before anything is written.
    assert!(w.stage(&[&[0u8; 10]]).is_err());
    w.persist_appended().unwrap();
    let totals = w.totals();
    assert_eq!((totals.chunks, totals.frames), (2, 7));
    drop(w);

    let data = std::fs::read(&path).unwrap();
    let data = &data[..totals.file_bytes as usize];
    let report = scan(
        data,
        Expect {
            link: Some(0),
            frame_step_ticks: Some(1),
            frame: None,
        },
    )
    .unwrap();
    assert_eq!(report.end, End::Clean { zero_tail_bytes: 0 });
    assert_eq!(report.chunks.len(), 2);
    let c1 = report.chunks[1];
    assert_eq!((c1.first_timestamp, c1.frame_count), (105, 2));
    let start = (c1.offset + c1.payload_offset) as usize;
    assert_eq!(
        &data[start..start + b.len()],
        &b[..],
        "the appended stage, not the discarded one"
    );
    let c0 = report.chunks[0];
    let start = (c0.offset + c0.payload_offset) as usize;
    assert_eq!(&data[start..start + a.len()], &a[..]);
}

#[test]
fn staged_chunks_read_back_on_direct() {
    staged_chunks_read_back(Method::Direct);
}

#[test]
fn staged_chunks_read_back_on_a_mapping() {
    // Mapped methods need only a file (msync runs anywhere; nt where the CPU can).
    staged_chunks_read_back(Method::Msync);
    let cpu = snbuf_platform::cpu::CpuFeatures::detect();
    if cpu.simd_path().is_some() && cpu.best_flush().is_some() {
        staged_chunks_read_back(Method::Nt);
    } else {
        eprintln!("skipped nt: this CPU has no streaming stores or cache-line write-back");
    }
}
