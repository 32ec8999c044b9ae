//! One link of a burst, read once in time order and reduced to what the page draws, in memory
//! that does not grow with the burst: frames recorded per time bin and the gaps between them;
//! for frame types with ADC values, per channel a histogram of its values (for the median and
//! RMS) and, per screen column, the smallest and largest value (so that decimating to the
//! screen never hides a spike); and per channel where its largest excursion was.

use serde::Serialize;
use snbuf_frames::adc::AdcShape;
use snbuf_frames::FrameLayout;

/// ADC values have 14 bits: one histogram bin each.
const ADC_VALUES: usize = 1 << snbuf_frames::adc::ADC_BITS;

/// The trigger window on the detector's clock, and how finely the page resolves it.
#[derive(Clone, Copy, Debug)]
pub struct PageWindow {
    pub start: u64,
    pub end: u64,
    pub trigger: u64,
    pub clock_hz: u64,
    /// Screen columns of the ADC displays.
    pub columns: usize,
    /// Bins of the frames-recorded timeline.
    pub bins: usize,
}

impl PageWindow {
    // Timestamps count from the epoch (~1e17 ticks): more than an f64 holds exactly, so every
    // float here is relative to the window's start, where it is exact to a fraction of a tick.

    /// Seconds from the trigger to `rel` ticks after the window's start.
    pub fn seconds(&self, rel: f64) -> f64 {
        (rel + (self.start as i128 - self.trigger as i128) as f64) / self.clock_hz as f64
    }

    /// Seconds from the trigger to `tick`.
    pub fn seconds_at(&self, tick: u64) -> f64 {
        (tick as i128 - self.trigger as i128) as f64 / self.clock_hz as f64
    }

    /// Ticks from the window's start to `s` seconds from the trigger.
    pub fn rel_at(&self, s: f64) -> f64 {
        s * self.clock_hz as f64 - (self.start as i128 - self.trigger as i128) as f64
    }

    fn span(&self) -> u64 {
        self.end - self.start
    }

    /// The column (of `n`) holding `rel` ticks after the start, clamped to the window.
    fn column_of(&self, rel: f64, n: usize) -> usize {
        ((rel.max(0.0) * n as f64 / self.span() as f64) as usize).min(n - 1)
    }

    /// The tick where column (or bin) `i` of `n` starts.
    pub fn edge(&self, i: usize, n: usize) -> u64 {
        self.start + (self.span() as u128 * i as u128 / n as u128) as u64
    }

    /// Seconds from the trigger to the middle of column `i` of `n`.
    pub fn column_s(&self, i: usize, n: usize) -> f64 {
        let (a, b) = (
            self.edge(i, n) - self.start,
            self.edge(i + 1, n) - self.start,
        );
        self.seconds((a + b) as f64 / 2.0)
    }
}

/// Frames a link lacks between two times.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Gap {
    pub from_s: f64,
    pub to_s: f64,
    pub frames: u64,
}

/// One bin of the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Bin {
    pub from_s: f64,
    pub to_s: f64,
    pub expected: u64,
    pub recorded: u64,
}

/// A channel's summary over the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChannelStats {
    pub channel: usize,
    pub samples: u64,
    /// The median ADC value (numpy's: the middle two averaged when the count is even).
    pub baseline: f64,
    /// Root mean square of the values about their mean (ADC counts).
    pub rms: f64,
    /// The largest excursion from the baseline (signed) and when it was, s from the trigger.
    pub peak: f64,
    pub peak_s: f64,
    /// "ok", "dead" (RMS below `DEAD_RMS`, or no samples) or "noisy" (RMS above `NOISY_FACTOR`
    /// times the link's median RMS).
    pub flag: &'static str,
}

/// A channel whose values hardly move is not reading the detector.
pub const DEAD_RMS: f64 = 0.5;
/// A channel noisier than this many times the link's typical channel.
pub const NOISY_FACTOR: f64 = 3.0;

/// The ADC part of a link's view.
#[derive(Clone, Debug, Serialize)]
pub struct AdcView {
    pub ticks_per_sample: f64,
    pub channels: Vec<ChannelStats>,
    /// `heat[channel][column]`: of the column's values, the one farthest from the channel's
    /// baseline, minus the baseline (NaN where the column has no samples).
    pub heat: Vec<Vec<f64>>,
}

