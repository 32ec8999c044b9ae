//! ADC samples as DUNE packs them: 14-bit values back to back, least significant bit first,
//! in little-endian words (64-bit in WIBEth and TDEEth, 32-bit in WIB2: the byte stream is the
//! same either way). A WIBEth frame holds 64 time samples of 64 channels after its 32 bytes of
//! headers, sample by sample; a DAPHNE Ethernet stream frame 280 samples of 4 channels after its
//! 48 bytes of headers, the same way (fddetdataformats `get_adc_daphnestream`: sample-major).
//! ProtoDUNE's WIB1 packs 12-bit values otherwise: four COLDATA blocks of 64 channels, each a
//! 16-byte header and eight 12-byte segments holding four channels of two ADCs each, split into
//! 8- and 4-bit pieces (detdataformats `WIBFrame.hpp`, `ColdataSegment`).
//!
//! `AdcShape` says, per frame type that carries ADC values, how many channels and time samples a
//! stored frame holds and when each sample was taken: a frame's samples are spread evenly over
//! its ticks, so a TDEEth sample is 2000 / 64 = 31.25 ticks after the one before it (not 32, as
//! in WIBEth), and the sample times are kept exact as fractions.

/// Bits per ADC value.
pub const ADC_BITS: u32 = 14;
/// WIBEth and TDEEth: where the ADC words start, and their shape.
pub const ETH_ADC_OFFSET: usize = 32;
pub const ETH_SAMPLES: usize = 64;
pub const ETH_CHANNELS: usize = 64;
/// WIB2: each 472-byte frame holds one time sample of 256 channels after a 20-byte header.
pub const WIB2_ADC_OFFSET: usize = 20;
pub const WIB2_CHANNELS: usize = 256;
/// DAPHNE Ethernet stream: 280 samples of 4 channels after the DAQEthHeader (16 bytes) and four
/// channel words (32 bytes).
pub const DAPHNE_STREAM_ADC_OFFSET: usize = 48;
pub const DAPHNE_STREAM_SAMPLES: usize = 280;
pub const DAPHNE_STREAM_CHANNELS: usize = 4;
/// ProtoDUNE WIB1: a 16-byte WIB header, then 4 COLDATA blocks of 112 bytes (a 16-byte header,
/// 8 segments of 12 bytes), 64 channels each, 12 bits per value.
pub const WIB1_HEADER_BYTES: usize = 16;
pub const WIB1_BLOCK_BYTES: usize = 112;
pub const WIB1_CHANNELS: usize = 256;

/// Value `i` of `bits` bits from an LSB-first bit stream.
pub fn unpack(bytes: &[u8], bits: u32, i: usize) -> u16 {
    // (Three bytes hold a value of up to 17 bits at any shift.)
    debug_assert!((1..=16).contains(&bits), "a value of {bits} bits");
    let bit = i * bits as usize;
    let (byte, shift) = (bit / 8, bit % 8);
    // Three bytes hold any value of up to 17 bits wherever it starts.
    let mut w = 0u32;
    for k in 0..3 {
        w |= (*bytes.get(byte + k).unwrap_or(&0) as u32) << (8 * k);
    }
    ((w >> shift) & ((1 << bits) - 1)) as u16
}

/// Writes `value` (its low `bits` bits) as value `i` of an LSB-first bit stream.
pub fn pack(bytes: &mut [u8], bits: u32, i: usize, value: u16) {
    debug_assert!((1..=16).contains(&bits), "a value of {bits} bits");
    let bit = i * bits as usize;
    let (byte, shift) = (bit / 8, bit % 8);
    let mask = ((1u32 << bits) - 1) << shift;
    let v = ((value as u32) << shift) & mask;
    for k in 0..3 {
        if let Some(b) = bytes.get_mut(byte + k) {
            let m = (mask >> (8 * k)) as u8;
            *b = (*b & !m) | (v >> (8 * k)) as u8;
        }
    }
}

/// WIBEth/TDEEth: channel `channel`'s ADC value in time sample `sample`.
pub fn eth_adc(frame: &[u8], channel: usize, sample: usize) -> u16 {
    let row = ETH_CHANNELS * ADC_BITS as usize / 8;
    unpack(
        &frame[ETH_ADC_OFFSET + sample * row..ETH_ADC_OFFSET + (sample + 1) * row],
        ADC_BITS,
        channel,
    )
}

