//! A link's frames as its detector sends them, for the emulator and `snbuf emit`: in the frame
//! type's own layout, with the link's identity in every header, a timestamp in every detector
//! frame, the DAQEthHeader sequence number counting (and wrapping), and a payload:
//!
//! - emulated: for every type that carries ADC samples, the values of a detector
//!   (`emulated_detector`: per-channel baselines, the detector's noise, a track per bank),
//!   packed as DUNE packs them; for custom types a byte pattern per link (`pattern_byte`);
//! - replayed: the frames of a DUNE raw recording (frames back to back, as DUNE's readout writes
//!   `<SourceID>.bin`), in turn and looping, of which only the timestamp and sequence fields are
//!   rewritten, at their real positions, as DUNE's own emulator does. No other byte changes.
//!
//! A frame is fully determined by (link, timestamp, frame step): its index is its timestamp over
//! the link's frame step (`ticks_per_frame` at the frame type's own rate; more for a sub-sampled
//! link, see `snbuf_frames::clock`), its sequence number that index modulo 4096 (one more per
//! frame sent, as a detector counts), and its payload variant that index modulo
//! `PAYLOAD_VARIANTS`, so any reader can tell what the emulator sent at a given time.

use std::sync::Arc;

use crate::emulated_detector::EmulatedDetector;
use snbuf_frames::{FrameLayout, FrameType, HeaderKind, Identity, SEQUENCE_MODULUS};

/// Where a link's frame bytes come from.
#[derive(Clone)]
pub enum Payload {
    /// The frame type's emulated content (see the module comment).
    Emulated,
    /// The frames of a raw recording, looping (`--replay FILE`).
    Replay(Arc<Vec<u8>>),
}

/// Why frames cannot be made.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SourceError {
    #[error("rate of {0} frames/s per link: must be more than 0")]
    BadRate(f64),
    #[error("a frame step of {0} ticks: a link's frames must be 1 tick apart or more, at a rate above 0")]
    BadStep(u64),
    #[error("the replay file is empty")]
    EmptyReplay,
    #[error("the replay file holds {bytes} B, not whole {frame_type} frames of {frame_bytes} B: is it a recording of this frame type?")]
    ReplayNotWholeFrames {
        bytes: usize,
        frame_type: String,
        frame_bytes: u32,
    },
}

pub use crate::emulated_detector::PAYLOAD_VARIANTS;

/// Byte `i` of link `link`'s pattern payload.
pub fn pattern_byte(link: u32, i: usize) -> u8 {
    (i as u32 ^ link.wrapping_mul(0x9E)) as u8
}

/// DUNE's detector id for the data of a frame type (detdataformats DetID).
pub fn det_id(t: FrameType) -> u8 {
    match t {
        FrameType::WibEth | FrameType::Wib2 => 3, // kHD_TPC
        FrameType::TdeEth => 11,                  // kVD_TopTPC
        FrameType::DaphneEthStream => 2,          // kHD_PDS
        FrameType::ProtoDuneWib | FrameType::Custom { .. } => 0,
    }
}

/// The header version snbuf's emulated frames carry.
pub const EMULATED_HEADER_VERSION: u8 = 1;

/// The identity link `link`'s emulated frames carry.
pub fn emulated_identity(t: FrameType, link: u32) -> Identity {
    t.layout()
        .identity_for_link(link, det_id(t), EMULATED_HEADER_VERSION)
}

/// Makes one link's frames.
pub struct FrameGen {
    layout: FrameLayout,
    frame_type: FrameType,
    /// Emulated: the bank (`EmulatedDetector::bank_frame`; for custom frames one frame per
    /// payload variant), headers written; replayed: empty.
    frames: Vec<Vec<u8>>,
    /// Emulated frame types with ADC values: which bank frame each frame index sends.
    detector: Option<EmulatedDetector>,
    replay: Option<(Arc<Vec<u8>>, usize)>,
    /// Replay: the frames handed out last, in turn (each stays as it is for the next
    /// `PAYLOAD_VARIANTS - 1` calls, as emulated frames do).
    out: Vec<Vec<u8>>,
    calls: usize,
    /// Ticks between the link's frames (the frame type's own unless sub-sampled).
    step_ticks: u64,
    link: u32,
    /// Emulated frames whose noise is every frame's own (`unrepeated`): one frame's values.
    unrepeated: Option<Vec<u16>>,
}

