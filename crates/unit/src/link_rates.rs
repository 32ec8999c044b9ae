//! Each link measured, not assumed: its data clock (detector ticks per wall-clock second of its
//! newest frame) and its byte rate over the last few seconds, against what the unit was
//! configured for. A stream whose clock is not the frame type's (a wrong `--frame`, a sender on
//! another clock model) or whose rate is not the configured one (a latency buffer sized for
//! 20 MB/s taking 220 MB/s holds a tenth of its seconds) is said once in the log, and shown in
//! `status`, the live view and the metrics while it lasts.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use snbuf_readout::LatencyBuffer;

use crate::config::RecordConfig;
use crate::error::RecordError;

/// How far a measured ratio may be from 1 before it is a mismatch: a few percent, beyond the
/// jitter of a second's sampling and of a sender's batching.
pub const MISMATCH_TOLERANCE: f64 = 0.05;
/// The measurement covers about this much wall-clock time, and says nothing until it covers
/// `MIN_SPAN`.
pub const MEASURE_OVER: Duration = Duration::from_secs(5);
pub const MIN_SPAN: Duration = Duration::from_secs(2);
/// How often the links are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// One link at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkSample {
    /// The newest frame's timestamp, if the link has sent any.
    pub newest_timestamp: Option<u64>,
    /// Frames the link has put in its buffer so far.
    pub frames: u64,
}

/// What one link was measured at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinkRate {
    pub link: u32,
    /// Detector ticks per wall-clock second of the link's newest frame, over `span_s`.
    pub ticks_per_s: Option<f64>,
    /// `ticks_per_s` over the frame type's clock: 1 for a detector on its own clock.
    pub clock_ratio: Option<f64>,
    /// Bytes per second into the link's buffer, and that over the configured rate.
    pub bytes_per_s: Option<f64>,
    pub rate_ratio: Option<f64>,
    /// Wall-clock seconds the figures above cover.
    pub span_s: f64,
    /// Detector seconds from the oldest to the newest frame the buffer holds now.
    pub buffer_span_s: Option<f64>,
    /// Whether either ratio is off by more than `MISMATCH_TOLERANCE`.
    pub mismatch: bool,
}

impl LinkRate {
    /// What is wrong, in a sentence, if anything.
    pub fn complaint(&self, clock_hz: u64, configured_bytes_per_s: f64) -> Option<String> {
        if !self.mismatch {
            return None;
        }
        let mut parts = Vec::new();
        if let (Some(r), Some(t)) = (self.clock_ratio, self.ticks_per_s) {
            if off(r) {
                parts.push(format!(
                    "its timestamps advance {:.4} M ticks per second, {:.3}x the {:.1} MHz clock of its frame type",
                    t / 1e6,
                    r,
                    clock_hz as f64 / 1e6
                ));
            }
        }
        if let (Some(r), Some(b)) = (self.rate_ratio, self.bytes_per_s) {
            if off(r) {
                parts.push(format!(
                    "it brings {:.1} MB/s, {:.2}x the {:.1} MB/s the unit was configured for{}",
                    b / 1e6,
                    r,
                    configured_bytes_per_s / 1e6,
                    match self.buffer_span_s {
                        Some(s) => format!(" (its buffer holds {s:.2} s of the detector's clock)"),
                        None => String::new(),
                    }
                ));
            }
        }
        // A ratio is measured with the figure it is of (`RateMeter::rates`).
        debug_assert!(!parts.is_empty(), "a mismatch says what is off");
        Some(format!("link {}: {}", self.link, parts.join("; ")))
    }
}

fn off(ratio: f64) -> bool {
    debug_assert!(ratio.is_finite(), "a ratio over seconds of samples");
    (ratio - 1.0).abs() > MISMATCH_TOLERANCE
}

/// The samples of the last `MEASURE_OVER`, and the measurement from them.
pub struct RateMeter {
    clock_hz: u64,
    frame_bytes: u64,
    configured_bytes_per_s: f64,
    samples: VecDeque<(Instant, Vec<LinkSample>)>,
}

impl RateMeter {
    pub fn new(clock_hz: u64, frame_bytes: u64, configured_bytes_per_s: f64) -> RateMeter {
        assert!(
            clock_hz > 0 && frame_bytes > 0,
            "a clock that ticks, frames of bytes"
        );
        RateMeter {
            clock_hz,
            frame_bytes,
            configured_bytes_per_s,
            samples: VecDeque::new(),
        }
    }

