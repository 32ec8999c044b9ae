//! One frame as the codec sees it: its header bytes (everything that is not an ADC value, kept
//! verbatim, in order), then its samples, time sample by time sample, each channel's coded
//! against its own prediction (`rice`). A frame's first sample follows on from the frame before
//! it in the chunk, so a link's stream codes as one.
//!
//! A coded frame is its headers, then its samples' codes in three parts, in the samples' order:
//! the codes' quotients as one unary stream (`unary`), their low bits at each channel's width
//! (`low_bits`), and the samples escaped (a quotient of `ESCAPE`), whole, as u16
//! little-endian. Each part ends where the one before and the channels' parameters say:
//! nothing stores its length. Apart, each part is read many codes at once (`kernel`).

use snbuf_frames::adc::AdcShape;

use crate::bits::BitWriter;
use crate::kernel::InstructionSet;
use crate::low_bits;
use crate::packed14;
use crate::rice::{Channels, Corrupt, ESCAPED, MAX_K};
use crate::unary::{self, UnaryWriter, ESCAPE};

mod v1;

/// The layouts of a modeled frame this codec reads (a chunk says which); it writes the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Four interleaved bit streams of whole codes (`v1`).
    V1 = 1,
    /// Quotients, low bits and escapes apart (this module).
    V2 = 2,
}

impl Format {
    /// The format written.
    pub const LATEST: Format = Format::V2;

    /// The format a chunk's version byte names, if this codec reads it.
    pub fn of_version(version: u8) -> Option<Format> {
        match version {
            1 => Some(Format::V1),
            2 => Some(Format::V2),
            _ => None,
        }
    }
}

/// What the codec knows of a frame type: where its values are, and each channel's state.
#[derive(Clone)]
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
    /// The frame's ADC bytes where they are one run of 14-bit words in the values' order.
    packed: Option<std::ops::Range<usize>>,
    /// The vector instructions it codes with.
    kernel: InstructionSet,
    /// The quotients read, in the codes' order, and `unary::SLACK` more.
    quotients: Vec<u8>,
    /// Room for a frame's quotients or its low bits as they are written.
    written: Vec<u8>,
    /// The low bits being read, with their padding.
    low: Vec<u8>,
    /// The values of the samples escaped, in the order coded.
    escaped: Vec<u16>,
}

impl FrameModel {
    /// The model of frames of `shape`, `frame_bytes` long, coding with `kernel` (one this CPU
    /// runs); None when the shape's values do not lie in whole bytes of frames that long.
    pub fn new(shape: AdcShape, frame_bytes: usize, kernel: InstructionSet) -> Option<FrameModel> {
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
        let packed = one_run_of_14_bits(&shape, frame_bytes, &adc);
        let count = shape.channels * shape.samples_per_frame;
        Some(FrameModel {
            packed,
            shape,
            frame_bytes,
            headers,
            channels: Channels::new(shape.channels, start),
            before: vec![start; shape.channels],
            values: vec![0; count],
            codes: vec![0; count],
            // (Checked here, at the one place a model gets it: its code relies on it.)
            kernel: kernel.or_portable(),
            quotients: vec![0; count + unary::SLACK],
            written: vec![
                0;
                UnaryWriter::room_for(count)
                    .max(BitWriter::room_for(count * MAX_K as usize))
            ],
            low: Vec::new(),
            escaped: Vec::new(),
        })
    }

    /// The fewest bytes a frame coded by this model takes: its headers and a bit a sample.
    fn least_coded_bytes(&self) -> usize {
        let headers: usize = self.headers.iter().map(|h| h.len()).sum();
        headers + self.values.len().div_ceil(8)
    }

    /// The ADC's largest value.
    fn full_scale(&self) -> u16 {
        ((1u32 << self.shape.bits()) - 1) as u16
    }

    /// Reads `frame`'s values into `values`.
    #[inline(always)]
    fn unpack(&mut self, frame: &[u8]) {
        assert_eq!(
            frame.len(),
            self.frame_bytes,
            "one frame of the model's type"
        );
        if let Some(run) = &self.packed {
            return packed14::unpack(self.kernel, &frame[run.clone()], &mut self.values);
        }
        let channels = self.shape.channels;
        for (s, row) in self.values.chunks_exact_mut(channels).enumerate() {
            self.shape.sample(frame, s, row);
        }
    }