/// Where a frame type keeps its ADC values, and when each was sampled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdcShape {
    pub channels: usize,
    /// Time samples in one stored frame (a WIB2 superchunk holds 12, one per detector frame).
    pub samples_per_frame: usize,
    /// Ticks one stored frame covers; sample `i` is `i * ticks_per_frame / samples_per_frame`
    /// ticks after the frame's timestamp.
    pub ticks_per_frame: u64,
    /// A stored frame's length.
    frame_bytes: usize,
    kind: AdcKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AdcKind {
    /// WIBEth, TDEEth, DAPHNE stream: samples x channels, 14 bits each, from `offset`.
    Rows { offset: usize },
    /// WIB2: one sample of 256 channels per 472-byte detector frame.
    Wib2,
    /// ProtoDUNE WIB1: one sample of 256 channels per 464-byte detector frame, COLDATA-packed.
    Wib1,
}

impl AdcShape {
    /// The shape of `t`'s ADC values; None for custom frames, whose contents snbuf cannot know.
    pub fn of(t: crate::FrameType) -> Option<AdcShape> {
        use crate::FrameType as T;
        let shape = |channels, samples_per_frame, kind| AdcShape {
            channels,
            samples_per_frame,
            ticks_per_frame: t.ticks_per_frame(),
            frame_bytes: t.frame_bytes() as usize,
            kind,
        };
        let rows = |offset| AdcKind::Rows { offset };
        match t {
            T::WibEth | T::TdeEth => Some(shape(ETH_CHANNELS, ETH_SAMPLES, rows(ETH_ADC_OFFSET))),
            T::DaphneEthStream => Some(shape(
                DAPHNE_STREAM_CHANNELS,
                DAPHNE_STREAM_SAMPLES,
                rows(DAPHNE_STREAM_ADC_OFFSET),
            )),
            T::Wib2 => Some(shape(WIB2_CHANNELS, 12, AdcKind::Wib2)),
            T::ProtoDuneWib => Some(shape(WIB1_CHANNELS, 12, AdcKind::Wib1)),
            T::Custom { .. } => None,
        }
    }

    /// Bits per value: 14, or 12 for ProtoDUNE's WIB1.
    pub fn bits(&self) -> u32 {
        match self.kind {
            AdcKind::Wib1 => 12,
            _ => ADC_BITS,
        }
    }

    /// Ticks from the frame's timestamp to sample `i`, as the fraction (numerator,
    /// `samples_per_frame`): exact for TDEEth's 31.25.
    pub fn sample_offset_ticks(&self, i: usize) -> (u64, u64) {
        (
            i as u64 * self.ticks_per_frame,
            self.samples_per_frame as u64,
        )
    }

    /// Ticks between two samples (32 for WIBEth and WIB2, 31.25 for TDEEth).
    pub fn ticks_per_sample(&self) -> f64 {
        self.ticks_per_frame as f64 / self.samples_per_frame as f64
    }

