//! The codec on the emulator's frames of every DUNE type (the detector's own layouts, with
//! ProtoDUNE-HD's noise): every chunk comes back bit for bit, WIBEth in under half its bytes;
//! a custom type is stored raw; a corrupt or cut coded chunk is an error, never other
//! frames.

use snbuf_frames::FrameType;
use snbuf_readout::framegen::{FrameGen, Payload};

/// `frames` of link 3's emulated stream of `t`, back to back, then `tail` odd bytes.
fn stream(t: FrameType, frames: u64, tail: usize) -> Vec<u8> {
    let mut g = FrameGen::new(t, 3, &Payload::Emulated).unwrap();
    let step = t.ticks_per_frame();
    let mut raw = Vec::new();
    for k in 0..frames {
        raw.extend_from_slice(g.frame_at(1_000_000 * step + k * step));
    }
    raw.extend((0..tail).map(|i| i as u8 ^ 0x5a));
    raw
}

const TYPES: [FrameType; 5] = [
    FrameType::WibEth,
    FrameType::TdeEth,
    FrameType::Wib2,
    FrameType::ProtoDuneWib,
    FrameType::DaphneEthStream,
];

#[test]
fn every_frame_type_comes_back_bit_for_bit() {
    for t in TYPES {
        for tail in [0, 13] {
            let raw = stream(t, 120, tail);
            let coded = snbuf_codec::encode(t, &raw);
            let (back_type, back) = snbuf_codec::decode(&coded).unwrap();
            assert_eq!(back_type, t);
            assert!(back == raw, "{t}: the decoded bytes differ");
            // The fastest kernel here codes the portable one's bytes, and each decodes them.
            let portable = snbuf_codec::InstructionSet::Portable;
            assert!(
                snbuf_codec::encode_with(portable, t, &raw) == coded,
                "{t}: the kernels' chunks differ"
            );
            let (_, back) = snbuf_codec::decode_with(portable, &coded).unwrap();
            assert!(back == raw, "{t}: the portable decode differs");
            let ratio = coded.len() as f64 / raw.len() as f64;
            eprintln!("{t}: {:.3} of the raw bytes", ratio);
            assert!(ratio < 0.6, "{t}: {ratio}");
        }
    }
}

/// The emulator's noise is the detector's: shaped by the front end, its first differences ~4.4
/// bits a sample of the 14 stored, on a Rice code's ~0.15 bits of overhead. A third of the bytes
/// is what the codec must keep (issue 52 asks at most 40 %), on noise every frame its own.
#[test]
fn wibeth_at_protodune_noise_takes_a_third_of_its_bytes() {
    let t = FrameType::WibEth;
    let mut g = FrameGen::new(t, 3, &Payload::Emulated)
        .unwrap()
        .unrepeated();
    let raw: Vec<u8> = (0..400u64)
        .flat_map(|k| g.frame_at((1_000_000 + k) * t.ticks_per_frame()).to_vec())
        .collect();
    let coded = snbuf_codec::encode(t, &raw);
    let ratio = coded.len() as f64 / raw.len() as f64;
    assert!(ratio < 0.35, "{ratio}");
    assert_eq!(snbuf_codec::decode(&coded).unwrap().1, raw);
}

#[test]
fn a_custom_type_and_an_empty_chunk_are_stored_as_they_are() {
    let t: FrameType = "custom:1000:100".parse().unwrap();
    let raw: Vec<u8> = (0..10_500u32).map(|i| (i * 31 % 251) as u8).collect();
    let coded = snbuf_codec::encode(t, &raw);
    assert!(coded.len() >= raw.len(), "nothing to model");
    assert_eq!(snbuf_codec::decode(&coded).unwrap(), (t, raw));
    let empty = snbuf_codec::encode(FrameType::WibEth, &[]);
    assert_eq!(
        snbuf_codec::decode(&empty).unwrap(),
        (FrameType::WibEth, vec![])
    );
}

#[test]
fn a_frame_whose_header_is_corrupt_is_kept_as_it_came() {
    let mut raw = stream(FrameType::WibEth, 20, 0);
    raw[7200 * 5..7200 * 5 + 32].fill(0xee);
    let coded = snbuf_codec::encode(FrameType::WibEth, &raw);
    assert_eq!(snbuf_codec::decode(&coded).unwrap().1, raw);
}

#[test]
fn noise_no_model_can_shrink_is_stored_raw_and_comes_back() {
    // Every ADC bit random: the model would grow it, so each frame goes raw.
    let mut raw = stream(FrameType::WibEth, 10, 0);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in raw.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let coded = snbuf_codec::encode(FrameType::WibEth, &raw);
    assert!(
        coded.len() < raw.len() + 100,
        "{} for {}",
        coded.len(),
        raw.len()
    );
    assert_eq!(snbuf_codec::decode(&coded).unwrap().1, raw);
}

