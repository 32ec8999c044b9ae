//! Pins the on-disk layout of docs/FORMAT.md. If this test fails, the bytes snbuf writes have
//! changed: bump FORMAT_VERSION and update docs/FORMAT.md, never just the expected bytes.

use snbuf_burst::chunk::{stride_for, ChunkHeader, FORMAT_VERSION};
use snbuf_burst::ChunkWriter;
use snbuf_persist::sim::{SimKind, SimSink};

/// magic `SNBUFCHK`, version 1, header 64, link 3 | sequence 42, first ts 10000 |
/// last ts 11052, 3 frames, 5568 B each | payload 16704 B, payload crc, stride 16896, header crc.
const EXPECTED_HEADER_HEX: &str = "534e42554643484b0100400003000000\
2a000000000000001027000000000000\
2c2b00000000000003000000c0150000\
40410000__PAYLOAD_CRC__00420000__HEADER_CRC__";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn the_chunk_header_layout_is_pinned() {
    assert_eq!(FORMAT_VERSION, 1);
    let payload: Vec<u8> = (0..3 * 5568u32).map(|i| (i % 251) as u8).collect();
    let h = ChunkHeader {
        link: 3,
        sequence: 42,
        first_timestamp: 10_000,
        last_timestamp: 11_052,
        frame_count: 3,
        frame_bytes: 5568,
        payload_bytes: 16_704,
        payload_crc32c: crc32c::crc32c(&payload),
        stride_bytes: stride_for(16_704, 512) as u32,
    };
    let bytes = h.encode();
    let expected = EXPECTED_HEADER_HEX
        .replace("__PAYLOAD_CRC__", &hex(&h.payload_crc32c.to_le_bytes()))
        .replace(
            "__HEADER_CRC__",
            &hex(&crc32c::crc32c(&bytes[..60]).to_le_bytes()),
        );
    assert_eq!(hex(&bytes), expected);
    // The checksums themselves, pinned: CRC-32C (Castagnoli), not CRC-32 (IEEE).
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn a_writer_lays_chunks_out_as_documented() {
    let (sink, medium) = SimSink::new(SimKind::Block { sector_bytes: 512 }, 64 << 10, vec![]);
    let mut w = ChunkWriter::new(sink, 7, 100, 1000).unwrap();
    let a = w.write_chunk(500, 700, &[0xAB; 300]).unwrap();
    let b = w.write_chunk(725, 725, &[0xCD; 100]).unwrap();
    assert_eq!(
        (a.offset, a.stride_bytes),
        (0, 512),
        "64 + 300 B rounds up to one 512 B sector"
    );
    assert_eq!((b.offset, b.stride_bytes), (512, 512));
    let image = medium.lock().unwrap().durable().to_vec();
    assert_eq!(&image[..8], b"SNBUFCHK");
    assert_eq!(&image[12..16], &7u32.to_le_bytes(), "link");
    assert_eq!(&image[16..24], &0u64.to_le_bytes(), "sequence 0");
    assert_eq!(
        &image[64..364],
        &[0xAB; 300][..],
        "payload right after the header"
    );
    assert!(
        image[364..512].iter().all(|&x| x == 0),
        "zero padding to the stride"
    );
    assert_eq!(
        &image[512 + 16..512 + 24],
        &1u64.to_le_bytes(),
        "sequence 1"
    );
    assert!(
        image[1024..].iter().all(|&x| x == 0),
        "nothing after the last chunk"
    );
}
