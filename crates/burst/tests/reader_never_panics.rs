//! Any byte string handed to the reader yields chunks or a clear end, never a panic: random
//! bytes, and valid files with random bytes overwritten or cut.

mod common;

use proptest::prelude::*;
use snbuf_burst::{scan, ChunkHeader, Expect};

fn valid_file() -> Vec<u8> {
    let dir = common::write_burst(1);
    std::fs::read(dir.path().join("link-0000.dat")).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..4096)) {
        let _ = ChunkHeader::decode(&bytes);
        let r = scan(&bytes[..], Expect { link: Some(0), frame_step_ticks: Some(300), frame: None }).unwrap();
        prop_assert!(r.valid_bytes <= bytes.len() as u64);
    }

    #[test]
    fn damaged_valid_files(edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
                           cut in any::<prop::sample::Index>()) {
        let mut bytes = valid_file();
        for (at, v) in edits {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        let keep = cut.index(bytes.len() + 1);
        bytes.truncate(keep);
        let r = scan(&bytes[..], Expect { link: Some(0), frame_step_ticks: Some(300), frame: None }).unwrap();
        prop_assert!(r.valid_bytes <= bytes.len() as u64);
        // Whatever it calls valid really checks out.
        for c in &r.chunks {
            let h = ChunkHeader::decode(&bytes[c.offset as usize..]).unwrap();
            let start = (c.offset + h.payload_offset()) as usize;
            let p = &bytes[start..start + h.payload_bytes as usize];
            prop_assert_eq!(crc32c::crc32c(p), h.payload_crc32c);
        }
    }
}
