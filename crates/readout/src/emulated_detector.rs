//! What the emulator's detector sees, sample by sample, as a TPC's front end would show it:
//!
//! - every channel sits on a baseline of its own: induction wires (planes U and V) near the
//!   middle of the ADC's range, collection wires (plane X) low in it, as the front end sets them
//!   for bipolar and unipolar signals, each channel a few dozen counts off its plane's value;
//! - on top, Gaussian noise as ProtoDUNE-HD's raw WIBEth channels show it: each channel its own
//!   RMS, 8 to 14 counts of a 14-bit ADC (median 11; a quarter of that on a 12-bit one), and
//!   not white: the front end's shaping makes neighbouring samples alike, so that a channel's
//!   first differences are under half its RMS (about 4.4 bits a sample at 11 counts, as on the
//!   detector's raw data). The noise is white draws through a one-pole filter (`NOISE_CORRELATION`):
//!   the least predictable noise with that correlation, so it flatters no codec;
//! - and rarely (every `TRACK_PERIOD_S` of detector time) a charged track crosses the link's
//!   channels: a unipolar pulse on each collection channel, a bipolar one on each induction
//!   channel, a little later on each channel than on the one before.
//!
//! Channels are grouped by eights into planes U, V, X, U, ...: a band structure a physicist
//! reads at a glance in the baseline column of `snbuf show`. A photon detector's (DAPHNE)
//! channels are light sensors, not wires: each reads as a collection channel does.
//!
//! Every value is a function of (link, frame index, sample, channel), so a test can recompute
//! it. The emulator computes them once, into a bank per link (`framegen`): `quiet_frames`
//! quiet frames, taken in turn (their noise one periodic series, so the turn from the last to
//! the first is as smooth as any other), and the few frames a track spans, taken once a period.
//! It then replays the bank: only timestamps and sequence numbers change from one sending of a
//! frame to the next, so emulation costs a copy, not a computation. A compressor that looks
//! back far enough finds the bank's repeats, which the detector never sends: for measuring one,
//! `unrepeated_values` gives every frame noise of its own (the values a bank would hold, at a
//! computation a frame).

use snbuf_frames::adc::AdcShape;
use snbuf_frames::FrameType;

/// Emulated frames cycle through this many payloads (by frame index), so that neighbouring
/// frames differ while making one costs a copy, not a computation: the bank's quiet frames,
/// and for frame types without ADC values (custom ones) the variants of their pattern.
pub const PAYLOAD_VARIANTS: u64 = 16;

/// A channel's quiet samples in the bank, at least: enough for its noise's RMS and spectrum to
/// show (its runs of alike samples are ~17 long), whatever few samples a frame holds.
const QUIET_SAMPLES: u64 = 1024;

/// The detector behind one link's ADC values.
#[derive(Clone, Copy, Debug)]
pub struct EmulatedDetector {
    shape: AdcShape,
    /// A photon detector's channels (DAPHNE): each a light sensor, none a wire plane, so every
    /// channel reads as a collection one does (low baseline, unipolar pulses).
    light: bool,
    /// Frames from one track to the next: `TRACK_PERIOD_S` of the link's frames, and never
    /// fewer than the bank's quiet frames and the track's together.
    track_every_frames: u64,
    /// The bank's quiet frames: `PAYLOAD_VARIANTS`, or more where a frame holds few samples
    /// (`QUIET_SAMPLES`).
    quiet_frames: u64,
    /// The shaping filter's taps, newest draw first, scaled to unit variance.
    taps: [f64; NOISE_TAPS],
}

/// Which series of white draws a channel's noise is shaped from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NoiseSeries {
    /// The bank's quiet frames: one series, periodic over them.
    Quiet,
    /// The frames a track spans, in the bank.
    Track,
    /// Every frame its own (`unrepeated_values`).
    Unrepeated,
}

/// Which wire plane a channel reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    /// Induction planes: bipolar signals, baseline mid-range.
    U,
    V,
    /// Collection plane: unipolar signals, baseline low.
    X,
}