    /// Each channel's prediction and parameter for the next frame, from the values of this one.
    #[inline(always)]
    fn learn(&mut self) {
        let channels = self.shape.channels;
        self.channels.learn_frame(&self.before, &self.values);
        let last = &self.values[self.values.len() - channels..];
        self.before.copy_from_slice(last);
    }

    /// Appends `frame`, coded: its headers, then its samples' quotients, their low bits and
    /// the escaped samples.
    pub fn encode(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        match self.kernel {
            // SAFETY: the kernel is only chosen where the CPU has what it is compiled for.
            #[cfg(target_arch = "x86_64")]
            InstructionSet::Avx512 => unsafe { self.encode_avx512(frame, out) },
            InstructionSet::Portable => self.encode_with(frame, out),
        }
    }

    /// `encode`, its loops compiled for AVX-512 (and the scalar instructions that come with it).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi1,bmi2,popcnt,lzcnt"
    )]
    unsafe fn encode_avx512(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        self.encode_with(frame, out)
    }

    #[inline(always)]
    fn encode_with(&mut self, frame: &[u8], out: &mut Vec<u8>) {
        self.unpack(frame);
        for h in &self.headers {
            out.extend_from_slice(&frame[h.clone()]);
        }
        let channels = self.shape.channels;
        // Residuals, quotients and what the next frame learns, in one pass over the rows.
        self.channels.start_learning();
        let mut prev = &self.before[..];
        let rows = self.values.chunks_exact(channels);
        let codes = self.codes.chunks_exact_mut(channels);
        let q_rows = self.quotients.chunks_exact_mut(channels);
        for ((row, mapped), q_row) in rows.zip(codes).zip(q_rows) {
            self.channels.code_row::<ESCAPE>(prev, row, mapped, q_row);
            prev = row;
        }
        let ks = self.channels.ks();
        let n = self.codes.len();
        self.escaped.clear();
        // (No quotient is over ESCAPE: the largest says whether any sample escaped.)
        let largest = self.quotients[..n].iter().fold(0, |a, &q| a.max(q));
        if largest as u32 == ESCAPE {
            let escaped = self.quotients[..n].iter().zip(&self.values);
            let escaped = escaped
                .filter(|(&q, _)| q as u32 == ESCAPE)
                .map(|(_, &v)| v);
            self.escaped.extend(escaped);
        }
        // (Written into room made once, which the writers store whole words into: no zeroing.)
        let mut w = UnaryWriter::new(&mut self.written);
        unary::write(self.kernel, &mut w, &self.quotients[..n]);
        let len = w.finish();
        out.extend_from_slice(&self.written[..len]);
        // (An escaped sample's low bits too, unread.)
        let mut w = BitWriter::new(&mut self.written);
        low_bits::write(self.kernel, &mut w, &self.codes, ks);
        let len = w.finish();
        debug_assert_eq!(len, low_bits::bytes(ks, n / channels));
        out.extend_from_slice(&self.written[..len]);
        for v in &self.escaped {
            out.extend_from_slice(&v.to_le_bytes());
        }
        self.channels.finish_learning(n / channels);
        self.before.copy_from_slice(&self.values[n - channels..]);
    }

    /// Takes in `frame`, stored raw, as if it had been decoded: the next frame is predicted
    /// from it, as the encoder (which coded it before storing it raw) predicted it.
    pub fn observe(&mut self, frame: &[u8]) {
        self.unpack(frame);
        self.learn();
    }

    /// The fewest bytes a frame of `format` takes.
    pub fn least_coded_bytes_of(&self, format: Format) -> usize {
        match format {
            Format::V1 => self.least_coded_bytes_v1(),
            Format::V2 => self.least_coded_bytes(),
        }
    }

    /// Decodes one frame of `format` from `coded` (exactly its bytes) into `frame` (its length).
    pub fn decode(
        &mut self,
        format: Format,
        coded: &[u8],
        frame: &mut [u8],
    ) -> Result<(), Corrupt> {
        if format == Format::V1 {
            return self.decode_v1(coded, frame);
        }
        match self.kernel {
            // SAFETY: the kernel is only chosen where the CPU has what it is compiled for.
            #[cfg(target_arch = "x86_64")]
            InstructionSet::Avx512 => unsafe { self.decode_avx512(coded, frame) },
            InstructionSet::Portable => self.decode_with(coded, frame),
        }
    }

    /// `decode`, its loops compiled for AVX-512 (and the scalar instructions that come with it).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(
        enable = "avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi1,bmi2,popcnt,lzcnt"
    )]
    unsafe fn decode_avx512(&mut self, coded: &[u8], frame: &mut [u8]) -> Result<(), Corrupt> {
        self.decode_with(coded, frame)
    }

    #[inline(always)]
    fn decode_with(&mut self, coded: &[u8], frame: &mut [u8]) -> Result<(), Corrupt> {
        let at = self.read_headers(coded, frame)?;
        let channels = self.shape.channels;
        let body = &coded[at..];
        let n = self.codes.len();
        let (used, escapes) = unary::read(self.kernel, body, &mut self.quotients, n)?;
        let ks = self.channels.ks();
        let low = body
            .get(used..used + low_bits::bytes(ks, n / channels))
            .ok_or(Corrupt)?;
        if body.len() - used - low.len() != 2 * escapes {
            return Err(Corrupt);
        }
        // The bits after the last code's are zeros, as written: one coding for each frame.
        let spare_bits = low.len() * 8 - ks.iter().sum::<u32>() as usize * (n / channels);
        if low
            .last()
            .is_some_and(|&b| (b as u32) >> (8 - spare_bits as u32) != 0)
        {
            return Err(Corrupt);
        }
        self.low.clear();
        self.low.extend_from_slice(low);
        self.low.resize(low.len() + low_bits::PADDING, 0);
        low_bits::read(self.kernel, &self.low, ks, &self.quotients, &mut self.codes);
        if escapes > 0 {
            let mut values = body[used + low.len()..].chunks_exact(2);
            for (code, _) in self
                .codes
                .iter_mut()
                .zip(&self.quotients)
                .filter(|(_, &q)| q as u32 == ESCAPE)
            {
                let v = values.next().expect("an escaped value for each escape");
                *code = ESCAPED | u16::from_le_bytes([v[0], v[1]]) as u32;
            }
        }
        self.restore_frame(frame)
    }

    /// Copies `coded`'s headers into `frame`: the bytes they took.
    fn read_headers(&self, coded: &[u8], frame: &mut [u8]) -> Result<usize, Corrupt> {
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
        Ok(at)
    }

    /// The samples of the codes read into `codes`, written into `frame`, and learnt from.
    #[inline(always)]
    fn restore_frame(&mut self, frame: &mut [u8]) -> Result<(), Corrupt> {
        let channels = self.shape.channels;
        let max = self.full_scale();
        // Restored and learnt from in one pass, as the encoder coded them.
        self.channels.restore_frame(
            self.kernel,
            &self.before,
            &self.codes,
            &mut self.values,
            max,
        )?;
        match &self.packed {
            Some(run) => packed14::pack(self.kernel, &mut frame[run.clone()], &self.values),
            None => {
                for (s, row) in self.values.chunks_exact(channels).enumerate() {
                    self.shape.write_sample(frame, s, row);
                }
            }
        }
        let n = self.values.len();
        self.before.copy_from_slice(&self.values[n - channels..]);
        Ok(())
    }
}