#[test]
fn a_corrupt_or_cut_chunk_is_an_error_never_other_frames() {
    let raw = stream(FrameType::WibEth, 3, 5);
    let coded = snbuf_codec::encode(FrameType::WibEth, &raw);
    for cut in 0..coded.len() {
        assert!(
            snbuf_codec::decode(&coded[..cut]).is_err(),
            "cut at {cut} of {}",
            coded.len()
        );
    }
    let mut extra = coded.clone();
    extra.push(0);
    assert!(snbuf_codec::decode(&extra).is_err(), "a byte too many");
    for at in (0..coded.len()).step_by(7) {
        for bit in [0x01u8, 0x10, 0x80] {
            let mut bad = coded.clone();
            bad[at] ^= bit;
            match snbuf_codec::decode(&bad) {
                Err(_) => {}
                Ok((_, back)) => assert_eq!(back, raw, "byte {at} bit {bit:#x}: other frames"),
            }
        }
    }
}

/// The fuzzer's seeds (`fuzz/seeds/codec_decode/`) are chunks this codec writes today: each
/// decodes to the frames it was made from. `SNBUF_WRITE_SEEDS=1` writes them anew (after a
/// change of format).
#[test]
fn the_fuzzers_seeds_are_chunks_of_todays_format() {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/codec_decode");
    let custom: FrameType = "custom:64:25".parse().unwrap();
    let seeds = [
        ("wibeth-3", FrameType::WibEth, 3, 5),
        ("wib2-20", FrameType::Wib2, 20, 0),
        ("protodune-wib-8", FrameType::ProtoDuneWib, 8, 0),
        ("daphne-stream-4", FrameType::DaphneEthStream, 4, 0),
        ("tdeeth-2", FrameType::TdeEth, 2, 0),
        ("custom-10", custom, 10, 3),
    ];
    let write = std::env::var_os("SNBUF_WRITE_SEEDS").is_some();
    for (name, t, frames, tail) in seeds {
        let raw = stream(t, frames, tail);
        let path = dir.join(name);
        if write {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, snbuf_codec::encode(t, &raw)).unwrap();
        }
        let seed = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(seed.len() <= 65_536, "{name}: within the fuzzer's -max_len");
        let back = snbuf_codec::decode(&seed);
        assert!(
            back == Ok((t, raw)),
            "{name}: {:?} (SNBUF_WRITE_SEEDS=1 after a change of format)",
            back.err()
        );
    }
}

/// A chunk whose header claims more frames than its bytes could hold is refused at once, before
/// anything is allocated for them: of a custom type of 4 GB frames, or WIBEth frames by the
/// million in a few bytes.
#[test]
fn a_header_claiming_more_than_its_bytes_hold_is_refused_without_allocating_it() {
    for (t, frames) in [("custom:4000000000:1", 60u64), ("wibeth", 8_000_000)] {
        let t: FrameType = t.parse().unwrap();
        let mut coded = snbuf_codec::encode(t, &[]);
        // The raw length field: after magic, version, the name and the frame length.
        let at = 4 + 1 + 1 + t.name().len() + 4;
        coded[at..at + 8].copy_from_slice(&(frames * t.frame_bytes() as u64).to_le_bytes());
        coded.extend(std::iter::repeat_n(1u8, 300));
        assert!(
            matches!(
                snbuf_codec::decode(&coded),
                Err(snbuf_codec::DecodeError::Truncated { .. })
            ),
            "{t}"
        );
    }
}

/// Chunks coded in format 1 (four interleaved bit streams, written by snbuf before format 2:
/// `tests/v1/`, made from the emulator's frames then and a 4-byte tail) still decode, checked
/// against the raw bytes' CRC-32C each carries; coded again they come out in today's format.
#[test]
fn chunks_of_format_1_still_decode_to_their_frames() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/v1");
    let made = [
        (FrameType::WibEth, 6u64),
        (FrameType::TdeEth, 3),
        (FrameType::DaphneEthStream, 3),
        (FrameType::Wib2, 2),
        (FrameType::ProtoDuneWib, 2),
    ];
    for (t, frames) in made {
        let path = dir.join(format!("{}.snbc", t.name()));
        let coded = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(coded[4], 1, "{t}: a chunk of format 1");
        let (got_type, raw) = snbuf_codec::decode(&coded).unwrap_or_else(|e| panic!("{t}: {e}"));
        assert_eq!(got_type, t);
        assert_eq!(raw.len() as u64, frames * t.frame_bytes() as u64 + 4, "{t}");
        assert_eq!(&raw[raw.len() - 4..], b"tail");
        let again = snbuf_codec::encode(t, &raw);
        assert_eq!(again[4], 2, "{t}: written in format 2");
        assert_eq!(snbuf_codec::decode(&again).unwrap().1, raw, "{t}");
        // A damaged one is an error, never other frames.
        let mut bad = coded.clone();
        let at = bad.len() / 2;
        bad[at] ^= 0x10;
        if let Ok((_, back)) = snbuf_codec::decode(&bad) {
            assert_eq!(back, raw, "{t}");
        }
    }
}