    /// Writes `values` (one per channel) as sample `sample` of `frame`, where `sample` reads
    /// them back; the frame's other bytes stay as they are.
    #[inline(always)]
    pub fn write_sample(&self, frame: &mut [u8], sample: usize, values: &[u16]) {
        assert!(sample < self.samples_per_frame && values.len() == self.channels);
        // (The subframes' size is the frame's over its samples.)
        debug_assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the shape's type"
        );
        let (row, bits) = match self.kind {
            AdcKind::Rows { offset } => {
                let row = self.channels * ADC_BITS as usize / 8;
                (offset + sample * row, ADC_BITS)
            }
            AdcKind::Wib2 => {
                let sub = frame.len() / self.samples_per_frame;
                (sample * sub + WIB2_ADC_OFFSET, ADC_BITS)
            }
            AdcKind::Wib1 => {
                let sub = frame.len() / self.samples_per_frame;
                let f = &mut frame[sample * sub..(sample + 1) * sub];
                for (ch, &v) in values.iter().enumerate() {
                    wib1_pack(f, ch, v);
                }
                return;
            }
        };
        let bytes = (self.channels * bits as usize).div_ceil(8);
        pack_all(&mut frame[row..row + bytes], bits, values);
    }

    /// The byte ranges of a frame of `frame_len` bytes that hold its ADC values and nothing
    /// else (every bit of them is a value's); None when `frame_len` is not this shape's. The
    /// rest of the frame is headers, which a codec keeps verbatim.
    pub fn adc_ranges(&self, frame_len: usize) -> Option<Vec<std::ops::Range<usize>>> {
        if frame_len != self.frame_bytes {
            return None;
        }
        let per_sub = frame_len / self.samples_per_frame;
        let ranges: Vec<std::ops::Range<usize>> = match self.kind {
            AdcKind::Rows { offset } => {
                let row = self.channels * ADC_BITS as usize / 8;
                std::iter::once(offset..offset + self.samples_per_frame * row).collect()
            }
            AdcKind::Wib2 => (0..self.samples_per_frame)
                .map(|s| s * per_sub + WIB2_ADC_OFFSET)
                .map(|at| at..at + WIB2_CHANNELS * ADC_BITS as usize / 8)
                .collect(),
            // Each detector frame: its WIB header, then four COLDATA blocks of a 16-byte header
            // and 96 bytes of segments.
            AdcKind::Wib1 => (0..self.samples_per_frame)
                .flat_map(|s| {
                    (0..4).map(move |b| {
                        let at = s * per_sub + WIB1_HEADER_BYTES + b * WIB1_BLOCK_BYTES + 16;
                        at..at + WIB1_BLOCK_BYTES - 16
                    })
                })
                .collect(),
        };
        debug_assert!(
            ranges.windows(2).all(|w| w[0].end <= w[1].start)
                && ranges.last().is_some_and(|r| r.end <= frame_len),
            "ranges in order, inside the frame"
        );
        Some(ranges)
    }

    /// Every value of sample `sample` of `frame`, one per channel, into `out`.
    #[inline(always)]
    pub fn sample(&self, frame: &[u8], sample: usize, out: &mut [u16]) {
        assert!(sample < self.samples_per_frame && out.len() == self.channels);
        debug_assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the shape's type"
        );
        let row = match self.kind {
            AdcKind::Rows { offset } => {
                let row = self.channels * ADC_BITS as usize / 8;
                &frame[offset + sample * row..offset + (sample + 1) * row]
            }
            AdcKind::Wib2 => {
                let sub = frame.len() / self.samples_per_frame;
                let at = sample * sub + WIB2_ADC_OFFSET;
                &frame[at..at + WIB2_CHANNELS * ADC_BITS as usize / 8]
            }
            AdcKind::Wib1 => {
                let sub = frame.len() / self.samples_per_frame;
                let f = &frame[sample * sub..(sample + 1) * sub];
                for (ch, v) in out.iter_mut().enumerate() {
                    *v = wib1_adc(f, ch);
                }
                return;
            }
        };
        unpack_all(row, ADC_BITS, out);
    }
}

/// ProtoDUNE WIB1: channel `channel` (0-255) of one 464-byte detector frame. Channel c is COLDATA
/// block c / 64, ADC (c % 64) / 8, that ADC's channel c % 8; segment (adc / 2) * 2 + (c % 8) / 4
/// of the block holds channels 0-3 or 4-7 of ADCs 2k and 2k + 1 in three little-endian 32-bit
/// words, each value split into an 8-bit and a 4-bit piece.
pub fn wib1_adc(frame: &[u8], channel: usize) -> u16 {
    debug_assert!(channel < WIB1_CHANNELS, "WIB1 frames hold 256 channels");
    let (block, c) = (channel / 64, channel % 64);
    let (adc, ch) = (c / 8, c % 8);
    let seg = (adc / 2) * 2 + ch / 4;
    let at = WIB1_HEADER_BYTES + block * WIB1_BLOCK_BYTES + 16 + seg * 12;
    let word = |i: usize| u32::from_le_bytes(frame[at + 4 * i..at + 4 * i + 4].try_into().unwrap());
    let bits = |w: u32, lo: u32, n: u32| ((w >> lo) & ((1 << n) - 1)) as u16;
    let odd = (adc % 2) as u32;
    let (w0, w1, w2) = (word(0), word(1), word(2));
    match ch % 4 {
        // adcXch0: 8 low bits in word 0 (bits 0 or 8), 4 high bits in word 0 (bits 16 or 24).
        0 => bits(w0, 8 * odd, 8) | bits(w0, 16 + 8 * odd, 4) << 8,
        // adcXch1: 4 low bits in word 0 (bits 20 or 28), 8 high bits in word 1 (bits 0 or 8).
        1 => bits(w0, 20 + 8 * odd, 4) | bits(w1, 8 * odd, 8) << 4,
        // adcXch2: 8 low bits in word 1 (bits 16 or 24), 4 high bits in word 2 (bits 0 or 8).
        2 => bits(w1, 16 + 8 * odd, 8) | bits(w2, 8 * odd, 4) << 8,
        // adcXch3: 4 low bits in word 2 (bits 4 or 12), 8 high bits in word 2 (bits 16 or 24).
        _ => bits(w2, 4 + 8 * odd, 4) | bits(w2, 16 + 8 * odd, 8) << 4,
    }
}