/// The one byte range of a frame that holds its values as a run of 14-bit words in the codec's
/// order (sample by sample, channel by channel), if they are so: found by writing distinct values
/// the shape's own way and reading them back as a run.
fn one_run_of_14_bits(
    shape: &AdcShape,
    frame_bytes: usize,
    adc: &[std::ops::Range<usize>],
) -> Option<std::ops::Range<usize>> {
    let [run] = adc else { return None };
    let count = shape.channels * shape.samples_per_frame;
    if shape.bits() != 14 || run.len() * 8 != count * 14 {
        return None;
    }
    let values: Vec<u16> = (0..count).map(|i| (i * 7 % 16384) as u16).collect();
    let mut frame = vec![0u8; frame_bytes];
    for (s, row) in values.chunks_exact(shape.channels).enumerate() {
        shape.write_sample(&mut frame, s, row);
    }
    let mut back = vec![0u16; count];
    snbuf_frames::adc::unpack_all(&frame[run.clone()], 14, &mut back);
    (back == values).then(|| run.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use snbuf_frames::FrameType;

    /// Frames of `t` with the detector's noise, a track-like pulse and full-scale steps (which
    /// escape), back to back.
    fn frames(t: FrameType, n: usize) -> Vec<u8> {
        let shape = AdcShape::of(t).expect("a modeled type");
        let frame_bytes = t.frame_bytes() as usize;
        let full = (1u32 << shape.bits()) - 1;
        let mut out = vec![0u8; n * frame_bytes];
        let mut row = vec![0u16; shape.channels];
        let mut x = 0x9e37_79b9u32;
        for (f, frame) in out.chunks_exact_mut(frame_bytes).enumerate() {
            for (i, b) in frame.iter_mut().enumerate() {
                *b = (i * 31 + f) as u8;
            }
            for s in 0..shape.samples_per_frame {
                for (c, v) in row.iter_mut().enumerate() {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let noise = (x % 23) as i32 - 11;
                    let base = (full / 2) as i32 + 40 * (c as i32 % 5);
                    let jump = match (f * 7 + s * 3 + c) % 997 {
                        0 => full as i32,
                        1 => -base,
                        2..=9 => 900,
                        _ => 0,
                    };
                    *v = (base + noise + jump).clamp(0, full as i32) as u16;
                }
                shape.write_sample(frame, s, &row);
            }
        }
        out
    }

    #[test]
    fn every_kernel_decodes_what_was_coded_escapes_too() {
        let types = [
            FrameType::WibEth,
            FrameType::TdeEth,
            FrameType::DaphneEthStream,
            FrameType::Wib2,
            FrameType::ProtoDuneWib,
        ];
        for t in types {
            let shape = AdcShape::of(t).unwrap();
            let frame_bytes = t.frame_bytes() as usize;
            let raw = frames(t, 5);
            let mut encoder =
                FrameModel::new(shape, frame_bytes, InstructionSet::Portable).unwrap();
            let mut coded = Vec::new();
            let mut escaped = 0;
            for frame in raw.chunks_exact(frame_bytes) {
                let mut one = Vec::new();
                // The low bits' spare bits, those after the last code's in their last byte.
                let ks = encoder.channels.ks();
                let rows = shape.samples_per_frame;
                let spare = low_bits::bytes(ks, rows) * 8 - ks.iter().sum::<u32>() as usize * rows;
                encoder.encode(frame, &mut one);
                escaped += encoder.escaped.len();
                coded.push((one, spare, encoder.escaped.len()));
            }
            assert!(escaped > 0, "{t}: some samples escaped");
            let mut spare_checked = 0;
            for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
                let mut decoder =
                    FrameModel::new(shape, frame_bytes, InstructionSet::Portable).unwrap();
                decoder.kernel = kernel;
                let mut frame = vec![0u8; frame_bytes];
                for (want, (one, spare, escapes)) in raw.chunks_exact(frame_bytes).zip(&coded) {
                    // Each changed coding is read by the decoder as it is before this frame.
                    let refused = |bad: &[u8]| {
                        let mut frame = vec![0u8; frame_bytes];
                        decoder.clone().decode(Format::V2, bad, &mut frame) == Err(Corrupt)
                    };
                    // One byte more or fewer is not the frame.
                    let mut longer = one.clone();
                    longer.push(0);
                    assert!(refused(&longer), "{t}, {kernel:?}: a byte more");
                    assert!(
                        refused(&one[..one.len() - 1]),
                        "{t}, {kernel:?}: a byte fewer"
                    );
                    if *spare > 0 {
                        let mut set = one.clone();
                        set[one.len() - 1 - 2 * escapes] |= 0x80;
                        assert!(refused(&set), "{t}, {kernel:?}: a spare low bit set");
                        spare_checked += 1;
                    }
                    decoder.decode(Format::V2, one, &mut frame).unwrap();
                    assert!(frame == want, "{t}, {kernel:?}");
                }
            }
            if matches!(t, FrameType::ProtoDuneWib) {
                assert!(spare_checked > 0, "{t}: a frame with spare low bits");
            }
        }
    }
}
