//! One channel's samples over a frame: each predicted (from the channel's previous sample, or
//! from its baseline where its noise is white), the residual Rice-coded with a parameter `k`
//! that follows the channel's own noise. Prediction and `k` are chosen for a frame from the
//! channel's samples in the frame before (`Channel::learn_frame`), as the decoder can choose
//! them too, so nothing is stored for them and the inner loop holds no decision but the code's.
//! A residual too large for its code (a step of thousands of counts: a corrupt or saturated
//! sample, a track's edge) is escaped and its sample written whole.

use crate::bits::{BitReader, BitWriter, OutOfBits};

/// The longest unary part before the escape; a code is at most 15 + 1 + `MAX_K` bits.
const ESCAPE_ONES: u32 = 16;
/// Bits of an escaped sample: the value itself.
const ESCAPED_BITS: u32 = 16;
/// Largest parameter: a residual's low bits of a 14-bit sample.
const MAX_K: u32 = 14;
/// The most bits one sample may take: an escape.
pub const MAX_SAMPLE_BITS: usize = (ESCAPE_ONES + ESCAPED_BITS) as usize;

/// What a channel's samples are predicted from over a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Predictor {
    /// The sample before: where the noise is smooth (the detector's, shaped by its front end).
    Last,
    /// The channel's mean over the frame before: where its noise is white, and a difference
    /// would have twice its variance.
    Mean,
}

/// One channel's coding state between samples.
#[derive(Clone, Copy, Debug)]
pub struct Channel {
    last: u16,
    mean: u16,
    predictor: Predictor,
    /// The Rice parameter: residuals' low `k` bits are written as they are.
    k: u32,
}

impl Channel {
    /// A channel before its first sample: predicted at `start` (mid-range), its residuals
    /// taken to be of a few counts.
    pub fn new(start: u16) -> Channel {
        Channel {
            last: start,
            mean: start,
            predictor: Predictor::Last,
            k: 4,
        }
    }

    /// Takes `value` as the channel's last sample without coding it (a frame stored raw).
    pub fn set_last(&mut self, value: u16) {
        self.last = value;
    }

    #[inline]
    fn prediction(&self) -> i32 {
        match self.predictor {
            Predictor::Last => self.last as i32,
            Predictor::Mean => self.mean as i32,
        }
    }
}

/// Bits a code of `mapped` takes with parameter `k`.
#[inline]
fn code_bits(mapped: u32, k: u32) -> u32 {
    let q = mapped >> k;
    if q < ESCAPE_ONES {
        q + 1 + k
    } else {
        ESCAPE_ONES + ESCAPED_BITS
    }
}

/// What choosing each channel's prediction and parameter takes, kept from frame to frame:
/// per channel, in arrays, so that each step over a row of samples is one over all channels.
#[derive(Default)]
pub struct Learner {
    total: Vec<u32>,
    cost_last: Vec<u32>,
    cost_mean: Vec<u32>,
    prev: Vec<i32>,
    mean: Vec<i32>,
    /// 1 where the channel is predicted from its last sample, 0 from its mean.
    from_last: Vec<i32>,
    k: Vec<u32>,
    /// Each channel's cost at `k - 1`, `k`, `k + 1` of its first guess `k`.
    cost_k: [Vec<u32>; 3],
}

/// `v` emptied and `n` zeros long.
fn zeros<T: Default + Clone>(v: &mut Vec<T>, n: usize) {
    v.clear();
    v.resize(n, T::default());
}

