//! A first look at the codec's speed and ratio on one core, on the emulator's WIBEth frames
//! (ProtoDUNE-HD's noise, every frame its own): `cargo run --release -p snbuf-codec --example speed`
//! (`SNBUF_CODEC_KERNEL=portable` for the portable kernel). Not the kept benchmark: that is
//! `snbuf bench codec` (bench/codec.sh).

use std::time::Instant;

use snbuf_frames::FrameType;
use snbuf_readout::framegen::{FrameGen, Payload};

fn main() {
    let t = FrameType::WibEth;
    let mut g = FrameGen::new(t, 3, &Payload::Emulated)
        .expect("an emulated link")
        .unrepeated();
    let step = t.ticks_per_frame();
    let mut raw = Vec::new();
    for k in 0..4096u64 {
        raw.extend_from_slice(g.frame_at(1_000_000 * step + k * step));
    }
    // The same bytes for the general-purpose compressors beside it (bench/codec_first_look.sh).
    if let Some(path) = std::env::var_os("SNBUF_CODEC_RAW") {
        std::fs::write(path, &raw).expect("the raw frames are written");
    }
    let gib = raw.len() as f64 / (1u64 << 30) as f64;
    let rounds = 8;
    let start = Instant::now();
    let mut coded = Vec::new();
    for _ in 0..rounds {
        coded = snbuf_codec::encode(t, &raw);
    }
    let encode_s = start.elapsed().as_secs_f64() / rounds as f64;
    let start = Instant::now();
    for _ in 0..rounds {
        let (_, back) = snbuf_codec::decode(&coded).expect("decodes");
        assert_eq!(back.len(), raw.len());
    }
    let decode_s = start.elapsed().as_secs_f64() / rounds as f64;
    let ratio = coded.len() as f64 / raw.len() as f64;
    println!(
        "{t}: {:.1} MiB, coded {ratio:.3} of it; encode {:.2} GiB/s, decode {:.2} GiB/s (one core)",
        raw.len() as f64 / (1u64 << 20) as f64,
        gib / encode_s,
        gib / decode_s
    );
    // For bench/keep.py: one JSON line, appended to the file named.
    if let Some(path) = std::env::var_os("SNBUF_CODEC_RESULT") {
        use std::io::Write;
        let line = format!(
            "{{\"frame_type\":\"{t}\",\"raw_bytes\":{},\"coded_bytes\":{},\"ratio\":{ratio},\"encode_gib_s\":{},\"decode_gib_s\":{},\"rounds\":{rounds}}}\n",
            raw.len(),
            coded.len(),
            gib / encode_s,
            gib / decode_s
        );
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("the result file opens");
        f.write_all(line.as_bytes())
            .expect("the result line is written");
    }
}
