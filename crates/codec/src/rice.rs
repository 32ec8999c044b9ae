//! The channels' samples over a frame: each predicted (from the channel's previous sample, or
//! from its baseline where its noise is white), the residual Rice-coded with a parameter `k`
//! that follows the channel's own noise. Prediction and `k` are chosen for a frame from the
//! channel's samples in the frame before (`Channels::learn_frame`), as the decoder can choose
//! them too, so nothing is stored for them.
//!
//! The work is split by what can run side by side: a row of samples (one time sample of every
//! channel) becomes residuals, and residuals a row of samples, in one step over all channels
//! (`residuals`, `restore`: the compiler's vector code); the bits are the frame's (a code's
//! quotient `mapped >> k` in `unary`, its low `k` bits in `low_bits`). A residual too large for
//! its code (a step of thousands of counts: a corrupt or saturated sample, a track's edge) is
//! escaped and its sample written whole.

/// Largest parameter: a residual's low bits of a 14-bit sample.
pub const MAX_K: u32 = 14;
/// A code read that was an escape: this bit, over the sample's value (no mapped residual of a
/// 16-bit sample reaches it).
pub const ESCAPED: u32 = 1 << 31;

/// Every channel's coding state for a frame, channel by channel in arrays (so that a step over
/// a row is one over all channels).
#[derive(Clone)]
pub struct Channels {
    /// The channel's mean over the frame before (its baseline).
    mean: Vec<i32>,
    /// 1 where the channel is predicted from its sample before (its noise smooth, as the
    /// detector's front end shapes it), 0 from its mean (white noise, where a difference would
    /// have twice its variance).
    from_last: Vec<i32>,
    /// The Rice parameter: a residual's low `k` bits are written as they are.
    k: Vec<u32>,
    /// Scratch of `learn_frame`.
    total: Vec<u32>,
    cost_last: Vec<u32>,
    cost_mean: Vec<u32>,
}

impl Channels {
    /// `n` channels before their first sample: predicted at `start` (mid-range), their
    /// residuals taken to be of a few counts.
    pub fn new(n: usize, start: u16) -> Channels {
        assert!(n > 0, "a frame has channels");
        Channels {
            mean: vec![start as i32; n],
            from_last: vec![1; n],
            k: vec![4; n],
            total: vec![0; n],
            cost_last: vec![0; n],
            cost_mean: vec![0; n],
        }
    }

    pub fn len(&self) -> usize {
        self.k.len()
    }

    /// Channel `c`'s parameter.
    #[cfg(test)]
    pub fn k(&self, c: usize) -> u32 {
        self.k[c]
    }

    /// Every channel's parameter, in order.
    #[inline]
    pub fn ks(&self) -> &[u32] {
        &self.k
    }

    /// Chooses each channel's prediction and `k` for the next frame from this one's samples,
    /// `values[sample * channels + channel]`, the channels' samples before them being `before`:
    /// whichever prediction would have cost less (the sample before, or the channel's mean
    /// over the frame before), and LOCO-I's `k` for it: the smallest whose 2^k covers half the
    /// mean mapped residual, within a few hundredths of a bit of the best on the detector's
    /// noise. The decoder, having decoded the same samples, chooses the same.
    #[inline(always)]
    pub fn learn_frame(&mut self, before: &[u16], values: &[u16]) {
        let n = self.len();
        assert!(before.len() == n && values.len().is_multiple_of(n));
        self.start_learning();
        let mut prev = before;
        for row in values.chunks_exact(n) {
            let sums = self.total.iter_mut().zip(&mut self.cost_last);
            let sums = sums.zip(&mut self.cost_mean).zip(&self.mean);
            for ((((total, last), mean_cost), &mean), (&v, &p)) in sums.zip(row.iter().zip(prev)) {
                let v = v as i32;
                *total += v as u32;
                *last += zigzag(v - p as i32);
                *mean_cost += zigzag(v - mean);
            }
            prev = row;
        }
        self.finish_learning(values.len() / n);
    }

