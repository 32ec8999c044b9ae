//! The chunk reader on any bytes: a header decode and a scan of the bytes as a link file. It
//! must never panic, and whatever it calls a valid chunk must really check out (its header
//! decodes and its payload's CRC-32C matches).
#![no_main]

use libfuzzer_sys::fuzz_target;
use snbuf_burst::chunk::crc32c;
use snbuf_burst::{scan, ChunkHeader, Expect};

fuzz_target!(|bytes: &[u8]| {
    let _ = ChunkHeader::decode(bytes);
    // The seeds are frames of 25 ticks (`custom:64:25`): timestamps are checked too.
    let r = scan(
        bytes,
        Expect {
            link: Some(0),
            frame_step_ticks: Some(25),
            frame: None,
        },
    )
    .expect("reading from memory cannot fail");
    assert!(r.valid_bytes <= bytes.len() as u64);
    for c in &r.chunks {
        let at = c.offset as usize;
        let h = ChunkHeader::decode(&bytes[at..]).expect("a chunk called valid decodes");
        let start = at + h.payload_offset() as usize;
        let payload = &bytes[start..start + h.payload_bytes as usize];
        assert_eq!(
            crc32c(payload),
            h.payload_crc32c,
            "a chunk called valid checks out"
        );
    }
});