/// Reduces one link's frames, fed in time order.
pub struct LinkAccumulator {
    window: PageWindow,
    layout: FrameLayout,
    step: u64,
    shape: Option<AdcShape>,
    recorded: Vec<u64>,
    gaps: Vec<(u64, u64)>,
    first: Option<u64>,
    last: Option<u64>,
    frames: u64,
    hist: Vec<u64>,
    min: Vec<u16>,
    max: Vec<u16>,
    /// Per channel: (smallest value, its tick), (largest value, its tick), ticks after the start.
    extremes: Vec<((u16, f64), (u16, f64))>,
    sample: Vec<u16>,
}

impl LinkAccumulator {
    pub fn new(
        window: PageWindow,
        layout: FrameLayout,
        step: u64,
        shape: Option<AdcShape>,
    ) -> Self {
        assert!(window.end > window.start && window.columns > 0 && window.bins > 0);
        let ch = shape.map_or(0, |s| s.channels);
        LinkAccumulator {
            window,
            layout,
            step: step.max(1),
            shape,
            recorded: vec![0; window.bins],
            gaps: Vec::new(),
            first: None,
            last: None,
            frames: 0,
            hist: vec![0; ch * ADC_VALUES],
            min: vec![u16::MAX; ch * window.columns],
            max: vec![0; ch * window.columns],
            extremes: vec![((u16::MAX, 0.0), (0, 0.0)); ch],
            sample: vec![0; ch],
        }
    }

    /// Bytes this link's reduction holds, whatever the burst's size.
    pub fn memory_bytes(&self) -> usize {
        self.hist.len() * 8 + self.min.len() * 4 + self.extremes.len() * 24
    }

    /// One frame, in time order, its timestamp inside the window.
    pub fn frame(&mut self, frame: &[u8]) {
        let ts = self.layout.timestamp(frame);
        let w = self.window;
        debug_assert!((w.start..w.end).contains(&ts));
        if let Some(last) = self.last {
            // Saturating: a stream's clock may sit at the end of its range.
            if ts > last.saturating_add(self.step) {
                self.gaps.push((last.saturating_add(self.step), ts));
            }
        } else {
            self.first = Some(ts);
        }
        self.last = Some(ts);
        self.frames += 1;
        let rel = (ts - w.start) as f64;
        self.recorded[w.column_of(rel, w.bins)] += 1;
        let Some(shape) = self.shape else { return };
        let n = shape.channels;
        for s in 0..shape.samples_per_frame {
            shape.sample(frame, s, &mut self.sample);
            let (num, den) = shape.sample_offset_ticks(s);
            let t = rel + num as f64 / den as f64;
            // Column-major, so that one sample's channels are side by side in memory.
            let at = w.column_of(t, w.columns) * n;
            let (min, max) = (&mut self.min[at..at + n], &mut self.max[at..at + n]);
            for (ch, &v) in self.sample.iter().enumerate() {
                self.hist[ch * ADC_VALUES + v as usize] += 1;
                // A channel's extreme is first a column's: look at it only when the column's
                // changes, which after the first few samples is rare.
                if v < min[ch] {
                    min[ch] = v;
                    if v < self.extremes[ch].0 .0 {
                        self.extremes[ch].0 = (v, t);
                    }
                }
                if v > max[ch] {
                    max[ch] = v;
                    if v > self.extremes[ch].1 .0 {
                        self.extremes[ch].1 = (v, t);
                    }
                }
            }
        }
    }

    /// Frames on the link's grid (every `step` ticks, through `phase`) in `[from, to)`.
    fn grid(&self, from: u64, to: u64, phase: u64) -> u64 {
        let step = self.step as u128;
        let first_at = |t: u64| {
            let ahead = (phase as u128 % step + step - t as u128 % step) % step;
            t.saturating_add(ahead as u64)
        };
        let (a, b) = (first_at(from), first_at(to));
        b.saturating_sub(a) / self.step
    }

    /// The timeline, the gaps (the window's edges included) and the frame count.
    pub fn timeline(&self) -> (Vec<Bin>, Vec<Gap>, u64, u64) {
        let w = self.window;
        let phase = self.first.unwrap_or(w.start);
        let mut bins = Vec::with_capacity(w.bins);
        let mut expected_total = 0;
        for i in 0..w.bins {
            let (a, b) = (w.edge(i, w.bins), w.edge(i + 1, w.bins));
            let expected = self.grid(a, b, phase);
            expected_total += expected;
            bins.push(Bin {
                from_s: w.seconds_at(a),
                to_s: w.seconds_at(b),
                expected,
                recorded: self.recorded[i],
            });
        }
        let mut spans = Vec::new();
        match (self.first, self.last) {
            (Some(first), Some(last)) => {
                spans.push((w.start, first));
                spans.extend(self.gaps.iter().copied());
                spans.push((last.saturating_add(self.step), w.end));
            }
            _ => spans.push((w.start, w.end)),
        }
        let gaps = spans
            .into_iter()
            .filter_map(|(a, b)| {
                let frames = self.grid(a, b, phase);
                (b > a && frames > 0).then(|| Gap {
                    from_s: w.seconds_at(a),
                    to_s: w.seconds_at(b),
                    frames,
                })
            })
            .collect();
        (bins, gaps, self.frames, expected_total)
    }