/// Each channel's noise RMS, in counts of a 14-bit ADC: from the lowest, over a spread, drawn
/// uniformly per channel (median 11 counts: ProtoDUNE-HD's raw WIBEth data, median channel RMS).
/// A 12-bit ADC's counts are four times as coarse: the same noise is a quarter as many counts.
const NOISE_RMS_LOWEST_14BIT: f64 = 8.0;
const NOISE_RMS_SPREAD_14BIT: f64 = 6.0;

/// The correlation of neighbouring samples of a channel's noise: its first differences have
/// sqrt(2 (1 - 0.892)) = 0.46 of its RMS, 5.1 counts at 11, whose entropy is ProtoDUNE-HD's
/// 4.4 bits a sample.
pub const NOISE_CORRELATION: f64 = 0.892;
/// Taps of the filter that shapes the noise: its impulse response `a^j`, cut where it has
/// fallen to a few percent (the variance it leaves out is under 0.5 %).
const NOISE_TAPS: usize = 28;

/// Channels per group of one plane.
const PLANE_GROUP: usize = 8;
/// Peak of a track's pulse, ADC counts above baseline (collection), or each lobe (induction):
/// a minimum-ionizing particle at a signal-to-noise ratio of ~30.
const COLLECTION_PEAK_ADC: f64 = 110.0;
const INDUCTION_PEAK_ADC: f64 = 55.0;
/// The pulse's width in time samples (its shaping time).
const PULSE_SIGMA_SAMPLES: f64 = 2.0;
/// Detector time from one track to the next: rare against the samples (a heat map of a
/// window shows each as a line of its own), frequent enough that every window holds some.
pub const TRACK_PERIOD_S: f64 = 0.25;
/// Where the track begins in its first frame, and how many samples it takes to cross every
/// channel of the link.
const TRACK_START_SAMPLES: f64 = 8.0;
const TRACK_CROSSING_SAMPLES: f64 = 32.0;

impl EmulatedDetector {
    /// The detector of a link of `t` whose frames are `step_ticks` apart (the frame type's own
    /// `ticks_per_frame`, or more for a sub-sampled link); None for frame types without ADC
    /// values.
    pub fn of(t: FrameType, step_ticks: u64) -> Option<EmulatedDetector> {
        let shape = AdcShape::of(t)?;
        let frames_per_s = snbuf_frames::clock::DetectorClock::of(t).frames_per_s(step_ticks);
        let mut d = EmulatedDetector {
            shape,
            light: t == FrameType::DaphneEthStream,
            track_every_frames: 0,
            quiet_frames: PAYLOAD_VARIANTS
                .max(QUIET_SAMPLES.div_ceil(shape.samples_per_frame as u64)),
            taps: noise_taps(),
        };
        d.track_every_frames =
            ((frames_per_s * TRACK_PERIOD_S) as u64).max(2 * d.quiet_frames + d.track_frames());
        // (A track's frames come between quiet ones: never two tracks' frames together.)
        assert!(d.track_every_frames > d.track_frames() && d.quiet_frames >= PAYLOAD_VARIANTS);
        Some(d)
    }

    /// Frames a track spans.
    pub fn track_frames(&self) -> u64 {
        let samples = TRACK_START_SAMPLES + TRACK_CROSSING_SAMPLES + 8.0 * PULSE_SIGMA_SAMPLES;
        (samples / self.shape.samples_per_frame as f64).ceil() as u64
    }

    /// The bank frame that frame number `frame_index` sends: quiet frames `0..quiet_frames()`
    /// in turn, or once every `track_every_frames` the track's frames after them. Within any
    /// `PAYLOAD_VARIANTS` consecutive frame indexes, no bank frame comes twice.
    pub fn bank_frame(&self, frame_index: u64) -> usize {
        let at = frame_index % self.track_every_frames;
        let bank_frame = if at < self.track_frames() {
            (self.quiet_frames + at) as usize
        } else {
            (frame_index % self.quiet_frames) as usize
        };
        debug_assert!(bank_frame < self.bank_frames(), "a frame of the bank");
        bank_frame
    }

