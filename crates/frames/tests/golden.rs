//! Golden frames written by hand from DUNE's definitions (fddetdataformats, detdataformats), not
//! by snbuf's encoder: every offset and bit field a layout reads is pinned here. Each header is
//! spelled out as bytes, with the arithmetic in the comment beside it.

use snbuf_frames::{FrameType, Identity, SEQUENCE_MODULUS};

/// DAQEthHeader word 0 for version 1, det_id 3 (kHD_TPC), crate 5, slot 2, stream 7,
/// seq_id 0xABC, block_length 0x123:
///   1 | 3<<6 | 5<<12 | 2<<22 | 7<<26 | 0xABC<<40 | 0x123<<52 = 0x123A_BC00_1C80_50C1.
const DAQ_ETH_WORD0: [u8; 8] = [0xC1, 0x50, 0x80, 0x1C, 0x00, 0xBC, 0x3A, 0x12];
/// 0x0123_4567_89AB_CDEF little-endian.
const TS: [u8; 8] = [0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01];
const TS_VALUE: u64 = 0x0123_4567_89AB_CDEF;

fn daq_eth_frame(bytes: usize) -> Vec<u8> {
    let mut f = vec![0x5Au8; bytes];
    f[0..8].copy_from_slice(&DAQ_ETH_WORD0);
    f[8..16].copy_from_slice(&TS);
    f
}

