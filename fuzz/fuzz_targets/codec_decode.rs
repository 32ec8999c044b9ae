//! The codec's decoder on any bytes: it must never panic, its kernels must agree (the vector one
//! this CPU runs and the portable one: the same frames, or both an error), and whatever it
//! decodes must be what was coded: a chunk it accepts re-encodes, by either kernel, to the same
//! chunk, which decodes to the same frames, whose CRC-32C is the one the chunk carries (checked
//! inside `decode`). Seeds: coded chunks of every frame type, of today's format and of format 1,
//! and a custom type's (`fuzz/seeds/codec_decode/`), which the fuzzer cuts and flips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use snbuf_codec::InstructionSet;

fuzz_target!(|bytes: &[u8]| {
    let decoded = snbuf_codec::decode_with(InstructionSet::detect(), bytes);
    let portable = snbuf_codec::decode_with(InstructionSet::Portable, bytes);
    assert_eq!(decoded.is_ok(), portable.is_ok(), "the kernels agree");
    if let (Ok((frame_type, raw)), Ok(same)) = (decoded, portable) {
        assert!(
            same == (frame_type, raw.clone()),
            "the kernels decode the same frames"
        );
        let again = snbuf_codec::encode_with(InstructionSet::detect(), frame_type, &raw);
        let portable = snbuf_codec::encode_with(InstructionSet::Portable, frame_type, &raw);
        assert!(again == portable, "the kernels code the same bytes");
        let (t, back) = snbuf_codec::decode(&again).expect("a chunk the codec wrote decodes");
        assert_eq!(t, frame_type);
        assert!(back == raw, "re-encoded frames come back as they were");
    }
});