    /// Before a frame's rows are learnt from (`learn_frame`, `code_row`).
    #[inline(always)]
    pub fn start_learning(&mut self) {
        for v in [&mut self.total, &mut self.cost_last, &mut self.cost_mean] {
            v.fill(0);
        }
    }

    /// After a frame's `samples` rows were learnt from: the next frame's predictions and `k`s.
    #[inline(always)]
    pub fn finish_learning(&mut self, samples: usize) {
        assert!(
            samples > 0 && samples < 1 << 16,
            "a frame's samples fit the sums"
        );
        let samples = samples as u32;
        for c in 0..self.len() {
            let from_last = self.cost_last[c] <= self.cost_mean[c];
            let sum = if from_last {
                self.cost_last[c]
            } else {
                self.cost_mean[c]
            };
            self.k[c] = rice_k(samples, sum);
            self.from_last[c] = from_last as i32;
            self.mean[c] = ((self.total[c] + samples / 2) / samples) as i32;
        }
    }

    /// The encoder's pass over one row, `prev` the row before: each channel's mapped residual
    /// (its sample less its prediction, zigzagged) and its Rice quotient (at most `ESCAPE`, the
    /// unary codes' escape), and the row learnt from as
    /// `learn_frame` learns (between `start_learning` and `finish_learning`); the escapes.
    #[inline(always)]
    pub fn code_row<const ESCAPE: u32>(
        &mut self,
        prev: &[u16],
        row: &[u16],
        mapped: &mut [u32],
        q: &mut [u8],
    ) -> u32 {
        let n = self.k.len();
        let (prev, row, mapped, q) = (&prev[..n], &row[..n], &mut mapped[..n], &mut q[..n]);
        let (mean, from_last, k) = (&self.mean[..n], &self.from_last[..n], &self.k[..n]);
        let total = &mut self.total[..n];
        let (cost_last, cost_mean) = (&mut self.cost_last[..n], &mut self.cost_mean[..n]);
        let mut escapes = 0;
        for c in 0..n {
            let v = row[c] as i32;
            let (from_prev, from_mean) = (zigzag(v - prev[c] as i32), zigzag(v - mean[c]));
            total[c] += v as u32;
            cost_last[c] += from_prev;
            cost_mean[c] += from_mean;
            let m = if from_last[c] != 0 {
                from_prev
            } else {
                from_mean
            };
            mapped[c] = m;
            let quotient = (m >> k[c]).min(ESCAPE);
            q[c] = quotient as u8;
            escapes += (quotient == ESCAPE) as u32;
        }
        escapes
    }

    /// The row whose codes were `codes` (as `read` gives them), the row before being `prev`;
    /// an error where a value is beyond `max` (the ADC's full scale): a corrupt stream.
    #[inline]
    pub fn restore(
        &self,
        prev: &[u16],
        codes: &[u32],
        row: &mut [u16],
        max: u16,
    ) -> Result<(), Corrupt> {
        let mut beyond = 0u32;
        let state = self.mean.iter().zip(&self.from_last);
        for (((&mean, &from_last), (&p, &code)), v) in
            state.zip(prev.iter().zip(codes)).zip(row.iter_mut())
        {
            let predicted = mean + from_last * (p as i32 - mean);
            // Without a branch, so that the loop runs on vectors: all ones where escaped.
            let escaped = ((code >> 31) as i32).wrapping_neg();
            let value = ((code & 0xffff) as i32 & escaped)
                | ((predicted + unzigzag(code & !ESCAPED)) & !escaped);
            // (A negative value is beyond too, as an unsigned one.)
            beyond |= (value as u32 > max as u32) as u32;
            *v = value as u16;
        }
        if beyond != 0 {
            return Err(Corrupt);
        }
        Ok(())
    }
}

