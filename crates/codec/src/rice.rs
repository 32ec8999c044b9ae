//! The channels' samples over a frame: each predicted (from the channel's previous sample, or
//! from its baseline where its noise is white), the residual Rice-coded with a parameter `k`
//! that follows the channel's own noise. Prediction and `k` are chosen for a frame from the
//! channel's samples in the frame before (`Channels::learn_frame`), as the decoder can choose
//! them too, so nothing is stored for them.
//!
//! The work is split by what can run side by side: a row of samples (one time sample of every
//! channel) becomes residuals, and residuals a row of samples, in one step over all channels
//! (`code_row`; `restore_frame`, sixteen channels at a time down the rows); the bits are the frame's (a code's
//! quotient `mapped >> k` in `unary`, its low `k` bits in `low_bits`). A residual too large for
//! its code (a step of thousands of counts: a corrupt or saturated sample, a track's edge) is
//! escaped and its sample written whole.

use crate::kernel::InstructionSet;

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
    /// All ones where the channel is predicted from its sample before (its noise smooth, as
    /// the detector's front end shapes it), 0 from its mean (white noise, where a difference
    /// would have twice its variance): a mask, so that a prediction is chosen without a branch
    /// or a multiply.
    from_last: Vec<i32>,
    /// The Rice parameter: a residual's low `k` bits are written as they are.
    k: Vec<u32>,
    /// What a frame's samples sum to, as `learn_frame`, `code_row` and `restore_frame` sum
    /// them for the next frame's choice.
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
            from_last: vec![-1; n],
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
            self.from_last[c] = -(from_last as i32);
            self.mean[c] = ((self.total[c] + samples / 2) / samples) as i32;
        }
    }

    /// The encoder's pass over one row, `prev` the row before: each channel's mapped residual
    /// (its sample less its prediction, zigzagged) and its Rice quotient (at most `ESCAPE`, the
    /// unary codes' escape), and the row learnt from as
    /// `learn_frame` learns (between `start_learning` and `finish_learning`). (Its escapes are
    /// counted by the caller, over the frame's quotients at once, not a sum across a row each.)
    #[inline(always)]
    pub fn code_row<const ESCAPE: u32>(
        &mut self,
        prev: &[u16],
        row: &[u16],
        mapped: &mut [u32],
        q: &mut [u8],
    ) {
        let n = self.k.len();
        let (prev, row, mapped, q) = (&prev[..n], &row[..n], &mut mapped[..n], &mut q[..n]);
        let (mean, from_last, k) = (&self.mean[..n], &self.from_last[..n], &self.k[..n]);
        let total = &mut self.total[..n];
        let (cost_last, cost_mean) = (&mut self.cost_last[..n], &mut self.cost_mean[..n]);
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
            q[c] = (m >> k[c]).min(ESCAPE) as u8;
        }
    }

    /// The decoder's pass over a frame: its values, `values[sample * channels + channel]`,
    /// from their codes (as `read` gives them, in that order), the channels' samples before
    /// them being `before`; learnt from as the encoder learnt from them (`code_row`), for the
    /// next frame. An error where a value is beyond `max` (the ADC's full scale): a corrupt
    /// stream.
    ///
    /// Sixteen channels at a time down the frame's rows (each channel's state held in
    /// registers over the frame, rather than loaded and stored for every row), the channels
    /// left over one at a time.
    #[inline(always)]
    pub fn restore_frame(
        &mut self,
        kernel: InstructionSet,
        before: &[u16],
        codes: &[u32],
        values: &mut [u16],
        max: u16,
    ) -> Result<(), Corrupt> {
        const LANES: usize = 16;
        let n = self.len();
        assert!(
            before.len() == n && codes.len().is_multiple_of(n) && values.len() == codes.len(),
            "whole rows of the channels' codes and values"
        );
        let blocked = n / LANES * LANES;
        let mut beyond = 0;
        for c in (0..blocked).step_by(LANES) {
            beyond |= match kernel {
                // SAFETY: the kernel is only chosen where the CPU has what it is compiled for;
                // channels c..c + 16 are there.
                #[cfg(target_arch = "x86_64")]
                InstructionSet::Avx512 => unsafe {
                    self.restore_sixteen_avx512(c, before, codes, values, max)
                },
                InstructionSet::Portable => {
                    self.restore_channels::<LANES>(c, before, codes, values, max)
                }
            };
        }
        for c in blocked..n {
            beyond |= self.restore_channels::<1>(c, before, codes, values, max);
        }
        self.finish_learning(codes.len() / n);
        if beyond != 0 {
            return Err(Corrupt);
        }
        Ok(())
    }

    /// `restore_frame`'s work on channels `first..first + L`: non-zero where a value is beyond
    /// `max`.
    #[inline(always)]
    fn restore_channels<const L: usize>(
        &mut self,
        first: usize,
        before: &[u16],
        codes: &[u32],
        values: &mut [u16],
        max: u16,
    ) -> u32 {
        let n = self.len();
        let lanes = first..first + L;
        let mean: [i32; L] = self.mean[lanes.clone()].try_into().expect("L lanes");
        let from_last: [i32; L] = self.from_last[lanes.clone()].try_into().expect("L lanes");
        let mut prev: [i32; L] = std::array::from_fn(|l| before[first + l] as i32);
        let (mut total, mut cost_last, mut cost_mean) = ([0u32; L], [0u32; L], [0u32; L]);
        let mut beyond = [0u32; L];
        for (codes, row) in codes.chunks_exact(n).zip(values.chunks_exact_mut(n)) {
            let codes: &[u32; L] = codes[lanes.clone()].try_into().expect("L lanes");
            let row: &mut [u16; L] = (&mut row[lanes.clone()]).try_into().expect("L lanes");
            for l in 0..L {
                let (p, m) = (prev[l], mean[l]);
                let predicted = m + ((p - m) & from_last[l]);
                // Without a branch, so that the loop runs on vectors: all ones where escaped.
                let code = codes[l];
                let escaped = ((code >> 31) as i32).wrapping_neg();
                let value = ((code & 0xffff) as i32 & escaped)
                    | ((predicted + unzigzag(code & !ESCAPED)) & !escaped);
                // (A negative value is beyond too, as an unsigned one.)
                beyond[l] |= (value as u32 > max as u32) as u32;
                row[l] = value as u16;
                // As the encoder learnt from the value it coded (a corrupt one fails the
                // frame), and the sample the next row is predicted from.
                let v = value & 0xffff;
                total[l] += v as u32;
                cost_last[l] += zigzag(v - p);
                cost_mean[l] += zigzag(v - m);
                prev[l] = v;
            }
        }
        self.total[lanes.clone()].copy_from_slice(&total);
        self.cost_last[lanes.clone()].copy_from_slice(&cost_last);
        self.cost_mean[lanes].copy_from_slice(&cost_mean);
        beyond.iter().fold(0, |a, &b| a | b)
    }

    /// `restore_channels::<16>` in AVX-512's registers, which the compiler does not keep its
    /// arrays in: the same values, learnt from the same way.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn restore_sixteen_avx512(
        &mut self,
        first: usize,
        before: &[u16],
        codes: &[u32],
        values: &mut [u16],
        max: u16,
    ) -> u32 {
        use std::arch::x86_64::*;
        let n = self.len();
        let lanes = first..first + 16;
        let load = |v: &[i32]| {
            let v = &v[lanes.clone()];
            // SAFETY: 16 lanes.
            unsafe { _mm512_loadu_si512(v.as_ptr() as *const _) }
        };
        let (mean, from_last) = (load(&self.mean), load(&self.from_last));
        let before = &before[lanes.clone()];
        // SAFETY: 16 samples.
        let mut prev =
            _mm512_cvtepu16_epi32(unsafe { _mm256_loadu_si256(before.as_ptr() as *const _) });
        let zero = _mm512_setzero_si512();
        let (mut total, mut cost_last, mut cost_mean) = (zero, zero, zero);
        let mut beyond: __mmask16 = 0;
        let (full_scale, low16) = (_mm512_set1_epi32(max as i32), _mm512_set1_epi32(0xffff));
        let residual_bits = _mm512_set1_epi32(!ESCAPED as i32);
        let one = _mm512_set1_epi32(1);
        let zigzag =
            |r: __m512i| _mm512_xor_si512(_mm512_slli_epi32::<1>(r), _mm512_srai_epi32::<31>(r));
        for (codes, row) in codes.chunks_exact(n).zip(values.chunks_exact_mut(n)) {
            let (codes, row) = (&codes[lanes.clone()], &mut row[lanes.clone()]);
            // SAFETY: 16 codes.
            let code = unsafe { _mm512_loadu_si512(codes.as_ptr() as *const _) };
            let escaped = _mm512_cmplt_epi32_mask(code, zero);
            let predicted = _mm512_add_epi32(
                mean,
                _mm512_and_si512(_mm512_sub_epi32(prev, mean), from_last),
            );
            let m = _mm512_and_si512(code, residual_bits);
            let residual = _mm512_xor_si512(
                _mm512_srli_epi32::<1>(m),
                _mm512_sub_epi32(zero, _mm512_and_si512(m, one)),
            );
            let value = _mm512_mask_blend_epi32(
                escaped,
                _mm512_add_epi32(predicted, residual),
                _mm512_and_si512(code, low16),
            );
            // (A negative value is beyond too, as an unsigned one.)
            beyond |= _mm512_cmpgt_epu32_mask(value, full_scale);
            // SAFETY: room for 16 samples.
            unsafe {
                _mm256_storeu_si256(row.as_mut_ptr() as *mut _, _mm512_cvtepi32_epi16(value))
            };
            let v = _mm512_and_si512(value, low16);
            total = _mm512_add_epi32(total, v);
            cost_last = _mm512_add_epi32(cost_last, zigzag(_mm512_sub_epi32(v, prev)));
            cost_mean = _mm512_add_epi32(cost_mean, zigzag(_mm512_sub_epi32(v, mean)));
            prev = v;
        }
        let store = |to: &mut [u32], v: __m512i| {
            let to = &mut to[lanes.clone()];
            // SAFETY: 16 lanes.
            unsafe { _mm512_storeu_si512(to.as_mut_ptr() as *mut _, v) };
        };
        store(&mut self.total, total);
        store(&mut self.cost_last, cost_last);
        store(&mut self.cost_mean, cost_mean);
        beyond as u32
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
                ch.code_row::<ESCAPE>(&[prev], &[v], &mut m, &mut quotient);
                let (k, q) = (ch.k(0), quotient[0] as u32);
                assert_eq!(q, (m[0] >> k).min(ESCAPE));
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
            let mut learnt = ch.clone();
            let mut v = vec![0u16; codes.len()];
            ch.restore_frame(InstructionSet::Portable, &[prev], codes, &mut v, u16::MAX)
                .expect("samples");
            back.extend_from_slice(&v);
            prev = *v.last().expect("a sample");
            assert_eq!(back[from..], *frame);
            // Learnt as it was restored, as from the whole frame after.
            learnt.learn_frame(&[before], &back[from..]);
            assert_eq!(ch.k, learnt.k);
            assert_eq!((&ch.mean, &ch.from_last), (&learnt.mean, &learnt.from_last));
        }
        (bits.div_ceil(8) as usize, back)
    }

    /// Frames of 18 channels (a sixteen and two more), coded row by row, restored by each
    /// kernel: the same samples, and the same choice learnt for the next frame as the encoder's.
    #[test]
    fn the_decoder_learns_each_frame_as_the_encoder_did_whatever_the_kernel() {
        const ESCAPE: u32 = crate::unary::ESCAPE;
        let (n, rows) = (18, 64);
        let mut x = 0x2545_f491u32;
        let mut noise = |spread: u32| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % spread) as i32 - (spread / 2) as i32
        };
        for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
            let (mut encoder, mut decoder) = (Channels::new(n, 8192), Channels::new(n, 8192));
            let mut before = vec![8192u16; n];
            for frame in 0..4 {
                // Smooth channels, white ones, a step that escapes.
                let mut values = vec![0u16; n * rows];
                for (i, v) in values.iter_mut().enumerate() {
                    let (c, s) = (i % n, i / n);
                    let base = 3000 + 400 * c as i32 + if c % 3 == 0 { 3 * s as i32 } else { 0 };
                    let step = if (c + s + frame) % 97 == 0 { 9000 } else { 0 };
                    *v = (base + step + noise(if c % 2 == 0 { 9 } else { 41 })) as u16;
                }
                let (mut mapped, mut q) = (vec![0u32; n], vec![0u8; n]);
                let mut codes = Vec::new();
                encoder.start_learning();
                let mut prev = before.clone();
                for row in values.chunks_exact(n) {
                    encoder.code_row::<ESCAPE>(&prev, row, &mut mapped, &mut q);
                    for ((&m, &q), &v) in mapped.iter().zip(&q).zip(row) {
                        codes.push(if q as u32 == ESCAPE {
                            ESCAPED | v as u32
                        } else {
                            m
                        });
                    }
                    prev = row.to_vec();
                }
                encoder.finish_learning(rows);
                let mut back = vec![0u16; n * rows];
                decoder
                    .restore_frame(kernel, &before, &codes, &mut back, 16383)
                    .expect("samples");
                assert_eq!(back, values, "{kernel}, frame {frame}");
                assert_eq!(decoder.k, encoder.k, "{kernel}, frame {frame}");
                assert_eq!(decoder.mean, encoder.mean, "{kernel}, frame {frame}");
                assert_eq!(
                    decoder.from_last, encoder.from_last,
                    "{kernel}, frame {frame}"
                );
                before.copy_from_slice(&values[n * (rows - 1)..]);
            }
            assert!(
                encoder.from_last.contains(&0) && encoder.from_last.contains(&-1),
                "both predictions chosen"
            );
        }
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
        for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
            let restored = |codes: &[u32], channels: usize| {
                let mut ch = Channels::new(channels, 8192);
                let mut v = vec![0u16; codes.len()];
                let before = vec![8192; channels];
                ch.restore_frame(kernel, &before, codes, &mut v, 16383)
                    .map(|()| v)
            };
            // 16384 written whole: an escape; and a residual that takes a sample above 14 bits.
            for code in [ESCAPED | 16384, zigzag(16384 - 8192)] {
                assert_eq!(restored(&[code], 1), Err(Corrupt));
                // In a frame's first row of many, in a channel of sixteen and in one after.
                for c in [3, 17] {
                    let mut codes = vec![ESCAPED | 16383; 18 * 4];
                    codes[c] = code;
                    assert_eq!(restored(&codes, 18), Err(Corrupt), "{kernel}: channel {c}");
                }
            }
            assert_eq!(restored(&[ESCAPED | 16383], 1), Ok(vec![16383]));
        }
    }
}
