//! Each channel's residuals (a sample less its prediction: the channel's previous sample, or its
//! running mean where its noise is white) Rice-coded with a
//! parameter that follows the channel's own noise, as LOCO-I (JPEG-LS) adapts it: the mean of
//! its recent mapped residuals sets `k`, so a quiet channel costs few bits and a noisy one or a
//! track's pulse no more than it must. Encoder and decoder keep the same state, so no parameter
//! is stored. A residual too large for its code (a step of thousands of counts: a corrupt or
//! saturated sample) is escaped and its value written whole.

use crate::bits::{BitReader, BitWriter, OutOfBits};

/// The longest unary part before the escape; with `k` of at most 14 a code fits one 32-bit put.
const ESCAPE_ONES: u32 = 16;
/// Bits of an escaped value: the sample itself.
const ESCAPED_BITS: u32 = 16;
/// Mapped residuals counted before the running sums are halved: the state follows the last
/// few dozen samples of the channel.
const RESET_AT: u32 = 64;
/// Largest parameter: the residual's low bits of a 14-bit sample.
const MAX_K: u32 = 14;

/// One channel's running state: its last sample and its running mean (its baseline), what
/// each would have cost as the prediction, and the sum and count of its recent mapped residuals.
#[derive(Clone, Copy, Debug)]
pub struct Channel {
    last: u16,
    /// The running mean, in sixteenths of a count.
    mean_x16: i32,
    /// Recent absolute residuals had each sample been predicted by the last one, or by the mean.
    cost_last: u32,
    cost_mean: u32,
    sum: u32,
    count: u32,
    /// The Rice parameter: the smallest k with count * 2^k >= sum, kept as they change.
    k: u32,
}

/// How fast the running mean follows the samples: a time constant of 2^`MEAN_SHIFT` samples.
const MEAN_SHIFT: u32 = 4;

impl Channel {
    /// A channel before its first sample: predicted at `start` (mid-range), its residuals
    /// taken to be of a few counts.
    pub fn new(start: u16) -> Channel {
        Channel {
            last: start,
            mean_x16: (start as i32) << 4,
            cost_last: 0,
            cost_mean: 0,
            sum: 16,
            count: 1,
            k: 4,
        }
    }

    /// The prediction of the next sample: the last one where the channel's noise is smooth
    /// (each sample near the one before), its mean where it is white (the samples scattered
    /// about the baseline, where a difference would have twice the noise's variance). Chosen by
    /// what each would have cost on the recent samples, so the decoder makes the same choice.
    #[inline]
    fn prediction(&self) -> i32 {
        if self.cost_mean < self.cost_last {
            (self.mean_x16 + 8) >> 4
        } else {
            self.last as i32
        }
    }

    #[inline]
    fn k(&self) -> u32 {
        self.k
    }

    /// Moves `k` to the smallest with count * 2^k >= sum (a step or none: the sums move
    /// slowly).
    #[inline]
    fn retune(&mut self) {
        while (self.count << self.k) < self.sum && self.k < MAX_K {
            self.k += 1;
        }
        while self.k > 0 && (self.count << (self.k - 1)) >= self.sum {
            self.k -= 1;
        }
    }

    #[inline]
    fn learn(&mut self, value: u16, mapped: u32) {
        let v = value as i32;
        self.cost_last += v.abs_diff(self.last as i32);
        self.cost_mean += v.abs_diff((self.mean_x16 + 8) >> 4);
        self.mean_x16 += ((v << 4) - self.mean_x16) >> MEAN_SHIFT;
        self.last = value;
        self.sum += mapped;
        self.count += 1;
        if self.count == RESET_AT {
            self.sum >>= 1;
            self.count >>= 1;
            self.cost_last >>= 1;
            self.cost_mean >>= 1;
        }
        self.retune();
    }
}

/// Signed to unsigned, small magnitudes first: 0, -1, 1, -2, 2, ...
#[inline]
fn zigzag(r: i32) -> u32 {
    ((r << 1) ^ (r >> 31)) as u32
}

#[inline]
fn unzigzag(m: u32) -> i32 {
    (m >> 1) as i32 ^ -((m & 1) as i32)
}

