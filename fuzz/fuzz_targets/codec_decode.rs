//! The codec's decoder on any bytes: it must never panic, and whatever it decodes must be what
//! was coded: a chunk it accepts re-encodes to a chunk that decodes to the same frames, whose
//! CRC-32C is the one the chunk carries (checked inside `decode`). Seeds: coded WIBEth, WIB2 and
//! custom chunks (`fuzz/seeds/codec_decode/`), which the fuzzer cuts and flips.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|bytes: &[u8]| {
    if let Ok((frame_type, raw)) = snbuf_codec::decode(bytes) {
        let again = snbuf_codec::encode(frame_type, &raw);
        let (t, back) = snbuf_codec::decode(&again).expect("a chunk the codec wrote decodes");
        assert_eq!(t, frame_type);
        assert!(back == raw, "re-encoded frames come back as they were");
    }
});
