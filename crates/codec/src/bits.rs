//! Bits written and read least significant first, as DUNE packs its ADC words: a writer that
//! gathers up to 32 bits a call in a 64-bit word, and a reader that never reads past its bytes
//! (hostile input ends in an error, not a panic or an invented bit).

/// Appends bits to a byte vector, least significant first.
pub struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    /// Bits in `acc` not yet in `out` (< 32 between calls).
    held: u32,
}

impl<'a> BitWriter<'a> {
    pub fn new(out: &'a mut Vec<u8>) -> BitWriter<'a> {
        BitWriter {
            out,
            acc: 0,
            held: 0,
        }
    }

    /// The low `n` bits of `value` (`n` at most 32).
    #[inline]
    pub fn put(&mut self, value: u32, n: u32) {
        debug_assert!(
            n <= 32 && (n == 32 || value >> n == 0),
            "{n} bits of {value:#x}"
        );
        self.acc |= (value as u64) << self.held;
        self.held += n;
        if self.held >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.held -= 32;
        }
    }

    /// Writes what is held, padded with zeros to a whole byte.
    pub fn finish(self) {
        let bytes = self.held.div_ceil(8) as usize;
        self.out.extend_from_slice(&self.acc.to_le_bytes()[..bytes]);
    }
}

/// Reads bits from a byte slice, least significant first.
pub struct BitReader<'a> {
    bytes: &'a [u8],
    /// The next byte of `bytes` to take into `acc`.
    at: usize,
    acc: u64,
    /// Valid bits in `acc`.
    held: u32,
}

/// The reader ran out of bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct OutOfBits;

impl<'a> BitReader<'a> {
    pub fn new(bytes: &'a [u8]) -> BitReader<'a> {
        BitReader {
            bytes,
            at: 0,
            acc: 0,
            held: 0,
        }
    }

    /// Fills `acc` to at least 32 bits where the bytes allow.
    #[inline]
    fn refill(&mut self) {
        if self.at + 8 <= self.bytes.len() {
            let mut w = [0u8; 8];
            w.copy_from_slice(&self.bytes[self.at..self.at + 8]);
            let take = (63 - self.held) / 8;
            if take == 0 {
                return;
            }
            let word = u64::from_le_bytes(w) & (u64::MAX >> (64 - 8 * take));
            self.acc |= word << self.held;
            self.at += take as usize;
            self.held += 8 * take;
        } else {
            while self.held <= 56 && self.at < self.bytes.len() {
                self.acc |= (self.bytes[self.at] as u64) << self.held;
                self.at += 1;
                self.held += 8;
            }
        }
    }

    /// The next `n` bits (`n` at most 32).
    #[inline]
    pub fn get(&mut self, n: u32) -> Result<u32, OutOfBits> {
        debug_assert!(n <= 32);
        if self.held < n {
            self.refill();
            if self.held < n {
                return Err(OutOfBits);
            }
        }
        let v = (self.acc & ((1u64 << n) - 1)) as u32;
        self.acc >>= n;
        self.held -= n;
        Ok(v)
    }

    /// How many 1-bits come next, up to `limit` (at most 32), and the 0 that ends them (not
    /// taken when `limit` is reached).
    #[inline]
    pub fn ones(&mut self, limit: u32) -> Result<u32, OutOfBits> {
        debug_assert!(limit <= 32);
        if self.held < limit + 1 {
            self.refill();
        }
        let run = (!self.acc).trailing_zeros().min(limit);
        if run == limit {
            self.get(limit)?;
            return Ok(limit);
        }
        if run + 1 > self.held {
            return Err(OutOfBits);
        }
        self.acc >>= run + 1;
        self.held -= run + 1;
        Ok(run)
    }

    /// Bytes taken so far, the last one perhaps in part.
    pub fn bytes_used(&self) -> usize {
        self.at - (self.held / 8) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_is_read_back_and_no_more() {
        let mut out = Vec::new();
        let mut w = BitWriter::new(&mut out);
        let items: Vec<(u32, u32)> = (0..500u32)
            .map(|i| {
                let n = 1 + (i * 7) % 32;
                (i.wrapping_mul(2_654_435_761) & (u32::MAX >> (32 - n)), n)
            })
            .collect();
        for &(v, n) in &items {
            w.put(v, n);
        }
        w.put(0b0111, 4);
        w.finish();
        let total: u32 = items.iter().map(|x| x.1).sum::<u32>() + 4;
        assert_eq!(out.len(), total.div_ceil(8) as usize);
        let mut r = BitReader::new(&out);
        for &(v, n) in &items {
            assert_eq!(r.get(n), Ok(v));
        }
        assert_eq!(r.ones(16), Ok(3));
        assert_eq!(r.bytes_used(), out.len());
        let pad = (8 - total % 8) % 8;
        assert_eq!(r.get(pad), Ok(0), "zero padding");
        assert_eq!(r.get(1), Err(OutOfBits));
    }

    #[test]
    fn a_run_of_ones_stops_at_its_limit_or_the_end() {
        let bytes = [0xff, 0xff, 0xff];
        let mut r = BitReader::new(&bytes);
        assert_eq!(r.ones(16), Ok(16));
        assert_eq!(r.ones(16), Err(OutOfBits), "eight ones, then nothing");
    }
}