#[test]
fn daq_eth_frames_read_their_header_where_dune_puts_it() {
    for (t, bytes, ticks) in [
        (FrameType::WibEth, 7200, 2048),
        (FrameType::TdeEth, 7200, 2000),
        (FrameType::DaphneEthStream, 2008, 280),
    ] {
        let l = t.layout();
        assert_eq!((l.frame_bytes as usize, l.ticks_per_frame), (bytes, ticks));
        assert_eq!(l.clock_hz, 62_500_000);
        let f = daq_eth_frame(bytes);
        assert_eq!(l.timestamp(&f), TS_VALUE, "{t}");
        assert_eq!(l.sequence(&f), Some(0xABC));
        assert_eq!(
            l.identity(&f),
            Some(Identity {
                version: 1,
                det_id: 3,
                crate_id: 5,
                slot_id: 2,
                stream_id: 7,
            })
        );
        // Writing the sequence touches bits 40-51 only: 0x123 in block_length stays.
        let mut g = f.clone();
        l.write_sequence(&mut g, 4096 + 5);
        assert_eq!(l.sequence(&g), Some(5), "wraps at {SEQUENCE_MODULUS}");
        assert_eq!(
            &g[5..7],
            &[0x05, 0x30],
            "seq 5 | block_length's low nibble 3"
        );
        assert_eq!(&g[..5], &f[..5]);
        assert_eq!(&g[7..], &f[7..]);
        let mut h = f.clone();
        l.write_timestamp(&mut h, 42);
        assert_eq!(&h[8..16], &[42, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!((&h[..8], &h[16..]), (&f[..8], &f[16..]));
    }
}

#[test]
fn wib2_superchunks_keep_a_split_timestamp_in_every_frame() {
    let l = FrameType::Wib2.layout();
    assert_eq!(
        (l.frame_bytes, l.subframes, l.ticks_per_frame),
        (5664, 12, 384)
    );
    // Word 0 for version 2, detector_id 3, crate 0x155, slot 5, link 33:
    //   2 | 3<<6 | 0x155<<12 | 5<<22 | 33<<26 = 0x8555_50C2.
    let mut sc = vec![0u8; 5664];
    for k in 0..12usize {
        let f = &mut sc[k * 472..(k + 1) * 472];
        f[0..4].copy_from_slice(&[0xC2, 0x50, 0x55, 0x85]);
        // Timestamp 0x0000_0007_FFFF_FFE0 + 32 k: low u32 at 4..8, high u32 at 8..12.
        let ts = 0x0000_0007_FFFF_FFE0u64 + 32 * k as u64;
        f[4..8].copy_from_slice(&(ts as u32).to_le_bytes());
        f[8..12].copy_from_slice(&((ts >> 32) as u32).to_le_bytes());
    }
    // By hand for frame 0: low 0xFFFFFFE0 = E0 FF FF FF, high 7 = 07 00 00 00.
    assert_eq!(&sc[4..12], &[0xE0, 0xFF, 0xFF, 0xFF, 0x07, 0, 0, 0]);
    assert_eq!(l.checked_timestamp(&sc), Ok(0x7_FFFF_FFE0));
    // Frame 1 crosses into the high word: 0x8_0000_0000.
    assert_eq!(l.subframe_timestamps(&sc).nth(1), Some(0x8_0000_0000));
    assert_eq!(
        l.identity(&sc),
        Some(Identity {
            version: 2,
            det_id: 3,
            crate_id: 0x155,
            slot_id: 5,
            stream_id: 33,
        })
    );
    assert_eq!(l.sequence(&sc), None);
    // A superchunk whose frames do not follow each other is caught.
    let mut bad = sc.clone();
    bad[3 * 472 + 4] ^= 1;
    assert_eq!(l.checked_timestamp(&bad).unwrap_err().subframe, 3);
    // Rewriting the timestamp writes all twelve and nothing else.
    let mut r = sc.clone();
    l.write_timestamp(&mut r, 1000);
    assert_eq!(l.checked_timestamp(&r), Ok(1000));
    for k in 0..12 {
        assert_eq!(&r[k * 472..k * 472 + 4], &sc[k * 472..k * 472 + 4]);
        assert_eq!(
            &r[k * 472 + 12..(k + 1) * 472],
            &sc[k * 472 + 12..(k + 1) * 472]
        );
    }
}

#[test]
fn protodune_wib_timestamps_honour_the_z_bit() {
    let l = FrameType::ProtoDuneWib.layout();
    assert_eq!(
        (l.frame_bytes, l.subframes, l.ticks_per_frame),
        (5568, 12, 300)
    );
    assert_eq!(l.clock_hz, 50_000_000);
    // Word 0: sof 0x3C, version 3, fiber 5, crate 17, slot 6:
    //   0x3C | 3<<8 | 5<<13 | 17<<16 | 6<<21 = 0x00D1_A33C.
    let mut sc = vec![0u8; 5568];
    for k in 0..12usize {
        let f = &mut sc[k * 464..(k + 1) * 464];
        f[0..4].copy_from_slice(&[0x3C, 0xA3, 0xD1, 0x00]);
        // z = 0: a 63-bit timestamp in bytes 8..16.
        f[8..16].copy_from_slice(&(0x0022_3344_5566_7788u64 + 25 * k as u64).to_le_bytes());
    }
    assert_eq!(l.checked_timestamp(&sc), Ok(0x0022_3344_5566_7788));
    assert_eq!(
        l.identity(&sc),
        Some(Identity {
            version: 3,
            det_id: 0,
            crate_id: 17,
            slot_id: 6,
            stream_id: 5,
        })
    );
    // z = 1 (bit 63): the low 48 bits are the timestamp, bits 48-62 a WIB counter. Bytes
    // 8..16 = 0x8ABC_1122_3344_5566: z set, counter 0x0ABC, timestamp 0x1122_3344_5566.
    let mut z = sc[..464].to_vec();
    z[8..16].copy_from_slice(&[0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xBC, 0x8A]);
    assert_eq!(l.subframe_timestamp(&z), 0x1122_3344_5566);
    // Writing a timestamp under z = 1 keeps the counter and the flag.
    let mut w = z.clone();
    l.write_timestamp(&mut w, 0x0000_AAAA_BBBB_CCCC);
    assert_eq!(&w[8..16], &[0xCC, 0xCC, 0xBB, 0xBB, 0xAA, 0xAA, 0xBC, 0x8A]);
}

#[test]
fn custom_frames_keep_their_timestamp_where_told() {
    let t: FrameType = "custom:64:10:16".parse().unwrap();
    let l = t.layout();
    let mut f = vec![0u8; 64];
    f[16..24].copy_from_slice(&TS);
    assert_eq!(l.timestamp(&f), TS_VALUE);
    assert_eq!((l.sequence(&f), l.identity(&f)), (None, None));
    let d: FrameType = "custom:64:10".parse().unwrap();
    f[0..8].copy_from_slice(&TS);
    assert_eq!(d.layout().timestamp(&f), TS_VALUE, "offset 0 unless given");
    assert_eq!(l.rewritten_bytes(), vec![16..24]);
}
