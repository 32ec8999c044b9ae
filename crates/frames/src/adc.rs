//! ADC samples as DUNE packs them: 14-bit values back to back, least significant bit first,
//! in little-endian words (64-bit in WIBEth and TDEEth, 32-bit in WIB2: the byte stream is the
//! same either way). A WIBEth frame holds 64 time samples of 64 channels after its 32 bytes of
//! headers, sample by sample.

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

#[cfg(test)]
mod tests {
    use super::*;

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