    /// Frames in the bank: the quiet ones and the track's.
    pub fn bank_frames(&self) -> usize {
        (self.quiet_frames + self.track_frames()) as usize
    }

    /// The bank's quiet frames, sent in turn between tracks: `PAYLOAD_VARIANTS` (WIBEth, TDEEth,
    /// DAPHNE), or enough for `QUIET_SAMPLES` of a frame type with few samples a frame.
    pub fn quiet_frames(&self) -> usize {
        self.quiet_frames as usize
    }

    pub fn shape(&self) -> &AdcShape {
        &self.shape
    }

    pub fn plane(&self, channel: usize) -> Plane {
        if self.light {
            return Plane::X;
        }
        match (channel / PLANE_GROUP) % 3 {
            0 => Plane::U,
            1 => Plane::V,
            _ => Plane::X,
        }
    }

    /// The ADC's full scale: 4096 (12 bits) or 16384 (14 bits).
    fn full_scale(&self) -> f64 {
        (1u32 << self.shape.bits()) as f64
    }

    /// Channel `channel`'s baseline on link `link`, in ADC counts.
    pub fn baseline(&self, link: u32, channel: usize) -> f64 {
        let full = self.full_scale();
        let plane = match self.plane(channel) {
            Plane::U | Plane::V => 0.5 * full,
            Plane::X => 0.12 * full,
        };
        // Up to +-40 counts of a 12-bit ADC (+-160 of a 14-bit one): each channel its own.
        let off = (unit(hash(&[1, link as u64, channel as u64])) - 0.5) * 80.0 * full / 4096.0;
        let baseline = (plane + off).round();
        debug_assert!(
            baseline > 0.0 && baseline < full,
            "a baseline the ADC reads"
        );
        baseline
    }

    /// Channel `channel`'s noise RMS on link `link`, in ADC counts.
    pub fn noise_rms(&self, link: u32, channel: usize) -> f64 {
        let counts_14bit = NOISE_RMS_LOWEST_14BIT
            + NOISE_RMS_SPREAD_14BIT * unit(hash(&[2, link as u64, channel as u64]));
        counts_14bit * self.full_scale() / 16384.0
    }

    /// The value the emulator puts in channel `channel` of time sample `sample` of link
    /// `link`'s frame number `frame_index` (its timestamp over the link's frame step).
    pub fn adc(&self, link: u32, frame_index: u64, sample: usize, channel: usize) -> u16 {
        self.bank_adc(link, self.bank_frame(frame_index), sample, channel)
    }

    /// The value in channel `channel` of time sample `sample` of bank frame `bank_frame`.
    pub fn bank_adc(&self, link: u32, bank_frame: usize, sample: usize, channel: usize) -> u16 {
        assert!(sample < self.shape.samples_per_frame && channel < self.shape.channels);
        assert!(bank_frame < self.bank_frames());
        let spf = self.shape.samples_per_frame as u64;
        let (series, t, track) = match (bank_frame as u64).checked_sub(self.quiet_frames) {
            Some(k) => {
                let t = k * spf + sample as u64;
                (NoiseSeries::Track, t, self.track(t as usize, channel))
            }
            None => (
                NoiseSeries::Quiet,
                bank_frame as u64 * spf + sample as u64,
                0.0,
            ),
        };
        let noise: f64 = (0..NOISE_TAPS)
            .map(|j| self.taps[j] * self.white(link, channel, series, t as i64 - j as i64))
            .sum();
        self.value(link, channel, noise, track)
    }

    /// A value on `channel`'s baseline, of `noise` (unit variance) and `signal` (counts).
    fn value(&self, link: u32, channel: usize, noise: f64, signal: f64) -> u16 {
        let v = self.baseline(link, channel) + noise * self.noise_rms(link, channel) + signal;
        v.round().clamp(0.0, self.full_scale() - 1.0) as u16
    }