impl Learner {
    /// Chooses each channel's prediction and `k` for the next frame from this one's samples,
    /// `values[sample * channels + channel]`, the channels' samples before them being `before`:
    /// whichever prediction would have cost less, and the `k` that would have cost least with
    /// it. The decoder, having decoded the same samples, chooses the same.
    pub fn learn_frame(&mut self, channels: &mut [Channel], before: &[u16], values: &[u16]) {
        let n = channels.len();
        assert!(before.len() == n && n > 0 && values.len().is_multiple_of(n));
        let samples = (values.len() / n) as u32;
        assert!(
            samples > 0 && samples < 1 << 16,
            "a frame's samples fit the sums"
        );
        for v in [
            &mut self.total,
            &mut self.cost_last,
            &mut self.cost_mean,
            &mut self.k,
        ] {
            zeros(v, n);
        }
        for v in &mut self.cost_k {
            zeros(v, n);
        }
        self.prev.clear();
        self.prev.extend(before.iter().map(|&b| b as i32));
        for row in values.chunks_exact(n) {
            let sums = self.total.iter_mut().zip(&mut self.cost_last);
            for (((total, cost), prev), &v) in sums.zip(&mut self.prev).zip(row) {
                *total += v as u32;
                *cost += zigzag(v as i32 - *prev);
                *prev = v as i32;
            }
        }
        self.mean.clear();
        self.mean.extend(
            self.total
                .iter()
                .map(|&t| ((t + samples / 2) / samples) as i32),
        );
        for row in values.chunks_exact(n) {
            for ((cost, &mean), &v) in self.cost_mean.iter_mut().zip(&self.mean).zip(row) {
                *cost += zigzag(v as i32 - mean);
            }
        }
        self.from_last.clear();
        for c in 0..n {
            let last = self.cost_last[c] <= self.cost_mean[c];
            let sum = if last {
                self.cost_last[c]
            } else {
                self.cost_mean[c]
            };
            self.from_last.push(last as i32);
            // A first guess: the smallest k whose 2^k covers half the mean mapped residual
            // (LOCO-I's rule), at least 1 so that its neighbours are k - 1 and k + 1.
            let mut k = 1;
            while k < MAX_K - 1 && (samples << (k + 1)) < sum {
                k += 1;
            }
            self.k[c] = k;
        }
        self.prev.clear();
        self.prev.extend(before.iter().map(|&b| b as i32));
        let [c0, c1, c2] = &mut self.cost_k;
        for row in values.chunks_exact(n) {
            let state = self
                .prev
                .iter_mut()
                .zip(&self.mean)
                .zip(&self.from_last)
                .zip(&self.k);
            let costs = c0.iter_mut().zip(c1.iter_mut()).zip(c2.iter_mut());
            for (((((prev, &mean), &from_last), &k), ((c0, c1), c2)), &v) in
                state.zip(costs).zip(row)
            {
                let predicted = mean + from_last * (*prev - mean);
                let m = zigzag(v as i32 - predicted);
                *prev = v as i32;
                *c0 += code_bits(m, k - 1);
                *c1 += code_bits(m, k);
                *c2 += code_bits(m, k + 1);
            }
        }
        for (c, ch) in channels.iter_mut().enumerate() {
            let cost = [c0[c], c1[c], c2[c]];
            let best = (0..3).min_by_key(|&j| cost[j]).expect("three candidates") as u32;
            ch.k = self.k[c] + best - 1;
            ch.mean = self.mean[c] as u16;
            ch.predictor = if self.from_last[c] == 1 {
                Predictor::Last
            } else {
                Predictor::Mean
            };
        }
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

/// Writes `value`, the channel's next sample, in room for `MAX_SAMPLE_BITS`.
#[inline]
pub fn encode(ch: &mut Channel, value: u16, w: &mut BitWriter) {
    let mapped = zigzag(value as i32 - ch.prediction());
    let k = ch.k;
    let q = mapped >> k;
    if q < ESCAPE_ONES {
        // q ones, a zero, then the low k bits: one put of at most 15 + 1 + 14 bits.
        let unary = (1u32 << q) - 1;
        w.put(unary | ((mapped & ((1 << k) - 1)) << (q + 1)), q + 1 + k);
    } else {
        w.put((1u32 << ESCAPE_ONES) - 1, ESCAPE_ONES);
        w.put(value as u32, ESCAPED_BITS);
    }
    ch.last = value;
}

/// A decoded value no sample can have: a corrupt stream.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt;

impl From<OutOfBits> for Corrupt {
    fn from(_: OutOfBits) -> Corrupt {
        Corrupt
    }
}

/// Reads the channel's next sample, of at most `max` (the ADC's full scale).
#[inline]
pub fn decode(ch: &mut Channel, r: &mut BitReader, max: u16) -> Result<u16, Corrupt> {
    let k = ch.k;
    let window = r.peek();
    let q = (!window).trailing_zeros();
    let value = if q < ESCAPE_ONES {
        let mapped = (q << k) | ((window >> (q + 1)) as u32 & ((1 << k) - 1));
        r.skip(q + 1 + k);
        ch.prediction() + unzigzag(mapped)
    } else {
        r.skip(ESCAPE_ONES);
        r.get(ESCAPED_BITS) as i32
    };
    if !(0..=max as i32).contains(&value) {
        return Err(Corrupt);
    }
    ch.last = value as u16;
    Ok(value as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bits::PADDING;

    #[test]
    fn zigzag_is_its_own_inverse_and_small_first() {
        for r in -70_000..70_000 {
            assert_eq!(unzigzag(zigzag(r)), r);
        }
        assert_eq!([0, -1, 1, -2].map(zigzag), [0, 1, 2, 3]);
    }

    /// `values`, one channel's samples from mid-range in frames of 64, coded; and the decoded.
    fn round_trip(values: &[u16]) -> (usize, Vec<u16>) {
        let mut out = Vec::new();
        let mut w = BitWriter::new(&mut out);
        let mut ch = [Channel::new(8192)];
        let mut learner = Learner::default();
        let mut before = 8192;
        for frame in values.chunks(64) {
            w.reserve(frame.len() * MAX_SAMPLE_BITS);
            for &v in frame {
                encode(&mut ch[0], v, &mut w);
            }
            learner.learn_frame(&mut ch, &[before], frame);
            before = *frame.last().unwrap();
        }
        let bytes = w.finish();
        out.extend_from_slice(&[0; PADDING]);
        let mut r = BitReader::new(&out);
        let mut ch = [Channel::new(8192)];
        let mut back = Vec::new();
        let mut before = 8192;
        for frame in values.chunks(64) {
            let from = back.len();
            for _ in frame {
                back.push(decode(&mut ch[0], &mut r, u16::MAX).expect("a sample"));
            }
            learner.learn_frame(&mut ch, &[before], &back[from..]);
            before = *back.last().unwrap();
        }
        assert_eq!(r.finished(), Ok(()));
        (bytes, back)
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
        assert_eq!(round_trip(&values).1, values);
    }

    #[test]
    fn white_noise_is_predicted_from_its_mean_and_smooth_noise_from_the_sample_before() {
        // Uniform noise over 16 counts: 4 bits from the mean, ~4.5 from the sample before.
        let white: Vec<u16> = (0..4096u32)
            .map(|i| 8192 + (i.wrapping_mul(2_654_435_761) >> 28) as u16)
            .collect();
        let bits = round_trip(&white).0 as f64 * 8.0 / white.len() as f64;
        assert!(bits < 5.3, "white: {bits} bits a sample");
        // A slow ramp with a little noise: a few bits from the sample before, a dozen from a mean.
        let smooth: Vec<u16> = (0..4096u32)
            .map(|i| 4000 + (i % 2000) as u16 + (i.wrapping_mul(2_654_435_761) >> 31) as u16)
            .collect();
        let bits = round_trip(&smooth).0 as f64 * 8.0 / smooth.len() as f64;
        assert!(bits < 3.5, "smooth: {bits} bits a sample");
    }

    #[test]
    fn a_value_beyond_full_scale_is_corrupt() {
        let mut out = Vec::new();
        let mut w = BitWriter::new(&mut out);
        w.reserve(MAX_SAMPLE_BITS);
        encode(&mut Channel::new(8192), 16384, &mut w);
        w.finish();
        out.extend_from_slice(&[0; PADDING]);
        let mut r = BitReader::new(&out);
        assert_eq!(decode(&mut Channel::new(8192), &mut r, 16383), Err(Corrupt));
    }
}