    /// The ADC view, if the frame type has one.
    pub fn adc(&self) -> Option<AdcView> {
        let shape = self.shape?;
        let mut channels: Vec<ChannelStats> = (0..shape.channels)
            .map(|ch| self.channel_stats(ch))
            .collect();
        let mut rms: Vec<f64> = channels
            .iter()
            .filter(|c| c.samples > 0)
            .map(|c| c.rms)
            .collect();
        rms.sort_by(f64::total_cmp);
        let typical = rms.get(rms.len() / 2).copied().unwrap_or(0.0);
        for c in &mut channels {
            c.flag = if c.samples == 0 || c.rms < DEAD_RMS {
                "dead"
            } else if c.rms > NOISY_FACTOR * typical.max(DEAD_RMS) {
                "noisy"
            } else {
                "ok"
            };
        }
        let heat = channels
            .iter()
            .map(|stats| {
                let (low, high) = self.envelope(stats.channel, stats.baseline);
                low.iter()
                    .zip(&high)
                    .map(|(&a, &c)| if c.abs() >= a.abs() { c } else { a })
                    .collect()
            })
            .collect();
        Some(AdcView {
            ticks_per_sample: shape.ticks_per_sample(),
            channels,
            heat,
        })
    }

    /// Channel `ch`'s smallest and largest value in each column, minus `baseline` (NaN where a
    /// column has no sample).
    pub fn envelope(&self, ch: usize, baseline: f64) -> (Vec<f64>, Vec<f64>) {
        let n = self.shape.map_or(0, |s| s.channels);
        (0..self.window.columns)
            .map(|col| {
                let (mn, mx) = (self.min[col * n + ch], self.max[col * n + ch]);
                if mn > mx {
                    (f64::NAN, f64::NAN) // no sample in this column
                } else {
                    (mn as f64 - baseline, mx as f64 - baseline)
                }
            })
            .unzip()
    }

    fn channel_stats(&self, ch: usize) -> ChannelStats {
        let h = &self.hist[ch * ADC_VALUES..(ch + 1) * ADC_VALUES];
        let n: u64 = h.iter().sum();
        let sum: f64 = h
            .iter()
            .enumerate()
            .map(|(v, &k)| v as f64 * k as f64)
            .sum();
        // The value of 0-based rank `r` in sorted order; the median as numpy takes it (the mean
        // of the two middle values when the count is even).
        let at_rank = |r: u64| {
            let mut seen = 0;
            for (v, &k) in h.iter().enumerate() {
                seen += k;
                if seen > r {
                    return v as f64;
                }
            }
            0.0
        };
        let median = match n {
            0 => 0.0,
            n if n % 2 == 1 => at_rank(n / 2),
            n => (at_rank(n / 2 - 1) + at_rank(n / 2)) / 2.0,
        };
        let mean = if n > 0 { sum / n as f64 } else { 0.0 };
        // About the mean, in a second pass over the histogram: the mean of the squares less the
        // square of the mean loses the noise (a few counts) in the baseline's (thousands).
        let var = if n > 0 {
            h.iter()
                .enumerate()
                .map(|(v, &k)| (v as f64 - mean).powi(2) * k as f64)
                .sum::<f64>()
                / n as f64
        } else {
            0.0
        };
        let ((lo, lo_t), (hi, hi_t)) = self.extremes[ch];
        let (peak, peak_t) = if n == 0 {
            (0.0, self.window.rel_at(0.0))
        } else if hi as f64 - median >= median - lo as f64 {
            (hi as f64 - median, hi_t)
        } else {
            (lo as f64 - median, lo_t)
        };
        ChannelStats {
            channel: ch,
            samples: n,
            baseline: median,
            rms: var.sqrt(),
            peak,
            peak_s: self.window.seconds(peak_t),
            flag: "ok",
        }
    }
}
