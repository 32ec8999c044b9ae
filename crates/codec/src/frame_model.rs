//! One frame as the codec sees it: its header bytes (everything that is not an ADC value, kept
//! verbatim, in order), then its samples, time sample by time sample, each channel's coded
//! against that channel's previous sample (`rice`). A frame's first sample follows on from the
//! frame before it in the chunk, so a link's stream codes as one.

use snbuf_frames::adc::AdcShape;

use crate::bits::{BitReader, BitWriter, OutOfBits};
use crate::rice::{self, Channel};

/// What the codec knows of a frame type: where its values are, and each channel's state.
pub struct FrameModel {
    shape: AdcShape,
    frame_bytes: usize,
    /// The byte ranges that are no ADC value (headers, trailers), in order.
    headers: Vec<std::ops::Range<usize>>,
    channels: Vec<Channel>,
    /// One sample's values.
    row: Vec<u16>,
}

impl FrameModel {
    /// The model of frames of `shape`, `frame_bytes` long; None when the shape's values do not
    /// lie in whole bytes of frames that long.
    pub fn new(shape: AdcShape, frame_bytes: usize) -> Option<FrameModel> {
        let adc = shape.adc_ranges(frame_bytes)?;
        let mut headers = Vec::with_capacity(adc.len() + 1);
        let mut from = 0;
        for r in adc
            .iter()
            .chain(std::iter::once(&(frame_bytes..frame_bytes)))
        {
            if r.start > from {
                headers.push(from..r.start);
            }
            from = r.end;
        }
        let start = 1u16 << (shape.bits() - 1);
        Some(FrameModel {
            shape,
            frame_bytes,
            headers,
            channels: vec![Channel::new(start); shape.channels],
            row: vec![0; shape.channels],
        })
    }

    /// Appends `frame`, coded: its headers, then its values' bit stream.
    pub fn encode(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the model's type"
        );
        for h in &self.headers {
            out.extend_from_slice(&frame[h.clone()]);
        }
        let mut w = BitWriter::new(out);
        for s in 0..self.shape.samples_per_frame {
            self.shape.sample(frame, s, &mut self.row);
            for (ch, &v) in self.channels.iter_mut().zip(&self.row) {
                rice::encode(ch, v, &mut w);
            }
        }
        w.finish();
    }

    /// Takes in `frame`, stored raw, as if it had been decoded: the next frame is predicted
    /// from it, as the encoder (which coded it before storing it raw) predicted it.
    pub fn observe(&mut self, frame: &[u8]) {
        assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the model's type"
        );
        for s in 0..self.shape.samples_per_frame {
            self.shape.sample(frame, s, &mut self.row);
            for (ch, &v) in self.channels.iter_mut().zip(&self.row) {
                rice::observe(ch, v);
            }
        }
    }

    /// Decodes one frame from the start of `coded` into `frame` (its length); returns the
    /// bytes it took.
    pub fn decode(&mut self, coded: &[u8], frame: &mut [u8]) -> Result<usize, OutOfBits> {
        assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the model's type"
        );
        let mut at = 0;
        for h in &self.headers {
            let bytes = coded.get(at..at + h.len()).ok_or(OutOfBits)?;
            frame[h.clone()].copy_from_slice(bytes);
            at += h.len();
        }
        let mut r = BitReader::new(&coded[at..]);
        for s in 0..self.shape.samples_per_frame {
            for (ch, v) in self.channels.iter_mut().zip(self.row.iter_mut()) {
                *v = rice::decode(ch, &mut r)?;
            }
            // A value wider than the ADC's bits is no sample: written as its low bits, the
            // chunk's checksum then refuses the frame.
            self.shape.write_sample(frame, s, &self.row);
        }
        Ok(at + r.bytes_used())
    }
}