    /// White draw `t` of `series` of a channel: the quiet series repeats over the bank's quiet
    /// frames, so their noise is periodic and its turn smooth.
    fn white(&self, link: u32, channel: usize, series: NoiseSeries, t: i64) -> f64 {
        let t = match series {
            NoiseSeries::Quiet => {
                t.rem_euclid(self.quiet_frames as i64 * self.shape.samples_per_frame as i64)
            }
            NoiseSeries::Track | NoiseSeries::Unrepeated => t,
        } as u64;
        gaussian(hash(&[3, series as u64, link as u64, channel as u64, t]))
    }

    /// Every value of link `link`'s frame `frame_index` with noise of its own, never a bank's:
    /// `out[sample * channels + channel]`, the track as the bank has it. For measuring a
    /// compressor, which would find a bank's repeats; a frame costs a computation (about
    /// 1.4 draws and `NOISE_TAPS` multiplications a value).
    pub fn unrepeated_values(&self, link: u32, frame_index: u64, out: &mut [u16]) {
        let spf = self.shape.samples_per_frame as u64;
        let at = frame_index % self.track_every_frames;
        let track = (at < self.track_frames()).then_some(at as usize);
        let first = frame_index.wrapping_mul(spf) as i64;
        self.frame_values(link, NoiseSeries::Unrepeated, first, track, out);
    }

    /// Every value of bank frame `bank_frame`, as `bank_adc` has them, in `unrepeated_values`'
    /// order: the bank made at a computation a frame, not a value.
    pub fn bank_values(&self, link: u32, bank_frame: usize, out: &mut [u16]) {
        assert!(bank_frame < self.bank_frames());
        let spf = self.shape.samples_per_frame;
        match bank_frame.checked_sub(self.quiet_frames()) {
            Some(k) => self.frame_values(link, NoiseSeries::Track, (k * spf) as i64, Some(k), out),
            None => self.frame_values(
                link,
                NoiseSeries::Quiet,
                (bank_frame * spf) as i64,
                None,
                out,
            ),
        }
    }

    /// One frame's values whose first sample's noise is draw `first` of `series`, with the
    /// track's frame `track` on top if any.
    fn frame_values(
        &self,
        link: u32,
        series: NoiseSeries,
        first: i64,
        track: Option<usize>,
        out: &mut [u16],
    ) {
        let (spf, channels) = (self.shape.samples_per_frame, self.shape.channels);
        assert_eq!(out.len(), spf * channels, "one frame's values");
        let mut white = vec![0.0f64; spf + NOISE_TAPS - 1];
        for c in 0..channels {
            // Draws first - NOISE_TAPS + 1 ..= first + spf - 1, oldest first.
            for (i, w) in white.iter_mut().enumerate() {
                let t = first.wrapping_add(i as i64 - (NOISE_TAPS as i64 - 1));
                *w = self.white(link, c, series, t);
            }
            for s in 0..spf {
                let newest = s + NOISE_TAPS - 1;
                let noise: f64 = (0..NOISE_TAPS)
                    .map(|j| self.taps[j] * white[newest - j])
                    .sum();
                let signal = track.map_or(0.0, |k| self.track(k * spf + s, c));
                out[s * channels + c] = self.value(link, c, noise, signal);
            }
        }
    }

    /// The track's signal on `channel` at time sample `t` from its first frame's start: it
    /// peaks on channel c at `TRACK_START_SAMPLES + c * slope`.
    fn track(&self, t: usize, channel: usize) -> f64 {
        let slope = TRACK_CROSSING_SAMPLES / self.shape.channels as f64;
        let x = (t as f64 - (TRACK_START_SAMPLES + channel as f64 * slope)) / PULSE_SIGMA_SAMPLES;
        if x.abs() > 4.0 {
            return 0.0;
        }
        let g = (-0.5 * x * x).exp();
        match self.plane(channel) {
            Plane::X => COLLECTION_PEAK_ADC * g,
            // The derivative of the Gaussian, scaled so that each lobe peaks at the amplitude
            // (x e^(-x^2/2) peaks at 1/sqrt(e)).
            Plane::U | Plane::V => -INDUCTION_PEAK_ADC * x * g * 1.648_721_270_700_128,
        }
    }