/// LOCO-I's `k` for `samples` mapped residuals of sum `sum`: the smallest (at most `MAX_K`)
/// with `samples << (k + 1) >= sum`, from where their highest bits are (no division).
#[inline(always)]
fn rice_k(samples: u32, sum: u32) -> u32 {
    debug_assert!(samples > 0 && samples < 1 << 16);
    if sum <= samples << 1 {
        return 0;
    }
    // `samples << g` has `sum`'s highest bit: `samples << (g + 1)` is more than `sum`, and
    // `samples << g` may be enough.
    let g = samples.leading_zeros() - sum.leading_zeros();
    (g - ((samples << g) >= sum) as u32).min(MAX_K)
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

/// A decoded value no sample can have, or a stream that does not end where its codes do: a
/// corrupt chunk.
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt;

impl From<crate::bits::OutOfBits> for Corrupt {
    fn from(_: crate::bits::OutOfBits) -> Corrupt {
        Corrupt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rice_k_is_the_smallest_k_whose_range_covers_the_mean() {
        let by_search = |samples: u32, sum: u32| {
            let mut k = 0;
            while k < MAX_K && (samples << (k + 1)) < sum {
                k += 1;
            }
            k
        };
        for samples in [1u32, 2, 3, 12, 63, 64, 65, 1000, 65_535] {
            for sum in (0..70_000).chain(
                (0..64).map(|i| samples.saturating_mul(1 << (i % 20)).saturating_add(i / 20)),
            ) {
                assert_eq!(
                    rice_k(samples, sum),
                    by_search(samples, sum),
                    "{samples}, {sum}"
                );
            }
        }
    }

    #[test]
    fn zigzag_is_its_own_inverse_and_small_first() {
        for r in -70_000..70_000 {
            assert_eq!(unzigzag(zigzag(r)), r);
        }
        assert_eq!([0, -1, 1, -2].map(zigzag), [0, 1, 2, 3]);
    }

    /// `values`, one channel's samples from mid-range in frames of 64, through the codes a
    /// frame stores (a mapped residual, or an escape over the value): the bits they take and
    /// the samples restored from them.
    fn round_trip(values: &[u16]) -> (usize, Vec<u16>) {
        const ESCAPE: u32 = crate::unary::ESCAPE;
        let mut bits = 0;
        let mut codes = Vec::new();
        let mut ch = Channels::new(1, 8192);
        let mut prev = 8192;
        let (mut m, mut quotient) = ([0u32], [0u8]);
        for frame in values.chunks(64) {
            let before = prev;
            for &v in frame {
                let escapes = ch.code_row::<ESCAPE>(&[prev], &[v], &mut m, &mut quotient);
                let (k, q) = (ch.k(0), quotient[0] as u32);
                assert_eq!(q, (m[0] >> k).min(ESCAPE));
                assert_eq!(escapes, (q == ESCAPE) as u32);
                if q < ESCAPE {
                    codes.push(m[0]);
                    bits += q + 1 + k;
                } else {
                    codes.push(ESCAPED | v as u32);
                    bits += ESCAPE + 1 + k + 16;
                }
                prev = v;
            }
            ch.learn_frame(&[before], frame);
        }
        let mut ch = Channels::new(1, 8192);
        let mut back = Vec::new();
        let mut prev = 8192;
        for (frame, codes) in values.chunks(64).zip(codes.chunks(64)) {
            let (from, before) = (back.len(), prev);
            for &code in codes {
                let mut v = [0u16];
                ch.restore(&[prev], &[code], &mut v, u16::MAX)
                    .expect("a sample");
                back.push(v[0]);
                prev = v[0];
            }
            assert_eq!(back[from..], *frame);
            ch.learn_frame(&[before], &back[from..]);
        }
        (bits.div_ceil(8) as usize, back)
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
        let ch = Channels::new(1, 8192);
        let mut v = [0u16];
        // 16384 written whole: an escape; and a residual that takes the sample above 14 bits.
        let codes = [ESCAPED | 16384, zigzag(16384 - 8192)];
        for code in codes {
            assert_eq!(ch.restore(&[8192], &[code], &mut v, 16383), Err(Corrupt));
        }
        assert_eq!(
            ch.restore(&[8192], &[ESCAPED | 16383], &mut v, 16383),
            Ok(())
        );
        assert_eq!(v, [16383]);
    }
}
