//! What the emulator's detector sees, sample by sample, as a TPC's front end would show it:
//!
//! - every channel sits on a baseline of its own: induction wires (planes U and V) near the
//!   middle of the ADC's range, collection wires (plane X) low in it, as the front end sets them
//!   for bipolar and unipolar signals, each channel a few dozen counts off its plane's value;
//! - on top, Gaussian noise as ProtoDUNE-HD's raw WIBEth channels show it: each channel its own
//!   RMS, 8 to 14 counts of a 14-bit ADC (median 11; a quarter of that on a 12-bit one);
//! - and rarely (every `TRACK_PERIOD_S` of detector time) a charged track crosses the link's
//!   channels: a unipolar pulse on each collection channel, a bipolar one on each induction
//!   channel, a little later on each channel than on the one before.
//!
//! Channels are grouped by eights into planes U, V, X, U, ...: a band structure a physicist
//! reads at a glance in the baseline column of `snbuf show`. A photon detector's (DAPHNE)
//! channels are light sensors, not wires: each reads as a collection channel does.
//!
//! Every value is a function of (link, frame index, sample, channel), so a test can recompute
//! it. The emulator computes them once, into a bank per link (`framegen`): `PAYLOAD_VARIANTS`
//! quiet frames, taken in turn, and the few frames a track spans, taken once a period. It then
//! replays the bank: only timestamps and sequence numbers change from one sending of a frame to
//! the next, so emulation costs a copy, not a computation.

use snbuf_frames::adc::AdcShape;
use snbuf_frames::FrameType;

/// Emulated frames cycle through this many payloads (by frame index), so that neighbouring
/// frames differ while making one costs a copy, not a computation: the bank's quiet frames,
/// and for frame types without ADC values (custom ones) the variants of their pattern.
pub const PAYLOAD_VARIANTS: u64 = 16;

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
        };
        d.track_every_frames =
            ((frames_per_s * TRACK_PERIOD_S) as u64).max(2 * PAYLOAD_VARIANTS + d.track_frames());
        Some(d)
    }

    /// Frames a track spans.
    pub fn track_frames(&self) -> u64 {
        let samples = TRACK_START_SAMPLES + TRACK_CROSSING_SAMPLES + 8.0 * PULSE_SIGMA_SAMPLES;
        (samples / self.shape.samples_per_frame as f64).ceil() as u64
    }

    /// The bank frame that frame number `frame_index` sends: quiet frames `0..PAYLOAD_VARIANTS`
    /// in turn, or once every `track_every_frames` the track's frames after them. Within any
    /// `PAYLOAD_VARIANTS` consecutive frame indexes, no bank frame comes twice.
    pub fn bank_frame(&self, frame_index: u64) -> usize {
        let at = frame_index % self.track_every_frames;
        if at < self.track_frames() {
            (PAYLOAD_VARIANTS + at) as usize
        } else {
            (frame_index % PAYLOAD_VARIANTS) as usize
        }
    }

    /// Frames in the bank: the quiet ones and the track's.
    pub fn bank_frames(&self) -> usize {
        (PAYLOAD_VARIANTS + self.track_frames()) as usize
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
        (plane + off).round()
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
        let noise = gaussian(hash(&[
            3,
            link as u64,
            bank_frame as u64,
            sample as u64,
            channel as u64,
        ]));
        let track = match (bank_frame as u64).checked_sub(PAYLOAD_VARIANTS) {
            Some(k) => self.track(k as usize * self.shape.samples_per_frame + sample, channel),
            None => 0.0,
        };
        let v = self.baseline(link, channel) + noise * self.noise_rms(link, channel) + track;
        v.round().clamp(0.0, self.full_scale() - 1.0) as u16
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
                if f < PAYLOAD_VARIANTS as usize {
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
                // On its baseline, within the noise's error of the mean over the quiet frames.
                let quiet = (PAYLOAD_VARIANTS as usize * d.shape().samples_per_frame) as f64;
                assert!(
                    (mean - d.baseline(3, c)).abs() < 0.5 + 4.0 * rms / quiet.sqrt(),
                    "{t} c{c}: mean {mean}"
                );
                // The channel's own noise, as the detector's.
                let in_14bit = rms / per_14bit;
                assert!((7.0..15.0).contains(&in_14bit), "{t} c{c}: noise {rms}");
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
                .filter(|&i| d.bank_frame(i) == PAYLOAD_VARIANTS as usize)
                .count();
            assert!(
                (4..=5).contains(&tracks),
                "{t}: {tracks} tracks in a second"
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
