//! Pins the on-disk layout of docs/FORMAT.md, both chunk versions. If this test fails, the bytes
//! snbuf writes have changed: bump FORMAT_VERSION and update docs/FORMAT.md, never just the
//! expected bytes. Version 1 is no longer written but must still be read.

use snbuf_burst::chunk::{stride_for, ChunkHeader, FORMAT_VERSION};
use snbuf_burst::{scan, ChunkWriter, Expect};
use snbuf_persist::sim::{SimKind, SimSink};

/// magic `SNBUFCHK`, version 2, header block 512 | link 3 | sequence 42 | first ts 10000 |
/// last ts 11052 | 3 frames | 5568 B each | payload 16704 B | payload crc | stride 17408 |
/// header crc.
const EXPECTED_V2_HEADER_HEX: &str = "534e42554643484b0200000203000000\
2a000000000000001027000000000000\
2c2b00000000000003000000c0150000\
40410000__PAYLOAD_CRC__00440000__HEADER_CRC__";

/// The same chunk as version 1 wrote it: header block 64 (the payload right behind the header),
/// stride 16896.
const EXPECTED_V1_HEADER_HEX: &str = "534e42554643484b0100400003000000\
2a000000000000001027000000000000\
2c2b00000000000003000000c0150000\
40410000__PAYLOAD_CRC__00420000__HEADER_CRC__";

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn payload() -> Vec<u8> {
    (0..3 * 5568u32).map(|i| (i % 251) as u8).collect()
}

/// The expected header bytes with both checksums filled in by an independent CRC-32C.
fn expected(template: &str, payload: &[u8]) -> Vec<u8> {
    let partial = template
        .replace(
            "__PAYLOAD_CRC__",
            &hex(&crc32c::crc32c(payload).to_le_bytes()),
        )
        .replace("__HEADER_CRC__", "");
    let mut bytes = unhex(&partial);
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn the_version_2_chunk_header_layout_is_pinned() {
    assert_eq!(FORMAT_VERSION, 2);
    let payload = payload();
    let h = ChunkHeader {
        version: 2,
        header_bytes: 512,
        link: 3,
        sequence: 42,
        first_timestamp: 10_000,
        last_timestamp: 11_052,
        frame_count: 3,
        frame_bytes: 5568,
        payload_bytes: 16_704,
        payload_crc32c: crc32c::crc32c(&payload),
        stride_bytes: stride_for(512, 16_704, 512) as u32,
    };
    assert_eq!(h.stride_bytes, 17_408);
    assert_eq!(
        hex(&h.encode()),
        hex(&expected(EXPECTED_V2_HEADER_HEX, &payload))
    );
    // The checksums themselves, pinned: CRC-32C (Castagnoli), not CRC-32 (IEEE).
    assert_eq!(crc32c::crc32c(b"123456789"), 0xE306_9283);
}

#[test]
fn a_version_1_chunk_header_still_decodes() {
    let payload = payload();
    let bytes = expected(EXPECTED_V1_HEADER_HEX, &payload);
    let h = ChunkHeader::decode(&bytes).expect("version 1 is read");
    assert_eq!((h.version, h.header_bytes, h.payload_offset()), (1, 64, 64));
    assert_eq!((h.link, h.sequence, h.frame_count), (3, 42, 3));
    assert_eq!((h.payload_bytes, h.stride_bytes), (16_704, 16_896));
    assert_eq!(
        h.encode().to_vec(),
        bytes,
        "and re-encodes to the same bytes"
    );
}

#[test]
fn a_version_1_file_scans_with_its_payloads_right_behind_the_headers() {
    // Two chunks as version 1 laid them out, written here by hand.
    let payload = payload();
    let mut file = Vec::new();
    for seq in 0..2u64 {
        let mut h = ChunkHeader::decode(&expected(EXPECTED_V1_HEADER_HEX, &payload)).unwrap();
        h.sequence = seq;
        h.first_timestamp = 10_000 + seq * 1_500;
        h.last_timestamp = h.first_timestamp + 1_052;
        let start = file.len();
        file.extend_from_slice(&h.encode());
        file.extend_from_slice(&payload);
        file.resize(start + h.stride_bytes as usize, 0);
    }
    let r = scan(&file[..], Expect::default()).unwrap();
    assert!(r.is_clean(), "{:?}", r.end);
    assert_eq!(r.chunks.len(), 2);
    assert!(r.chunks.iter().all(|c| c.payload_offset == 64));
    assert_eq!(r.chunks[1].offset, 16_896);
}

#[test]
fn a_block_writer_lays_chunks_out_as_documented() {
    let (sink, medium) = SimSink::new(SimKind::Block { sector_bytes: 512 }, 64 << 10, vec![]);
    let mut w = ChunkWriter::new(sink, 7, 100, 1000).unwrap();
    let a = w.write_chunk(500, 700, &[0xAB; 300]).unwrap();
    let b = w.write_chunk(725, 725, &[0xCD; 100]).unwrap();
    assert_eq!(
        (a.offset, a.stride_bytes),
        (0, 1024),
        "a 512 B header block, then 300 B rounded up to one 512 B sector"
    );
    assert_eq!((b.offset, b.stride_bytes), (1024, 1024));
    let image = medium.lock().unwrap().durable().to_vec();
    assert_eq!(&image[..8], b"SNBUFCHK");
    assert_eq!(&image[8..10], &2u16.to_le_bytes(), "version 2");
    assert_eq!(&image[10..12], &512u16.to_le_bytes(), "header block");
    assert_eq!(&image[12..16], &7u32.to_le_bytes(), "link");
    assert_eq!(&image[16..24], &0u64.to_le_bytes(), "sequence 0");
    assert!(
        image[64..512].iter().all(|&x| x == 0),
        "zeros to the end of the header block"
    );
    assert_eq!(
        &image[512..812],
        &[0xAB; 300][..],
        "payload right after the header block"
    );
    assert!(
        image[812..1024].iter().all(|&x| x == 0),
        "zero padding to the stride"
    );
    assert_eq!(
        &image[1024 + 16..1024 + 24],
        &1u64.to_le_bytes(),
        "sequence 1"
    );
    assert!(
        image[2048..].iter().all(|&x| x == 0),
        "nothing after the last chunk"
    );
}

#[test]
fn a_memory_writer_keeps_the_header_block_at_64_bytes() {
    let (sink, medium) = SimSink::new(SimKind::Mapped, 64 << 10, vec![]);
    let mut w = ChunkWriter::new(sink, 7, 100, 1000).unwrap();
    let a = w.write_chunk(500, 700, &[0xAB; 300]).unwrap();
    assert_eq!(
        (a.offset, a.stride_bytes),
        (0, 512),
        "64 + 300 B in 256 B units"
    );
    let image = medium.lock().unwrap().durable().to_vec();
    assert_eq!(&image[8..12], &[2, 0, 64, 0], "version 2, header block 64");
    assert_eq!(&image[64..364], &[0xAB; 300][..]);
}