/// Takes `value` as the channel's next sample without coding it (a frame stored raw).
#[inline]
pub fn observe(ch: &mut Channel, value: u16) {
    let mapped = zigzag(value as i32 - ch.prediction());
    ch.learn(value, mapped);
}

/// Writes `value`, the channel's next sample.
#[inline]
pub fn encode(ch: &mut Channel, value: u16, w: &mut BitWriter) {
    let mapped = zigzag(value as i32 - ch.prediction());
    let k = ch.k();
    let q = mapped >> k;
    if q < ESCAPE_ONES {
        // q ones, a zero, then the low k bits: one put of at most 16 + 1 + 14 bits.
        let unary = (1u32 << q) - 1;
        w.put(unary | ((mapped & ((1 << k) - 1)) << (q + 1)), q + 1 + k);
    } else {
        w.put((1u32 << ESCAPE_ONES) - 1, ESCAPE_ONES);
        w.put(value as u32, ESCAPED_BITS);
    }
    ch.learn(value, mapped);
}

/// Reads the channel's next sample.
#[inline]
pub fn decode(ch: &mut Channel, r: &mut BitReader) -> Result<u16, OutOfBits> {
    let k = ch.k();
    let predicted = ch.prediction();
    let q = r.ones(ESCAPE_ONES)?;
    let value = if q < ESCAPE_ONES {
        let mapped = (q << k) | r.get(k)?;
        let v = predicted + unzigzag(mapped);
        // A value no sample can have (out of 16 bits) is a corrupt stream: kept in range here,
        // and caught by the chunk's checksum.
        v.clamp(0, u16::MAX as i32) as u16
    } else {
        r.get(ESCAPED_BITS)? as u16
    };
    let mapped = zigzag(value as i32 - predicted);
    ch.learn(value, mapped);
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_parameter_is_the_smallest_that_covers_the_mean() {
        let mut ch = Channel::new(8192);
        for i in 0..5000u32 {
            let v = 8192 + ((i.wrapping_mul(2_654_435_761) >> (20 + i / 500)) as u16);
            observe(&mut ch, v);
            let want = (0..=MAX_K)
                .find(|&k| (ch.count << k) >= ch.sum)
                .unwrap_or(MAX_K);
            assert_eq!(ch.k(), want, "after {i}: sum {} count {}", ch.sum, ch.count);
        }
    }

    #[test]
    fn zigzag_is_its_own_inverse_and_small_first() {
        for r in -70_000..70_000 {
            assert_eq!(unzigzag(zigzag(r)), r);
        }
        assert_eq!([0, -1, 1, -2].map(zigzag), [0, 1, 2, 3]);
    }

    /// `values`, one channel's samples from mid-range, coded.
    fn encoded(values: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = BitWriter::new(&mut out);
        let mut ch = Channel::new(8192);
        for &v in values {
            encode(&mut ch, v, &mut w);
        }
        w.finish();
        out
    }

    #[test]
    fn samples_come_back_whatever_their_steps() {
        // Noise, a pulse, full-scale jumps (escaped), and the extremes.
        let values: Vec<u16> = (0..4000u32)
            .map(|i| match i % 500 {
                0 => 0,
                1 => 16383,
                2 => u16::MAX,
                3..=20 => 2000 + (i % 7) as u16 * 40,
                _ => 8192 + (i.wrapping_mul(2_654_435_761) >> 28) as u16,
            })
            .collect();
        let out = encoded(&values);
        let mut r = BitReader::new(&out);
        let mut ch = Channel::new(8192);
        for (i, &v) in values.iter().enumerate() {
            assert_eq!(decode(&mut ch, &mut r), Ok(v), "sample {i}");
        }
    }

    #[test]
    fn quiet_samples_cost_a_few_bits() {
        // Uniform noise of 16 counts: differences of about 5 bits of entropy.
        let values: Vec<u16> = (0..4000u32)
            .map(|i| 8192 + (i.wrapping_mul(2_654_435_761) >> 28) as u16)
            .collect();
        let out = encoded(&values);
        let bits = out.len() as f64 * 8.0 / values.len() as f64;
        assert!(bits < 6.5, "{bits} bits a sample");
    }
}