    /// Adds a sample of every link taken at `at`, forgetting those older than `MEASURE_OVER`.
    pub fn add(&mut self, at: Instant, links: Vec<LinkSample>) {
        debug_assert!(
            self.samples
                .back()
                .is_none_or(|(_, l)| l.len() == links.len()),
            "every sample has every link"
        );
        self.samples.push_back((at, links));
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| at.saturating_duration_since(*t) > MEASURE_OVER)
        {
            self.samples.pop_front();
        }
    }

    /// Each link's measurement (no ratios until the samples span `MIN_SPAN`, nor for a link
    /// that has sent nothing).
    pub fn rates(&self) -> Vec<LinkRate> {
        let (Some((t0, first)), Some((t1, last))) = (self.samples.front(), self.samples.back())
        else {
            return Vec::new();
        };
        let span = t1.saturating_duration_since(*t0);
        assert_eq!(first.len(), last.len(), "every sample has every link");
        first
            .iter()
            .zip(last)
            .enumerate()
            .map(|(i, (a, b))| {
                let mut r = LinkRate {
                    link: i as u32,
                    span_s: span.as_secs_f64(),
                    ..LinkRate::default()
                };
                if span < MIN_SPAN || b.newest_timestamp.is_none() {
                    return r;
                }
                let s = span.as_secs_f64();
                let ticks = match (a.newest_timestamp, b.newest_timestamp) {
                    (Some(x), Some(y)) => y.saturating_sub(x),
                    _ => return r,
                };
                let bytes = b.frames.saturating_sub(a.frames) * self.frame_bytes;
                r.ticks_per_s = Some(ticks as f64 / s);
                r.clock_ratio = Some(ticks as f64 / s / self.clock_hz as f64);
                r.bytes_per_s = Some(bytes as f64 / s);
                debug_assert!(
                    r.clock_ratio.is_some_and(f64::is_finite)
                        && r.bytes_per_s.is_some_and(f64::is_finite),
                    "figures over at least MIN_SPAN"
                );
                if self.configured_bytes_per_s > 0.0 {
                    r.rate_ratio = Some(bytes as f64 / s / self.configured_bytes_per_s);
                }
                r.mismatch = r.clock_ratio.is_some_and(off) || r.rate_ratio.is_some_and(off);
                r
            })
            .collect()
    }
}

/// How many of a link's newest frames its step is measured over.
const STEP_SAMPLE_FRAMES: u64 = 256;

/// The step between a link's frames as its stream has them: the smallest rise from one
/// timestamp to the next among its newest `STEP_SAMPLE_FRAMES` frames (a lost frame only makes a
/// rise larger). None before two frames, or if the link overwrote them while they were read.
pub(crate) fn measured_step_of(b: &LatencyBuffer) -> Option<u64> {
    let w = b.written();
    let from = w.saturating_sub(STEP_SAMPLE_FRAMES).max(b.oldest());
    let mut step: Option<u64> = None;
    let mut last: Option<u64> = None;
    for seq in from..w {
        let ts = b.timestamp_at(seq).ok()?;
        if let Some(l) = last.filter(|&l| ts > l) {
            step = Some(step.map_or(ts - l, |s| s.min(ts - l)));
        }
        last = Some(ts);
    }
    debug_assert!(step.is_none_or(|s| s > 0), "a step is some ticks");
    step
}

/// Ticks between a link's frames (`Unit::frame_step_ticks`): the configured rate's for the
/// emulator; for a stream from the network, the finest step any link's buffer shows, the frame
/// type's own until frames have come.
pub(crate) fn stream_step_ticks(config: &RecordConfig, buffers: &[LatencyBuffer]) -> u64 {
    let step = match config.source {
        crate::config::Source::Emulated { .. } => config.frame_step_ticks(),
        crate::config::Source::Udp(_) => buffers
            .iter()
            .filter_map(measured_step_of)
            .min()
            .unwrap_or(config.frame_type.ticks_per_frame()),
    };
    assert!(step > 0, "a link's frames are some ticks apart");
    step
}

pub(crate) fn newest_of(b: &LatencyBuffer) -> Option<u64> {
    let w = b.written();
    (w > 0).then(|| b.timestamp_at(w - 1).ok()).flatten()
}

/// The oldest frame's timestamp a buffer holds (a few tries: the link may overwrite it while it
/// is read; then the next oldest is).
pub(crate) fn oldest_of(b: &LatencyBuffer) -> Option<u64> {
    for _ in 0..8 {
        if b.written() == 0 {
            return None;
        }
        if let Ok(t) = b.timestamp_at(b.oldest()) {
            return Some(t);
        }
    }
    // Overwritten at every try: a frame a little newer than the oldest is still there.
    let (o, w) = (b.oldest(), b.written());
    b.timestamp_at((o + (w - o) / 64).min(w.saturating_sub(1)))
        .ok()
}