impl FrameGen {
    pub fn new(
        frame_type: FrameType,
        link: u32,
        payload: &Payload,
    ) -> Result<FrameGen, SourceError> {
        let layout = frame_type.layout();
        let fb = layout.frame_bytes as usize;
        match payload {
            Payload::Emulated => {
                let id = emulated_identity(frame_type, link);
                let detector = EmulatedDetector::of(frame_type, layout.ticks_per_frame);
                let bank = detector.map_or(PAYLOAD_VARIANTS as usize, |d| d.bank_frames());
                let frames: Vec<Vec<u8>> = (0..bank)
                    .map(|v| emulated_frame(frame_type, detector.as_ref(), link, v, &id))
                    .collect();
                assert!(!frames.is_empty() && frames.iter().all(|f| f.len() == fb));
                Ok(FrameGen {
                    layout,
                    frame_type,
                    frames,
                    detector,
                    replay: None,
                    out: Vec::new(),
                    calls: 0,
                    step_ticks: layout.ticks_per_frame,
                    link,
                    unrepeated: None,
                })
            }
            Payload::Replay(data) => {
                if data.is_empty() {
                    return Err(SourceError::EmptyReplay);
                }
                if data.len() % fb != 0 {
                    return Err(SourceError::ReplayNotWholeFrames {
                        bytes: data.len(),
                        frame_type: frame_type.name(),
                        frame_bytes: layout.frame_bytes,
                    });
                }
                Ok(FrameGen {
                    layout,
                    frame_type,
                    frames: Vec::new(),
                    detector: None,
                    replay: Some((data.clone(), 0)),
                    out: vec![vec![0u8; fb]; PAYLOAD_VARIANTS as usize],
                    calls: 0,
                    step_ticks: layout.ticks_per_frame,
                    link,
                    unrepeated: None,
                })
            }
        }
    }

    pub fn layout(&self) -> &FrameLayout {
        &self.layout
    }

    /// Frames `step_ticks` apart (a sub-sampled link: `snbuf_frames::clock`) rather than the
    /// frame type's own `ticks_per_frame`: indexes, sequence numbers and payload variants count
    /// the frames the link sends.
    pub fn with_frame_step(mut self, step_ticks: u64) -> FrameGen {
        assert!(step_ticks > 0, "frames are at least a tick apart");
        self.step_ticks = step_ticks;
        if self.detector.is_some() {
            // Tracks come at the same detector time whatever the link's rate.
            self.detector = EmulatedDetector::of(self.frame_type, step_ticks);
        }
        self
    }

    /// Emulated frames whose noise is every frame's own (`EmulatedDetector::unrepeated_values`),
    /// never a bank frame's again: what a compressor is measured on, at a computation a frame
    /// (tens of MB/s, not a link's rate). Frame types without ADC values keep their pattern.
    pub fn unrepeated(mut self) -> FrameGen {
        if let Some(d) = &self.detector {
            let shape = d.shape();
            self.unrepeated = Some(vec![0; shape.samples_per_frame * shape.channels]);
            self.out = vec![self.frames[0].clone(); PAYLOAD_VARIANTS as usize];
        }
        self
    }

    /// Sends emulated frames under `stream_id` (the header field a receiver routes by); a
    /// replayed recording keeps its own.
    pub fn set_stream(&mut self, stream_id: u8) {
        let layout = self.layout;
        // An unrepeated link's frames are written over its bank's first, headers kept.
        let written = if self.unrepeated.is_some() {
            &mut self.out[..]
        } else {
            &mut []
        };
        for f in self.frames.iter_mut().chain(written) {
            if let Some(mut id) = layout.identity(f) {
                id.stream_id = stream_id;
                layout.write_identity(f, &id);
            }
        }
    }

    /// The frame at timestamp `ts`. Its bytes stay as they are for the next
    /// `PAYLOAD_VARIANTS - 1` calls at consecutive frame indexes (a sender may batch that many
    /// frames of a link without copying them).
    pub fn frame_at(&mut self, ts: u64) -> &[u8] {
        let index = ts / self.step_ticks;
        let fb = self.layout.frame_bytes as usize;
        self.calls = self.calls.wrapping_add(1);
        let frame: &mut Vec<u8> = match &mut self.replay {
            Some((data, next)) => {
                let out = &mut self.out[self.calls % PAYLOAD_VARIANTS as usize];
                out.copy_from_slice(&data[*next..*next + fb]);
                *next = (*next + fb) % data.len();
                out
            }
            None if self.unrepeated.is_some() => {
                let (d, values) = (self.detector.as_ref(), self.unrepeated.as_mut());
                let (d, values) = (d.expect("a detector"), values.expect("values"));
                d.unrepeated_values(self.link, index, values);
                let out = &mut self.out[self.calls % PAYLOAD_VARIANTS as usize];
                for (s, row) in values.chunks_exact(d.shape().channels).enumerate() {
                    d.shape().write_sample(out, s, row);
                }
                out
            }
            None => {
                let bank_frame = match &self.detector {
                    Some(d) => d.bank_frame(index),
                    None => (index % PAYLOAD_VARIANTS) as usize,
                };
                &mut self.frames[bank_frame]
            }
        };
        debug_assert_eq!(frame.len(), fb, "a whole frame of the link's type");
        self.layout.write_timestamp(frame, ts);
        self.layout.write_sequence(frame, index % SEQUENCE_MODULUS);
        frame
    }
}