/// ProtoDUNE WIB1: writes `value` (12 bits) as channel `channel` of one 464-byte detector frame,
/// where `wib1_adc` reads it (the same bit fields, written instead of read); no other bit changes.
pub fn wib1_pack(frame: &mut [u8], channel: usize, value: u16) {
    assert!(channel < WIB1_CHANNELS, "WIB1 frames hold 256 channels");
    let (block, c) = (channel / 64, channel % 64);
    let (adc, ch) = (c / 8, c % 8);
    let seg = (adc / 2) * 2 + ch / 4;
    let at = WIB1_HEADER_BYTES + block * WIB1_BLOCK_BYTES + 16 + seg * 12;
    let odd = (adc % 2) as u32;
    let v = value as u32 & 0xFFF;
    let mut words = [0u32; 3];
    for (i, w) in words.iter_mut().enumerate() {
        *w = u32::from_le_bytes(frame[at + 4 * i..at + 4 * i + 4].try_into().unwrap());
    }
    // Puts the low `n` bits of `x` at bit `lo` of word `i`.
    let mut put = |i: usize, lo: u32, n: u32, x: u32| {
        let m = ((1u32 << n) - 1) << lo;
        words[i] = (words[i] & !m) | ((x << lo) & m);
    };
    match ch % 4 {
        0 => {
            put(0, 8 * odd, 8, v);
            put(0, 16 + 8 * odd, 4, v >> 8);
        }
        1 => {
            put(0, 20 + 8 * odd, 4, v);
            put(1, 8 * odd, 8, v >> 4);
        }
        2 => {
            put(1, 16 + 8 * odd, 8, v);
            put(2, 8 * odd, 4, v >> 8);
        }
        _ => {
            put(2, 4 + 8 * odd, 4, v);
            put(2, 16 + 8 * odd, 8, v >> 4);
        }
    }
    for (i, w) in words.iter().enumerate() {
        frame[at + 4 * i..at + 4 * i + 4].copy_from_slice(&w.to_le_bytes());
    }
}

/// Writes `values` (their low `bits` bits) as values `0..values.len()` of an LSB-first bit
/// stream, in one pass; `unpack_all` reads them back.
#[inline]
pub fn pack_all(bytes: &mut [u8], bits: u32, values: &[u16]) {
    if bits == 14 && values.len().is_multiple_of(4) && bytes.len() == values.len() / 4 * 7 {
        // Four 14-bit values fill 7 whole bytes.
        const M: u64 = (1 << 14) - 1;
        for (four, seven) in values.chunks_exact(4).zip(bytes.chunks_exact_mut(7)) {
            let w = (four[0] as u64 & M)
                | (four[1] as u64 & M) << 14
                | (four[2] as u64 & M) << 28
                | (four[3] as u64 & M) << 42;
            seven.copy_from_slice(&w.to_le_bytes()[..7]);
        }
        return;
    }
    for (i, &v) in values.iter().enumerate() {
        pack(bytes, bits, i, v);
    }
}

