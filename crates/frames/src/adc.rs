//! ADC samples as DUNE packs them: 14-bit values back to back, least significant bit first,
//! in little-endian words (64-bit in WIBEth and TDEEth, 32-bit in WIB2: the byte stream is the
//! same either way). A WIBEth frame holds 64 time samples of 64 channels after its 32 bytes of
//! headers, sample by sample.
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

/// Value `i` of `bits` bits from an LSB-first bit stream.
pub fn unpack(bytes: &[u8], bits: u32, i: usize) -> u16 {
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
    kind: AdcKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AdcKind {
    /// WIBEth, TDEEth: samples x channels after the 32 bytes of headers.
    Eth,
    /// WIB2: one sample of 256 channels per 472-byte detector frame.
    Wib2,
}

impl AdcShape {
    /// The shape of `t`'s ADC values; None for frame types snbuf does not decode (ProtoDUNE WIB's
    /// COLDATA blocks, DAPHNE streams, custom frames).
    pub fn of(t: crate::FrameType) -> Option<AdcShape> {
        use crate::FrameType as T;
        let eth = |ticks| AdcShape {
            channels: ETH_CHANNELS,
            samples_per_frame: ETH_SAMPLES,
            ticks_per_frame: ticks,
            kind: AdcKind::Eth,
        };
        match t {
            T::WibEth | T::TdeEth => Some(eth(t.ticks_per_frame())),
            T::Wib2 => Some(AdcShape {
                channels: WIB2_CHANNELS,
                samples_per_frame: 12,
                ticks_per_frame: t.ticks_per_frame(),
                kind: AdcKind::Wib2,
            }),
            T::ProtoDuneWib | T::DaphneEthStream | T::Custom { .. } => None,
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

    /// Every value of sample `sample` of `frame`, one per channel, into `out`.
    pub fn sample(&self, frame: &[u8], sample: usize, out: &mut [u16]) {
        assert!(sample < self.samples_per_frame && out.len() == self.channels);
        let row = match self.kind {
            AdcKind::Eth => {
                let row = ETH_CHANNELS * ADC_BITS as usize / 8;
                &frame[ETH_ADC_OFFSET + sample * row..ETH_ADC_OFFSET + (sample + 1) * row]
            }
            AdcKind::Wib2 => {
                let sub = frame.len() / self.samples_per_frame;
                let at = sample * sub + WIB2_ADC_OFFSET;
                &frame[at..at + WIB2_CHANNELS * ADC_BITS as usize / 8]
            }
        };
        unpack_all(row, ADC_BITS, out);
    }
}

/// Values `0..out.len()` of an LSB-first bit stream, in one pass (a row of a frame at a time).
pub fn unpack_all(bytes: &[u8], bits: u32, out: &mut [u16]) {
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
        assert!(AdcShape::of(crate::FrameType::ProtoDuneWib).is_none());
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