/// Bank frame `v` of an emulated link, headers and all but its timestamp and sequence: the
/// detector's values where the frame type has ADC samples, else a pattern.
fn emulated_frame(
    t: FrameType,
    detector: Option<&EmulatedDetector>,
    link: u32,
    v: usize,
    id: &Identity,
) -> Vec<u8> {
    let layout = t.layout();
    let fb = layout.frame_bytes as usize;
    let mut f = match detector {
        Some(detector) => {
            // Headers zero but for what `write_identity` and `frame_at` put there.
            let mut f = vec![0u8; fb];
            let shape = detector.shape();
            let mut values = vec![0u16; shape.samples_per_frame * shape.channels];
            detector.bank_values(link, v, &mut values);
            for (s, row) in values.chunks_exact(shape.channels).enumerate() {
                shape.write_sample(&mut f, s, row);
            }
            f
        }
        None => (0..fb).map(|i| pattern_byte(link, i)).collect(),
    };
    if layout.header != HeaderKind::None {
        layout.write_identity(&mut f, id);
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulated_frames_carry_their_identity_time_and_recomputable_adcs() {
        for t in [
            FrameType::WibEth,
            FrameType::TdeEth,
            FrameType::DaphneEthStream,
            FrameType::Wib2,
            FrameType::ProtoDuneWib,
        ] {
            let l = t.layout();
            let mut g = FrameGen::new(t, 5, &Payload::Emulated).unwrap();
            let ts = 123_456 * l.ticks_per_frame;
            let f = g.frame_at(ts).to_vec();
            assert_eq!(f.len(), l.frame_bytes as usize);
            assert_eq!(l.checked_timestamp(&f), Ok(ts), "{t}");
            assert_eq!(l.identity(&f), Some(emulated_identity(t, 5)), "{t}");
            if l.header == HeaderKind::DaqEth {
                assert_eq!(l.sequence(&f), Some(123_456 % 4096));
            }
            // Every ADC value is the emulated detector's, where the frame type keeps it.
            let d = EmulatedDetector::of(t, l.ticks_per_frame).unwrap();
            let mut got = vec![0u16; d.shape().channels];
            for s in 0..d.shape().samples_per_frame {
                d.shape().sample(&f, s, &mut got);
                assert_eq!(got, d.sample(5, 123_456, s), "{t} sample {s}");
            }
            // The same (link, timestamp) is the same frame; another link's differs.
            assert_eq!(g.frame_at(ts), &f[..]);
            let mut other = FrameGen::new(t, 6, &Payload::Emulated).unwrap();
            assert_ne!(other.frame_at(ts), &f[..]);
        }
    }

    #[test]
    fn a_replay_changes_only_timestamps_and_sequence_numbers() {
        let t = FrameType::WibEth;
        let l = t.layout();
        // Two hand-made frames of a "recording": bytes 0..255 repeating, different per frame.
        let rec: Vec<u8> = (0..2 * 7200).map(|i| (i * 7 / 3) as u8).collect();
        let mut g = FrameGen::new(t, 0, &Payload::Replay(Arc::new(rec.clone()))).unwrap();
        let rewritten = l.rewritten_bytes();
        for k in 0..5u64 {
            let ts = (1000 + k) * l.ticks_per_frame;
            let f = g.frame_at(ts).to_vec();
            let src = &rec[(k as usize % 2) * 7200..(k as usize % 2 + 1) * 7200];
            assert_eq!(l.timestamp(&f), ts);
            for i in 0..7200 {
                if !rewritten.iter().any(|r| r.contains(&i)) {
                    assert_eq!(f[i], src[i], "byte {i} of frame {k}");
                }
            }
        }
        assert!(matches!(
            FrameGen::new(t, 0, &Payload::Replay(Arc::new(vec![0; 7201]))),
            Err(SourceError::ReplayNotWholeFrames { .. })
        ));
    }
}