/// Values `0..out.len()` of an LSB-first bit stream, in one pass (a row of a frame at a time).
#[inline]
pub fn unpack_all(bytes: &[u8], bits: u32, out: &mut [u16]) {
    if bits == 14 && out.len().is_multiple_of(4) && bytes.len() >= out.len() / 4 * 7 {
        // Four 14-bit values are 7 whole bytes: one little-endian word each, no carry between.
        const M: u64 = (1 << 14) - 1;
        for (four, seven) in out.chunks_exact_mut(4).zip(bytes.chunks_exact(7)) {
            let mut w = [0u8; 8];
            w[..7].copy_from_slice(seven);
            let w = u64::from_le_bytes(w);
            four[0] = (w & M) as u16;
            four[1] = (w >> 14 & M) as u16;
            four[2] = (w >> 28 & M) as u16;
            four[3] = (w >> 42 & M) as u16;
        }
        return;
    }
    let mask = (1u64 << bits) - 1;
    let (mut acc, mut have, mut at) = (0u64, 0u32, 0usize);
    for v in out.iter_mut() {
        while have < bits {
            acc |= (*bytes.get(at).unwrap_or(&0) as u64) << have;
            at += 1;
            have += 8;
        }
        *v = (acc & mask) as u16;
        acc >>= bits;
        have -= bits;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packing_a_row_at_once_is_packing_each_value() {
        for n in [4usize, 64, 256, 7] {
            let values: Vec<u16> = (0..n as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u16)
                .collect();
            let len = (n * 14).div_ceil(8);
            let (mut one, mut all) = (vec![0xa5u8; len], vec![0xa5u8; len]);
            for (i, &v) in values.iter().enumerate() {
                pack(&mut one, 14, i, v);
            }
            pack_all(&mut all, 14, &values);
            assert_eq!(one, all, "{n} values");
        }
    }

    #[test]
    fn the_adc_ranges_are_exactly_the_bytes_the_values_fill() {
        use crate::FrameType as T;
        for t in [
            T::WibEth,
            T::TdeEth,
            T::DaphneEthStream,
            T::Wib2,
            T::ProtoDuneWib,
        ] {
            let shape = AdcShape::of(t).unwrap();
            let len = t.frame_bytes() as usize;
            let ranges = shape.adc_ranges(len).unwrap();
            let mut frame = vec![0u8; len];
            let ones = vec![(1u16 << shape.bits()) - 1; shape.channels];
            for s in 0..shape.samples_per_frame {
                shape.write_sample(&mut frame, s, &ones);
            }
            for (i, b) in frame.iter().enumerate() {
                let inside = ranges.iter().any(|r| r.contains(&i));
                assert_eq!(*b == 0xff, inside, "{t} byte {i}: {b:#x}");
            }
            assert_eq!(shape.adc_ranges(len + 1), None, "{t}: another length");
        }
    }

    #[test]
    fn tdeeth_samples_are_31_25_ticks_apart_and_wibeth_32() {
        let tde = AdcShape::of(crate::FrameType::TdeEth).unwrap();
        assert_eq!(tde.ticks_per_sample(), 31.25);
        assert_eq!(
            tde.sample_offset_ticks(4),
            (8000, 64),
            "125 ticks after 4 samples"
        );
        let wib = AdcShape::of(crate::FrameType::WibEth).unwrap();
        assert_eq!(wib.ticks_per_sample(), 32.0);
        let wib2 = AdcShape::of(crate::FrameType::Wib2).unwrap();
        assert_eq!((wib2.channels, wib2.samples_per_frame), (256, 12));
        assert_eq!(wib2.ticks_per_sample(), 32.0);
        let wib1 = AdcShape::of(crate::FrameType::ProtoDuneWib).unwrap();
        assert_eq!(
            (wib1.channels, wib1.samples_per_frame, wib1.bits()),
            (256, 12, 12)
        );
        assert_eq!(wib1.ticks_per_sample(), 25.0, "2 MHz on the 50 MHz clock");
        let daphne = AdcShape::of(crate::FrameType::DaphneEthStream).unwrap();
        assert_eq!((daphne.channels, daphne.samples_per_frame), (4, 280));
        assert_eq!(daphne.ticks_per_sample(), 1.0, "62.5 MHz sampling");
    }

    #[test]
    fn wib1_values_are_where_coldata_segments_keep_them() {
        // Written by hand from WIBFrame.hpp's ColdataSegment bit fields: segment 0 of block 0
        // (bytes 32..44 of the frame) holds channels 0-3 of ADCs 0 and 1, i.e. frame channels
        // 0-3 and 8-11.
        let mut f = vec![0u8; 464];
        let seg = 16 + 16; // WIB header, COLDATA header
                           // word 0: adc0ch0_1=0xBC, adc1ch0_1=0x9A, adc0ch0_2=0xA, adc0ch1_1=0x1, adc1ch0_2=0x7,
                           //         adc1ch1_1=0x2
        f[seg..seg + 4].copy_from_slice(&0x271A_9ABCu32.to_le_bytes());
        // word 1: adc0ch1_2=0x34, adc1ch1_2=0x56, adc0ch2_1=0x78, adc1ch2_1=0x11
        f[seg + 4..seg + 8].copy_from_slice(&0x1178_5634u32.to_le_bytes());
        // word 2: adc0ch2_2=0x3, adc0ch3_1=0x4, adc1ch2_2=0x5, adc1ch3_1=0x6, adc0ch3_2=0xAB,
        //         adc1ch3_2=0xCD
        f[seg + 8..seg + 12].copy_from_slice(&0xCDAB_6543u32.to_le_bytes());
        let want = [
            (0, 0xABC),  // adc0ch0: 0xBC | 0xA << 8
            (1, 0x341),  // adc0ch1: 0x1 | 0x34 << 4
            (2, 0x378),  // adc0ch2: 0x78 | 0x3 << 8
            (3, 0xAB4),  // adc0ch3: 0x4 | 0xAB << 4
            (8, 0x79A),  // adc1ch0: 0x9A | 0x7 << 8
            (9, 0x562),  // adc1ch1: 0x2 | 0x56 << 4
            (10, 0x511), // adc1ch2: 0x11 | 0x5 << 8
            (11, 0xCD6), // adc1ch3: 0x6 | 0xCD << 4
        ];
        for (ch, v) in want {
            assert_eq!(wib1_adc(&f, ch), v, "channel {ch}");
        }
        // Channel 4 (ADC 0, its channel 4) lives in segment 1, channel 64 in block 1: untouched.
        assert_eq!(wib1_adc(&f, 4), 0);
        assert_eq!(wib1_adc(&f, 64), 0);
        // A superchunk's sample 2 is its third detector frame.
        let mut sc = vec![0u8; 12 * 464];
        sc[2 * 464..3 * 464].copy_from_slice(&f);
        let mut out = [0u16; 256];
        AdcShape::of(crate::FrameType::ProtoDuneWib)
            .unwrap()
            .sample(&sc, 2, &mut out);
        assert_eq!((out[0], out[11]), (0xABC, 0xCD6));
    }

    #[test]
    fn wib1_packing_writes_exactly_what_wib1_reading_reads() {
        // Every channel, with values that use all 12 bits, over bytes that were not zero: each
        // value reads back, and packing one channel leaves every other channel as it was.
        let mut f: Vec<u8> = (0..464).map(|i| (i * 37 + 11) as u8).collect();
        let before: Vec<u16> = (0..256).map(|c| wib1_adc(&f, c)).collect();
        let value = |c: usize| ((c * 2741 + 1) % 4096) as u16;
        for c in 0..256 {
            wib1_pack(&mut f, c, value(c));
            assert_eq!(wib1_adc(&f, c), value(c), "channel {c}");
            for (o, &was) in before.iter().enumerate().skip(c + 1) {
                assert_eq!(wib1_adc(&f, o), was, "channel {o} after packing {c}");
            }
        }
        // The WIB header and the COLDATA headers hold no ADC bits.
        let g: Vec<u8> = (0..464).map(|i| (i * 37 + 11) as u8).collect();
        assert_eq!(f[..32], g[..32]);
        for b in 1..4 {
            let h = WIB1_HEADER_BYTES + b * WIB1_BLOCK_BYTES;
            assert_eq!(f[h..h + 16], g[h..h + 16], "COLDATA header {b}");
        }
    }

    #[test]
    fn a_written_sample_reads_back_for_every_frame_type() {
        use crate::FrameType as T;
        for t in [
            T::WibEth,
            T::TdeEth,
            T::Wib2,
            T::ProtoDuneWib,
            T::DaphneEthStream,
        ] {
            let shape = AdcShape::of(t).unwrap();
            let mut f = vec![0xA5u8; t.layout().frame_bytes as usize];
            let max = (1u32 << shape.bits()) as usize;
            for s in 0..shape.samples_per_frame {
                let v: Vec<u16> = (0..shape.channels)
                    .map(|c| ((s * 131 + c * 17 + 3) % max) as u16)
                    .collect();
                shape.write_sample(&mut f, s, &v);
            }
            let mut out = vec![0u16; shape.channels];
            for s in 0..shape.samples_per_frame {
                shape.sample(&f, s, &mut out);
                for (c, &got) in out.iter().enumerate() {
                    assert_eq!(got as usize, (s * 131 + c * 17 + 3) % max, "{t} s{s} c{c}");
                }
            }
        }
    }

    #[test]
    fn daphne_stream_values_are_sample_major() {
        // get_adc_daphnestream: value (sample i, channel c) is number i * 4 + c of the stream.
        let mut f = vec![0u8; 2008];
        pack(
            &mut f[DAPHNE_STREAM_ADC_OFFSET..],
            ADC_BITS,
            7 * 4 + 2,
            0x2BCD,
        );
        let shape = AdcShape::of(crate::FrameType::DaphneEthStream).unwrap();
        let mut out = [0u16; 4];
        shape.sample(&f, 7, &mut out);
        assert_eq!(out, [0, 0, 0x2BCD, 0]);
        shape.sample(&f, 279, &mut out);
        assert_eq!(out, [0; 4]);
    }

    #[test]
    fn the_fast_and_the_general_unpacking_agree() {
        let bytes: Vec<u8> = (0..112u32).map(|i| (i * 37 + 11) as u8).collect();
        let mut fast = [0u16; 64];
        unpack_all(&bytes, 14, &mut fast);
        for (i, v) in fast.iter().enumerate() {
            assert_eq!(*v, unpack(&bytes, 14, i), "value {i}");
        }
        let mut odd = [0u16; 5]; // not a multiple of four: the general path
        unpack_all(&bytes, 14, &mut odd);
        assert_eq!(odd[..], fast[..5]);
    }

    #[test]
    fn a_row_unpacks_as_value_by_value() {
        let mut frame = vec![0u8; 7200];
        let shape = AdcShape::of(crate::FrameType::WibEth).unwrap();
        let row = ETH_CHANNELS * ADC_BITS as usize / 8;
        for ch in 0..64 {
            let v = (ch as u16 * 257 + 3) & 0x3FFF;
            pack(&mut frame[ETH_ADC_OFFSET + 5 * row..], ADC_BITS, ch, v);
        }
        let mut out = [0u16; 64];
        shape.sample(&frame, 5, &mut out);
        for (ch, v) in out.iter().enumerate() {
            assert_eq!(*v, eth_adc(&frame, ch, 5), "channel {ch}");
            assert_eq!(*v, (ch as u16 * 257 + 3) & 0x3FFF);
        }
        // WIB2: sample 3 is detector frame 3's 256 channels.
        let mut sc = vec![0u8; 12 * 472];
        pack(&mut sc[3 * 472 + WIB2_ADC_OFFSET..], ADC_BITS, 200, 0x1234);
        let wib2 = AdcShape::of(crate::FrameType::Wib2).unwrap();
        let mut out = [0u16; 256];
        wib2.sample(&sc, 3, &mut out);
        assert_eq!(out[200], 0x1234);
        assert_eq!(out.iter().filter(|v| **v != 0).count(), 1);
    }

    #[test]
    fn values_pack_lsb_first_across_words() {
        // Written by hand: values 0x3FFF, 0x0001, 0x2AAA at bits 0, 14, 28 of the stream.
        // bits 0-13 all ones; bit 14 one; bits 28-41 = 10101010101010 (LSB first: 0,1,0,1...).
        let mut b = [0u8; 8];
        pack(&mut b, 14, 0, 0x3FFF);
        pack(&mut b, 14, 1, 0x0001);
        pack(&mut b, 14, 2, 0x2AAA);
        assert_eq!(b, [0xFF, 0x7F, 0x00, 0xA0, 0xAA, 0x02, 0x00, 0x00]);
        assert_eq!(unpack(&b, 14, 0), 0x3FFF);
        assert_eq!(unpack(&b, 14, 1), 1);
        assert_eq!(unpack(&b, 14, 2), 0x2AAA);
        // Rewriting one value leaves its neighbours alone.
        pack(&mut b, 14, 1, 0x1234);
        assert_eq!((unpack(&b, 14, 0), unpack(&b, 14, 1)), (0x3FFF, 0x1234));
        assert_eq!(unpack(&b, 14, 2), 0x2AAA);
    }
}