/// Samples every link each `SAMPLE_EVERY` into `meter` until `stop`, and says once in the log
/// when a link's clock or rate is not what the unit was configured for (again if it recovers
/// and drifts off again).
pub(crate) fn measure_links(
    config: &RecordConfig,
    buffers: &[LatencyBuffer],
    meter: Arc<Mutex<RateMeter>>,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, RecordError> {
    let buffers = buffers.to_vec();
    let (hz, configured) = (config.clock().hz(), config.link_bytes_per_s());
    let unit_id = config.unit_id.clone().unwrap_or_default();
    std::thread::Builder::new()
        .name("snbuf-rates".into())
        .spawn(move || {
            let mut said = vec![false; buffers.len()];
            while !stop.load(Ordering::Relaxed) {
                let samples = buffers
                    .iter()
                    .map(|b| LinkSample {
                        newest_timestamp: newest_of(b),
                        frames: b.written(),
                    })
                    .collect();
                let mut m = meter.lock().expect("rates");
                m.add(Instant::now(), samples);
                let rates = m.rates();
                drop(m);
                debug_assert_eq!(rates.len(), buffers.len(), "a rate per link");
                for (r, said) in rates.iter().zip(said.iter_mut()) {
                    match r.complaint(hz, configured) {
                        Some(why) if !*said => {
                            tracing::warn!(unit = %unit_id, "the stream is not what the unit was configured for: {why}");
                            *said = true;
                        }
                        None if r.clock_ratio.is_some() => *said = false,
                        _ => {}
                    }
                }
                // In short steps, so that a unit winding down is not held up.
                let until = Instant::now() + SAMPLE_EVERY;
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        })
        .map_err(|cause| RecordError::Thread {
            thread: "link measurement".into(),
            cause,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ts: u64, frames: u64) -> LinkSample {
        LinkSample {
            newest_timestamp: Some(ts),
            frames,
        }
    }

    #[test]
    fn a_stream_on_its_clock_at_its_rate_is_no_mismatch_and_others_are() {
        // 62.5 MHz, 7200-byte frames, configured for 20 MB/s.
        let mut m = RateMeter::new(62_500_000, 7200, 20e6);
        let t0 = Instant::now();
        // Link 0: on the clock at 20 MB/s. Link 1: on the clock at 10x the rate. Link 2: a clock
        // at a tenth of the detector's (the old emulated clock), at 20 MB/s.
        let per_s = 20e6 as u64 / 7200;
        for k in 0..=6u64 {
            let at = t0 + Duration::from_millis(500 * k);
            let s = k * 500;
            m.add(
                at,
                vec![
                    sample(s * 62_500, s * per_s / 1000),
                    sample(s * 62_500, 10 * s * per_s / 1000),
                    sample(s * 6_250, s * per_s / 1000),
                ],
            );
        }
        let r = m.rates();
        assert_eq!(r.len(), 3);
        assert!(!r[0].mismatch, "{:?}", r[0]);
        assert!((r[0].clock_ratio.unwrap() - 1.0).abs() < 1e-9);
        assert!((r[0].rate_ratio.unwrap() - 1.0).abs() < 0.01);
        assert!(r[1].mismatch && (r[1].rate_ratio.unwrap() - 10.0).abs() < 0.1);
        assert!(r[2].mismatch && (r[2].clock_ratio.unwrap() - 0.1).abs() < 1e-9);
        assert!(r[1].complaint(62_500_000, 20e6).unwrap().contains("10.00x"));
        assert!(r[0].complaint(62_500_000, 20e6).is_none());
        // Only the last MEASURE_OVER is kept.
        assert!(r[0].span_s <= MEASURE_OVER.as_secs_f64());
    }

    #[test]
    fn too_short_or_silent_says_nothing() {
        let mut m = RateMeter::new(62_500_000, 7200, 20e6);
        let t0 = Instant::now();
        m.add(t0, vec![sample(0, 0), LinkSample::default()]);
        m.add(
            t0 + Duration::from_secs(1),
            vec![sample(62_500_000, 3000), LinkSample::default()],
        );
        assert!(m
            .rates()
            .iter()
            .all(|r| r.clock_ratio.is_none() && !r.mismatch));
        m.add(
            t0 + Duration::from_secs(3),
            vec![sample(3 * 62_500_000, 9000), LinkSample::default()],
        );
        let r = m.rates();
        assert!(r[0].clock_ratio.is_some());
        assert!(r[1].clock_ratio.is_none() && !r[1].mismatch);
    }
}
