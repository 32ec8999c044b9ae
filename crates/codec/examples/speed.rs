//! A first look at the codec's speed and ratio on one core, on the emulator's WIBEth frames
//! (ProtoDUNE-HD's noise): `cargo run --release -p snbuf-codec --example speed`. Not a kept
//! benchmark (that is `snbuf bench codec`, still to come).

use std::time::Instant;

use snbuf_frames::FrameType;
use snbuf_readout::framegen::{FrameGen, Payload};

fn main() {
    let t = FrameType::WibEth;
    let mut g = FrameGen::new(t, 3, &Payload::Emulated).expect("an emulated link");
    let step = t.ticks_per_frame();
    let mut raw = Vec::new();
    for k in 0..4096u64 {
        raw.extend_from_slice(g.frame_at(1_000_000 * step + k * step));
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
    println!(
        "{t}: {:.1} MiB, coded {:.3} of it; encode {:.2} GiB/s, decode {:.2} GiB/s (one core)",
        raw.len() as f64 / (1u64 << 20) as f64,
        coded.len() as f64 / raw.len() as f64,
        gib / encode_s,
        gib / decode_s
    );
}