    /// Every value of sample `sample` of bank frame `bank_frame`, one per channel.
    pub fn bank_sample(&self, link: u32, bank_frame: usize, sample: usize) -> Vec<u16> {
        (0..self.shape.channels)
            .map(|c| self.bank_adc(link, bank_frame, sample, c))
            .collect()
    }

    /// Every value of sample `sample` of link `link`'s frame `frame_index`, one per channel.
    pub fn sample(&self, link: u32, frame_index: u64, sample: usize) -> Vec<u16> {
        self.bank_sample(link, self.bank_frame(frame_index), sample)
    }
}

/// A 64-bit hash of `words` (splitmix64 over each): the emulator's only source of randomness,
/// so that every value is the same wherever and whenever it is computed.
fn hash(words: &[u64]) -> u64 {
    let mut h = 0x9E37_79B9_7F4A_7C15u64;
    for &w in words {
        h ^= w;
        h = h.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h = z ^ (z >> 31);
    }
    h
}

/// The shaping filter: `NOISE_CORRELATION^j` for draw j back, scaled so that the noise has unit
/// variance.
fn noise_taps() -> [f64; NOISE_TAPS] {
    let mut taps = [0.0; NOISE_TAPS];
    for (j, t) in taps.iter_mut().enumerate() {
        *t = NOISE_CORRELATION.powi(j as i32);
    }
    let norm = taps.iter().map(|t| t * t).sum::<f64>().sqrt();
    let taps = taps.map(|t| t / norm);
    // Unit power: the noise's RMS is the channel's `noise_rms`.
    debug_assert!((taps.iter().map(|t| t * t).sum::<f64>() - 1.0).abs() < 1e-9);
    taps
}

