//! The latency buffer on its own: frames read back until overwritten, lent in place across
//! the ring's wrap, staged frames hidden until published, timestamps found in O(1) and with gaps.

mod common;

use common::{layout, sequence_of, stamp, timestamp_of};
use snbuf_platform::PageSize;
use snbuf_readout::{latency_buffer, Lookup, Producer, RingReadError};
fn push_n(p: &mut Producer, n: u64, ticks_per_frame: u64, skip_every: u64) {
    let mut ts = 1000 + p.buffer().written() * ticks_per_frame;
    for _ in 0..n {
        if skip_every > 0 && p.buffer().written() % skip_every == skip_every - 1 {
            ts += 5 * ticks_per_frame; // a gap in the data
        }
        p.push(|seq, f| stamp(f, ts, seq));
        ts += ticks_per_frame;
    }
}

#[test]
fn frames_read_back_until_overwritten() {
    let (mut p, b) = latency_buffer(layout(64, 10), 8, PageSize::Small4K).unwrap();
    let mut out = vec![0u8; 64 * 3];
    assert_eq!(b.read(0, &mut out), Err(RingReadError::NotYet));
    push_n(&mut p, 5, 10, 0);
    assert_eq!(b.read(1, &mut out), Ok(3));
    assert_eq!(sequence_of(&out[64..]), 2);
    assert_eq!(b.read(4, &mut out), Ok(1), "only what is written");
    push_n(&mut p, 10, 10, 0);
    assert_eq!(b.oldest(), 15 - 8);
    assert_eq!(
        b.read(2, &mut out),
        Err(RingReadError::Overwritten { oldest: 7 })
    );
    assert_eq!(b.read(7, &mut out), Ok(3));
    assert_eq!(b.memory_bytes(), 512);
}

#[test]
fn frames_are_lent_in_place_across_the_wrap_and_staged_frames_stay_hidden() {
    let (mut p, b) = latency_buffer(layout(32, 10), 8, PageSize::Small4K).unwrap();
    push_n(&mut p, 11, 10, 0);
    // Frames 3..11 are buffered; 6..11 wrap: slots 6, 7 then 0, 1, 2.
    let (n, seqs) = b
        .read_with(6, 100, |run| {
            let parts: Vec<usize> = run.parts(0..run.frames()).map(|p| p.len()).collect();
            assert_eq!(parts, vec![64, 96], "two contiguous parts at the wrap");
            assert_eq!(
                run.parts(2..4).map(|p| p.len()).collect::<Vec<_>>(),
                vec![64]
            );
            (0..run.frames())
                .map(|i| sequence_of(run.frame(i)))
                .collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(n, 5);
    assert_eq!(seqs, vec![6, 7, 8, 9, 10]);
    // Overwritten while lent: the result is refused after the fact.
    let r = b.read_with(3, 2, |_| push_n(&mut p, 4, 10, 0));
    assert_eq!(
        r.map(|(n, _)| n),
        Err(RingReadError::Overwritten { oldest: 7 })
    );
    // Staged frames are not readable until published.
    p.stage(|seq, f| stamp(f, 0, seq));
    assert_eq!(b.written(), 15);
    assert_eq!(
        b.read_with(15, 1, |_| ()).map(|(n, _)| n),
        Err(RingReadError::NotYet)
    );
    p.publish();
    assert_eq!(b.read_with(15, 1, |r| sequence_of(r.frame(0))), Ok((1, 15)));
}

#[test]
fn timestamps_are_found_in_o1_and_with_gaps() {
    let (mut p, b) = latency_buffer(layout(32, 300), 100, PageSize::Small4K).unwrap();
    push_n(&mut p, 250, 300, 0);
    // Frames 150..250 are buffered, timestamps 1000 + seq*300.
    assert_eq!(b.find_timestamp(1000 + 200 * 300), Lookup::At(200));
    assert_eq!(
        b.find_timestamp(1000 + 200 * 300 - 7),
        Lookup::At(200),
        "rounds up to the next frame"
    );
    assert_eq!(b.find_timestamp(1000), Lookup::BeforeOldest { oldest: 150 });
    assert_eq!(
        b.find_timestamp(1000 + 400 * 300),
        Lookup::After { next: 250 }
    );

    let (mut p, b) = latency_buffer(layout(32, 300), 100, PageSize::Small4K).unwrap();
    push_n(&mut p, 100, 300, 10); // a 5-frame gap every 10 frames defeats the O(1) guess
    for seq in 1..100u64 {
        let mut f = vec![0u8; 32];
        b.read(seq, &mut f).unwrap();
        let t = timestamp_of(&f);
        assert_eq!(b.find_timestamp(t), Lookup::At(seq));
        assert_eq!(b.find_timestamp(t - 1), Lookup::At(seq));
    }
}
