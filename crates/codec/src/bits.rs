//! Bits written and read least significant first, as DUNE packs its ADC words, a code or a
//! few at a time (at most `MAX_PUT_BITS` written, `MAX_CODE_BITS` read):
//! - the writer gathers codes in a 64-bit word and stores it whole after each, moving on by the
//!   whole bytes it holds: no branch a code;
//! - the reader looks at the next 57 bits or more from any bit position of a stream it holds with
//!   `PADDING` zero bytes after it, so it never reads past its bytes and never branches to
//!   refill; whether a stream ended where its codes did is checked once, at its end (`finished`).

/// The longest code read at once.
pub const MAX_CODE_BITS: u32 = 32;
/// The most bits written at once.
pub const MAX_PUT_BITS: u32 = 56;
/// Zero bytes a reader's stream carries after its last byte: a whole word can be read at its end.
pub const PADDING: usize = 8;

/// Writes bits into a buffer sized beforehand (`room_for`), least significant first.
pub struct BitWriter<'a> {
    /// Room for every bit to be written, and `PADDING` bytes more, which the word stores fill.
    out: &'a mut [u8],
    /// Where the next byte goes.
    at: usize,
    acc: u64,
    /// Bits in `acc` not yet passed (< 8 between calls).
    held: u32,
}

impl<'a> BitWriter<'a> {
    /// A writer into `out`, which has `room_for` the bits to be written.
    pub fn new(out: &'a mut [u8]) -> BitWriter<'a> {
        BitWriter {
            out,
            at: 0,
            acc: 0,
            held: 0,
        }
    }

    /// The bytes a writer of at most `bits` bits needs.
    pub fn room_for(bits: usize) -> usize {
        bits.div_ceil(8) + PADDING
    }

    /// The low `n` bits of `value` (`n` at most `MAX_PUT_BITS`), within the room made.
    #[inline(always)]
    pub fn put(&mut self, value: u64, n: u32) {
        debug_assert!(
            n <= MAX_PUT_BITS && value >> n == 0,
            "{n} bits of {value:#x}"
        );
        self.acc |= value << self.held;
        self.held += n;
        // The word's bytes all go out; only the whole ones are passed.
        self.out[self.at..self.at + 8].copy_from_slice(&self.acc.to_le_bytes());
        let whole = self.held / 8;
        self.at += whole as usize;
        // At most 7 + 56 bits held: a shift of at most 56.
        self.acc >>= 8 * whole;
        self.held -= 8 * whole;
    }

    /// The low `n` bits of `value` (`n` at most 64): in two puts where they are more than
    /// `MAX_PUT_BITS`.
    #[inline(always)]
    pub fn put_long(&mut self, value: u64, n: u32) {
        debug_assert!(n <= 64 && (n == 64 || value >> n == 0));
        if n > MAX_PUT_BITS {
            self.put(value & u32::MAX as u64, 32);
            self.put(value >> 32, n - 32);
        } else {
            self.put(value, n);
        }
    }

    /// Ends the stream with what is held, padded with zeros to a whole byte: its bytes.
    pub fn finish(self) -> usize {
        self.at + self.held.div_ceil(8) as usize
    }
}

/// Reads bits from a stream followed by `PADDING` zero bytes, least significant first.
pub struct BitReader<'a> {
    /// The stream and its padding.
    padded: &'a [u8],
    /// The stream's own bits.
    len_bits: u64,
    /// The next bit to read.
    at_bits: u64,
}

/// The reader ran past its stream, or the stream did not end where its codes did.
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfBits;