/// A number in [0, 1) from a hash.
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal number from a hash: the sum of four uniforms (each 16 bits of it), centred
/// and scaled to unit variance (Irwin-Hall: within 0.3% of a Gaussian's quantiles to 3 sigma).
fn gaussian(h: u64) -> f64 {
    let sum: f64 = (0..4)
        .map(|i| ((h >> (16 * i)) & 0xFFFF) as f64 / 65536.0)
        .sum();
    (sum - 2.0) * 3.0f64.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Channel `c`'s mean and RMS about its baseline over the quiet frames, and its largest
    /// departure from its baseline over the track's.
    fn stats(d: &EmulatedDetector, link: u32, c: usize) -> (f64, f64, f64) {
        let spf = d.shape().samples_per_frame;
        let (mut quiet, mut peak) = (Vec::new(), 0.0f64);
        for f in 0..d.bank_frames() {
            for s in 0..spf {
                let x = d.bank_adc(link, f, s, c) as f64 - d.baseline(link, c);
                if f < d.quiet_frames() {
                    quiet.push(x);
                } else {
                    peak = peak.max(x.abs());
                }
            }
        }
        let n = quiet.len() as f64;
        let mean = quiet.iter().sum::<f64>() / n;
        let rms = (quiet.iter().map(|x| x * x).sum::<f64>() / n).sqrt();
        (d.baseline(link, c) + mean, rms, peak)
    }

    #[test]
    fn channels_have_their_own_baselines_the_detectors_noise_and_a_rare_track() {
        for t in [
            FrameType::WibEth,
            FrameType::TdeEth,
            FrameType::ProtoDuneWib,
            FrameType::Wib2,
            FrameType::DaphneEthStream,
        ] {
            let d = EmulatedDetector::of(t, t.ticks_per_frame()).unwrap();
            let full = (1u32 << d.shape().bits()) as f64;
            // ProtoDUNE-HD's median channel RMS, about 11 counts of a 14-bit ADC.
            let per_14bit = full / 16384.0;
            let mut baselines = Vec::new();
            let mut noise = Vec::new();
            for c in 0..d.shape().channels {
                let (mean, rms, peak) = stats(&d, 3, c);
                // On its baseline, within the noise's error of the mean over the quiet frames
                // (whose samples are alike in runs: (1 + a) / (1 - a) of them count as one).
                let quiet = (d.quiet_frames() * d.shape().samples_per_frame) as f64;
                let a = NOISE_CORRELATION;
                let independent = quiet * (1.0 - a) / (1.0 + a);
                assert!(
                    (mean - d.baseline(3, c)).abs() < 0.5 + 4.0 * rms / independent.sqrt(),
                    "{t} c{c}: mean {mean}"
                );
                // The channel's own noise, as the detector's.
                let in_14bit = rms / per_14bit;
                // (Measured over the bank's ~60 independent runs of samples: to ~10 %.)
                assert!((6.0..17.0).contains(&in_14bit), "{t} c{c}: noise {rms}");
                noise.push(in_14bit);
                assert!(
                    (rms / d.noise_rms(3, c) - 1.0).abs() < 0.3,
                    "{t} c{c}: {rms} vs {}",
                    d.noise_rms(3, c)
                );
                // The track: far above the noise, on every channel.
                assert!(peak > 40.0, "{t} c{c}: no pulse (largest departure {peak})");
                baselines.push(d.baseline(3, c));
            }
            noise.sort_by(f64::total_cmp);
            let median = noise[noise.len() / 2];
            assert!((9.0..=13.0).contains(&median), "{t}: median noise {median}");
            // Collection low, induction mid-range (a light sensor's few channels read as
            // collection); channels differ within a plane.
            if t == FrameType::DaphneEthStream {
                assert!(baselines.iter().all(|&b| b < 0.2 * full), "{t}");
            } else {
                assert!(
                    baselines[16] < 0.2 * full && baselines[0] > 0.4 * full,
                    "{t}"
                );
            }
            assert_ne!(baselines[0], baselines[1], "{t}");
            // Rare: a track a quarter of a second, on the detector's clock.
            let per_s = snbuf_frames::clock::DetectorClock::of(t).frames_per_s(t.ticks_per_frame());
            let tracks = (0..per_s as u64)
                .filter(|&i| d.bank_frame(i) == d.quiet_frames())
                .count();
            assert!(
                (4..=5).contains(&tracks),
                "{t}: {tracks} tracks in a second"
            );
        }
    }

    /// The median over channels of (first differences' RMS) / (RMS about the baseline), the
    /// values `values(frame)` gives in `unrepeated_values`' order, over `frames` frames.
    fn difference_ratio(
        d: &EmulatedDetector,
        link: u32,
        frames: usize,
        values: impl Fn(usize, &mut [u16]),
    ) -> f64 {
        let (spf, channels) = (d.shape().samples_per_frame, d.shape().channels);
        let mut series = vec![Vec::new(); channels];
        let mut v = vec![0u16; spf * channels];
        for f in 0..frames {
            values(f, &mut v);
            for (i, &x) in v.iter().enumerate() {
                series[i % channels].push(x as f64 - d.baseline(link, i % channels));
            }
        }
        let rms = |x: &[f64]| (x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64).sqrt();
        let mut ratios: Vec<f64> = series
            .iter()
            .map(|x| {
                let diff: Vec<f64> = x.windows(2).map(|w| w[1] - w[0]).collect();
                rms(&diff) / rms(x)
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios[channels / 2]
    }

    #[test]
    fn the_noise_is_shaped_as_the_front_ends_first_differences_under_half_the_rms() {
        // sqrt(2 (1 - 0.892)) = 0.46: ProtoDUNE-HD's 4.4 bits a sample of first difference at
        // 11 counts RMS. The bank's quiet frames in turn, across the turn from last to first,
        // and unrepeated frames across their boundaries.
        let d = EmulatedDetector::of(FrameType::WibEth, 32 * 64).unwrap();
        let bank = difference_ratio(&d, 3, 2 * PAYLOAD_VARIANTS as usize, |f, v| {
            d.bank_values(3, f % PAYLOAD_VARIANTS as usize, v)
        });
        assert!((0.40..0.52).contains(&bank), "bank: {bank}");
        let fresh = difference_ratio(&d, 3, 40, |f, v| d.unrepeated_values(3, 1000 + f as u64, v));
        assert!((0.40..0.52).contains(&fresh), "unrepeated: {fresh}");
        // White noise would have sqrt(2).
    }

    #[test]
    fn a_frame_made_at_once_holds_the_values_made_one_by_one() {
        for t in [
            FrameType::WibEth,
            FrameType::ProtoDuneWib,
            FrameType::DaphneEthStream,
        ] {
            let d = EmulatedDetector::of(t, t.ticks_per_frame()).unwrap();
            let (spf, channels) = (d.shape().samples_per_frame, d.shape().channels);
            let mut v = vec![0u16; spf * channels];
            for f in [0, 3, d.quiet_frames() - 1, d.bank_frames() - 1] {
                d.bank_values(2, f, &mut v);
                for s in (0..spf).step_by(spf.div_ceil(4)) {
                    for c in (0..channels).step_by(7) {
                        assert_eq!(
                            v[s * channels + c],
                            d.bank_adc(2, f, s, c),
                            "{t} {f} {s} {c}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn unrepeated_frames_never_repeat_and_keep_the_detectors_shape() {
        let d = EmulatedDetector::of(FrameType::WibEth, 32 * 64).unwrap();
        let n = 64 * 64;
        let (mut a, mut b, mut bank) = (vec![0u16; n], vec![0u16; n], vec![0u16; n]);
        d.unrepeated_values(1, 77, &mut a);
        d.unrepeated_values(1, 77 + PAYLOAD_VARIANTS, &mut b);
        d.bank_values(1, d.bank_frame(77), &mut bank);
        assert_ne!(a, b, "frames a bank's period apart differ");
        assert_ne!(a, bank);
        d.unrepeated_values(1, 77, &mut b);
        assert_eq!(a, b, "a function of link and frame");
        // On the bank's baselines: each channel's mean over the frame within four times its
        // error (64 samples alike in runs, (1 + a) / (1 - a) of them counting as one).
        let k = (1.0 + NOISE_CORRELATION) / (1.0 - NOISE_CORRELATION);
        for c in 0..64 {
            let mean = a[c..].iter().step_by(64).map(|&x| x as f64).sum::<f64>() / 64.0;
            let error = d.noise_rms(1, c) * (k / 64.0).sqrt();
            assert!(
                (mean - d.baseline(1, c)).abs() < 4.0 * error,
                "c{c}: {mean}"
            );
        }
    }

    #[test]
    fn values_are_a_function_of_link_frame_sample_and_channel() {
        let d = EmulatedDetector::of(FrameType::WibEth, 32 * 64).unwrap();
        assert_eq!(d.adc(1, 5, 7, 9), d.adc(1, 5, 7, 9));
        assert_eq!(d.adc(1, 50, 7, 9), d.adc(1, 50 + PAYLOAD_VARIANTS, 7, 9));
        let other_link: Vec<u16> = (0..64).map(|c| d.adc(2, 5, 7, c)).collect();
        assert_ne!(d.sample(1, 5, 7), other_link);
    }

    #[test]
    fn no_bank_frame_comes_twice_within_a_run_of_variants() {
        // A sender may hand out PAYLOAD_VARIANTS frames before the first is overwritten.
        for (t, step) in [(FrameType::WibEth, 2048), (FrameType::ProtoDuneWib, 13_920)] {
            let d = EmulatedDetector::of(t, step).unwrap();
            for start in 0..3 * d.track_every_frames {
                let mut seen = std::collections::HashSet::new();
                for i in start..start + PAYLOAD_VARIANTS {
                    assert!(seen.insert(d.bank_frame(i)), "{t}: frame {i}");
                }
            }
        }
    }
}
