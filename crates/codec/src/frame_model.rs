//! One frame as the codec sees it: its header bytes (everything that is not an ADC value, kept
//! verbatim, in order), then its samples, time sample by time sample, each channel's coded
//! against its own prediction (`rice`). A frame's first sample follows on from the frame before
//! it in the chunk, so a link's stream codes as one.
//!
//! The samples go to `STREAMS` bit streams, channel c to stream c % `STREAMS`: a decoder reads
//! the streams side by side, so a core works on four codes at once rather than waiting on each
//! code's length to find the next. A coded frame is its headers, the byte lengths of all
//! streams but the last (u32 each, little-endian), then the streams.

use snbuf_frames::adc::AdcShape;

use crate::bits::{BitReader, BitWriter, PADDING};
use crate::rice::{self, Channels, Corrupt, MAX_SAMPLE_BITS};

/// Bit streams a frame's samples are spread over.
const STREAMS: usize = 4;

/// What the codec knows of a frame type: where its values are, and each channel's state.
pub struct FrameModel {
    shape: AdcShape,
    frame_bytes: usize,
    /// The byte ranges that are no ADC value (headers, trailers), in order.
    headers: Vec<std::ops::Range<usize>>,
    channels: Channels,
    /// Each channel's last sample of the frame before.
    before: Vec<u16>,
    /// One frame's values, `[sample * channels + channel]`.
    values: Vec<u16>,
    /// Their mapped residuals (encoding), or their codes as read (decoding), in that order.
    codes: Vec<u32>,
    /// The streams being written or read, each with its padding.
    streams: [Vec<u8>; STREAMS],
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
            channels: Channels::new(shape.channels, start),
            before: vec![start; shape.channels],
            values: vec![0; shape.channels * shape.samples_per_frame],
            codes: vec![0; shape.channels * shape.samples_per_frame],
            streams: Default::default(),
        })
    }

    /// The fewest bytes a frame coded by this model takes: its headers, the streams' lengths,
    /// and a bit a sample.
    pub fn least_coded_bytes(&self) -> usize {
        let headers: usize = self.headers.iter().map(|h| h.len()).sum();
        headers + 4 * (STREAMS - 1) + self.values.len().div_ceil(8)
    }

    /// The ADC's largest value.
    fn full_scale(&self) -> u16 {
        ((1u32 << self.shape.bits()) - 1) as u16
    }

    /// Reads `frame`'s values into `values`.
    fn unpack(&mut self, frame: &[u8]) {
        assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the model's type"
        );
        let channels = self.shape.channels;
        for (s, row) in self.values.chunks_exact_mut(channels).enumerate() {
            self.shape.sample(frame, s, row);
        }
    }

    /// Each channel's prediction and parameter for the next frame, from the values of this one.
    fn learn(&mut self) {
        let channels = self.shape.channels;
        self.channels.learn_frame(&self.before, &self.values);
        let last = &self.values[self.values.len() - channels..];
        self.before.copy_from_slice(last);
    }

    /// Appends `frame`, coded: its headers, then its values' streams.
    pub fn encode(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        self.unpack(frame);
        for h in &self.headers {
            out.extend_from_slice(&frame[h.clone()]);
        }
        let channels = self.shape.channels;
        // Stream g takes channels g, g + STREAMS, ...: of each row, at most channels / STREAMS
        // rounded up.
        let row_count = self.values.len() / channels;
        let per_stream = row_count * channels.div_ceil(STREAMS) * MAX_SAMPLE_BITS;
        let mut prev = &self.before[..];
        let rows = self.values.chunks_exact(channels);
        for (row, mapped) in rows.zip(self.codes.chunks_exact_mut(channels)) {
            self.channels.residuals(prev, row, mapped);
            prev = row;
        }
        let ks = self.channels.ks();
        // Stream by stream, each by a writer of its own in a loop of its own, so that its state
        // stays in registers (four writers side by side spilled theirs to memory, and were
        // slower in `snbuf bench codec`).
        let mut lengths = [0usize; STREAMS];
        for ((g, s), len) in self.streams.iter_mut().enumerate().zip(&mut lengths) {
            // (Sized once: the writer stores every byte it passes, so none need be zeroed.)
            let room = BitWriter::room_for(per_stream);
            if s.len() < room {
                s.resize(room, 0);
            }
            let mut w = BitWriter::new(s);
            let rows = self.values.chunks_exact(channels);
            for (row, mapped) in rows.zip(self.codes.chunks_exact(channels)) {
                for c in (g..channels).step_by(STREAMS) {
                    rice::put(&mut w, mapped[c], ks[c], row[c]);
                }
            }
            *len = w.finish();
        }
        for len in &lengths[..STREAMS - 1] {
            out.extend_from_slice(&(*len as u32).to_le_bytes());
        }
        for (s, &len) in self.streams.iter().zip(&lengths) {
            out.extend_from_slice(&s[..len]);
        }
        self.learn();
    }

    /// Takes in `frame`, stored raw, as if it had been decoded: the next frame is predicted
    /// from it, as the encoder (which coded it before storing it raw) predicted it.
    pub fn observe(&mut self, frame: &[u8]) {
        self.unpack(frame);
        self.learn();
    }

    /// Decodes one frame from `coded` (exactly its bytes) into `frame` (its length).
    pub fn decode(&mut self, coded: &[u8], frame: &mut [u8]) -> Result<(), Corrupt> {
        assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the model's type"
        );
        let mut at = 0;
        for h in &self.headers {
            let bytes = coded.get(at..at + h.len()).ok_or(Corrupt)?;
            frame[h.clone()].copy_from_slice(bytes);
            at += h.len();
        }
        let mut lengths = [0usize; STREAMS];
        for len in &mut lengths[..STREAMS - 1] {
            let b = coded.get(at..at + 4).ok_or(Corrupt)?;
            *len = u32::from_le_bytes(b.try_into().expect("four bytes")) as usize;
            at += 4;
        }
        let rest: usize = lengths[..STREAMS - 1].iter().sum();
        lengths[STREAMS - 1] = (coded.len() - at).checked_sub(rest).ok_or(Corrupt)?;
        for (s, &len) in self.streams.iter_mut().zip(&lengths) {
            s.clear();
            s.extend_from_slice(&coded[at..at + len]);
            s.extend_from_slice(&[0; PADDING]);
            at += len;
        }
        let max = self.full_scale();
        let channels = self.shape.channels;
        let mut r = self.streams.each_ref().map(|s| BitReader::new(s));
        let ks = self.channels.ks();
        for codes in self.codes.chunks_exact_mut(channels) {
            let c = channels - channels % STREAMS;
            let (whole, rest) = codes.split_at_mut(c);
            for (four, k) in whole
                .chunks_exact_mut(STREAMS)
                .zip(ks.chunks_exact(STREAMS))
            {
                let four: &mut [u32; STREAMS] = four.try_into().expect("a group");
                let k: &[u32; STREAMS] = k.try_into().expect("a group");
                for g in 0..STREAMS {
                    four[g] = rice::read(&mut r[g], k[g]);
                }
            }
            for (g, (code, r)) in rest.iter_mut().zip(r.iter_mut()).enumerate() {
                *code = rice::read(r, ks[c + g]);
            }
        }
        for r in &r {
            r.finished()?;
        }
        let mut prev = &self.before[..];
        let rows = self.values.chunks_exact_mut(channels);
        for (row, codes) in rows.zip(self.codes.chunks_exact(channels)) {
            self.channels.restore(prev, codes, row, max)?;
            prev = row;
        }
        for (s, row) in self.values.chunks_exact(channels).enumerate() {
            self.shape.write_sample(frame, s, row);
        }
        self.learn();
        Ok(())
    }
}