impl<'a> BitReader<'a> {
    /// A reader of `padded`'s first `padded.len() - PADDING` bytes.
    pub fn new(padded: &'a [u8]) -> BitReader<'a> {
        assert!(
            padded.len() >= PADDING && padded[padded.len() - PADDING..].iter().all(|&b| b == 0),
            "a stream carries its zero padding"
        );
        BitReader {
            padded,
            len_bits: (padded.len() - PADDING) as u64 * 8,
            at_bits: 0,
        }
    }

    /// The next 57 bits or more; past the stream's end, zeros (caught by `finished`).
    #[inline]
    pub fn peek(&self) -> u64 {
        let byte = ((self.at_bits / 8) as usize).min(self.padded.len() - PADDING);
        let mut w = [0u8; 8];
        w.copy_from_slice(&self.padded[byte..byte + 8]);
        u64::from_le_bytes(w) >> (self.at_bits % 8)
    }

    /// Moves past `n` bits.
    #[inline]
    pub fn skip(&mut self, n: u32) {
        self.at_bits += n as u64;
    }

    /// The next `n` bits (`n` at most `MAX_CODE_BITS`).
    #[inline]
    pub fn get(&mut self, n: u32) -> u32 {
        debug_assert!(n <= MAX_CODE_BITS);
        let v = (self.peek() & ((1u64 << n) - 1)) as u32;
        self.skip(n);
        v
    }

    /// Whether the codes read ended in the stream's last byte, the rest of it zero padding:
    /// anything else (a code read past its end, or bytes left over) is a corrupt stream.
    pub fn finished(&self) -> Result<(), OutOfBits> {
        // (An empty stream's end is its start.)
        let ends_in_last_byte = self.at_bits <= self.len_bits && self.at_bits + 8 > self.len_bits;
        if !ends_in_last_byte {
            return Err(OutOfBits);
        }
        let rest = (self.peek() & ((1u64 << (self.len_bits - self.at_bits)) - 1)) as u32;
        if rest != 0 {
            return Err(OutOfBits);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn padded(mut bytes: Vec<u8>) -> Vec<u8> {
        bytes.extend_from_slice(&[0; PADDING]);
        bytes
    }

    #[test]
    fn what_is_written_is_read_back_and_no_more() {
        let mut out = vec![0xaa];
        let items: Vec<(u32, u32)> = (0..500u32)
            .map(|i| {
                let n = 1 + (i * 7) % 32;
                (i.wrapping_mul(2_654_435_761) & (u32::MAX >> (32 - n)), n)
            })
            .collect();
        let bits = items.iter().map(|x| x.1 as usize).sum::<usize>() + 56 + 4;
        out.resize(1 + BitWriter::room_for(bits), 0);
        let mut w = BitWriter::new(&mut out[1..]);
        for &(v, n) in &items {
            w.put(v as u64, n);
        }
        w.put(0x00ab_cdef_0123_4567, MAX_PUT_BITS);
        w.put(0b0111, 4);
        let end = 1 + w.finish();
        out.truncate(end);
        assert_eq!(out[0], 0xaa, "bytes before the stream kept");
        let total: u32 = items.iter().map(|x| x.1).sum::<u32>() + 56 + 4;
        assert_eq!(out.len() - 1, total.div_ceil(8) as usize);
        let stream = padded(out[1..].to_vec());
        let mut r = BitReader::new(&stream);
        for &(v, n) in &items {
            assert_eq!(r.get(n), v);
        }
        assert_eq!((r.get(28), r.get(28)), (0x123_4567, 0xabc_def0));
        assert_eq!(r.finished(), Err(OutOfBits), "four bits left");
        assert_eq!(r.get(4), 0b0111);
        assert_eq!(r.finished(), Ok(()));
        r.get(8);
        assert_eq!(r.finished(), Err(OutOfBits), "read past the end");
    }

    #[test]
    fn a_stream_with_a_byte_left_over_or_bits_in_its_padding_is_not_finished() {
        let stream = padded(vec![0x01, 0x00]);
        let mut r = BitReader::new(&stream);
        r.get(1);
        assert_eq!(r.finished(), Err(OutOfBits), "a whole byte unread");
        let stream = padded(vec![0x81]);
        let mut r = BitReader::new(&stream);
        r.get(1);
        assert_eq!(
            r.finished(),
            Err(OutOfBits),
            "a one in the last byte's padding"
        );
        let empty = padded(vec![]);
        assert_eq!(BitReader::new(&empty).finished(), Ok(()));
    }
}
