//! The quotients of a frame's Rice codes as one stream of unary codes, each `q` ones then a
//! zero, least significant bit first, apart from the codes' low bits (`low_bits`): so that
//! a decoder finds a word's codes from its zeros alone, without waiting on each code's length
//! to find the next, and an encoder writes a code in a few operations.
//!
//! A quotient of `ESCAPE` says that the sample is written whole elsewhere (`frame_model`).

use crate::kernel::InstructionSet;
use crate::rice::Corrupt;

/// The largest quotient: an escaped sample.
pub const ESCAPE: u32 = 16;

/// Writes unary codes into a buffer sized beforehand (`room_for`).
pub struct UnaryWriter<'a> {
    out: &'a mut [u8],
    /// Where the next whole word goes.
    at: usize,
    /// Bits not yet stored (`held` of them, < 64).
    acc: u64,
    held: u32,
}

impl<'a> UnaryWriter<'a> {
    pub fn new(out: &'a mut [u8]) -> UnaryWriter<'a> {
        UnaryWriter {
            out,
            at: 0,
            acc: 0,
            held: 0,
        }
    }

    /// The bytes a writer of `codes` codes needs.
    pub fn room_for(codes: usize) -> usize {
        (codes * (ESCAPE as usize + 1)).div_ceil(64) * 8 + 8
    }

    /// Appends `q` ones and a zero (`q` at most `ESCAPE`).
    #[inline(always)]
    pub fn put(&mut self, q: u32) {
        debug_assert!(q <= ESCAPE, "a quotient of {q}");
        self.put_word((1u64 << q) - 1, q + 1);
    }

    /// Appends the codes of `first`, then `second` (each at most `ESCAPE`): in one step.
    #[inline(always)]
    pub fn put_two(&mut self, first: u32, second: u32) {
        debug_assert!(first <= ESCAPE && second <= ESCAPE);
        let code = ((1u64 << first) - 1) | ((1u64 << second) - 1) << (first + 1);
        self.put_word(code, first + second + 2);
    }

    /// Appends `len` bits (at most 64), `code`'s. Without a branch (whether a word fills is
    /// as random as the codes): the word is stored whether or not it is full, and passed only
    /// when it is.
    #[inline(always)]
    pub fn put_word(&mut self, code: u64, len: u32) {
        debug_assert!(len <= 64 && (len == 64 || code >> len == 0));
        debug_assert!(self.held < 64);
        let word = self.acc | code << self.held;
        // The code's bits past the word: none when nothing was held (two shifts, as one of 64
        // would not be one).
        let past = (code >> 1) >> (63 - self.held);
        self.out[self.at..self.at + 8].copy_from_slice(&word.to_le_bytes());
        let bits = self.held + len;
        let full = bits >= 64;
        self.at += 8 * full as usize;
        self.acc = if full { past } else { word };
        self.held = bits & 63;
    }

    /// Ends the stream, padded with zeros to a whole byte: its bytes.
    pub fn finish(self) -> usize {
        let tail = self.held.div_ceil(8) as usize;
        self.out[self.at..self.at + tail].copy_from_slice(&self.acc.to_le_bytes()[..tail]);
        self.at + tail
    }
}

/// Writes the codes of every quotient in `q` (each at most `ESCAPE`), in order.
#[inline(always)]
pub fn write(kernel: InstructionSet, w: &mut UnaryWriter, q: &[u8]) {
    match kernel {
        // SAFETY: the kernel is only chosen where the CPU has what it is compiled for.
        #[cfg(target_arch = "x86_64")]
        InstructionSet::Avx512 => unsafe { write_avx512(w, q) },
        InstructionSet::Portable => write_pairs(w, q),
    }
}

#[inline(always)]
fn write_pairs(w: &mut UnaryWriter, q: &[u8]) {
    let mut pairs = q.chunks_exact(2);
    for two in &mut pairs {
        w.put_two(two[0] as u32, two[1] as u32);
    }
    for &q in pairs.remainder() {
        w.put(q as u32);
    }
}

/// Sixteen codes at a time, as the bits they make: each code's zero is at the sum of the
/// lengths up to it (a prefix sum of bytes), and the group is ones but there, put a word (at
/// most 64 bits) at a time: one word for a group of short codes. A group with a quotient over
/// 14 (its sum could pass a byte: an escape, a track's edge) goes two codes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,bmi1,bmi2")]
unsafe fn write_avx512(w: &mut UnaryWriter, q: &[u8]) {
    use std::arch::x86_64::*;
    let one = _mm512_set1_epi64(1);
    let mut groups = q.chunks_exact(16);
    for group in &mut groups {
        // SAFETY: 16 bytes.
        let q16 = unsafe { _mm_loadu_si128(group.as_ptr() as *const _) };
        if _mm_cmpgt_epu8_mask(q16, _mm_set1_epi8(14)) != 0 {
            write_pairs(w, group);
            continue;
        }
        // Each code's end, the bit after its zero: at most 16 x 15 = 240.
        let mut end = _mm_add_epi8(q16, _mm_set1_epi8(1));
        end = _mm_add_epi8(end, _mm_slli_si128(end, 1));
        end = _mm_add_epi8(end, _mm_slli_si128(end, 2));
        end = _mm_add_epi8(end, _mm_slli_si128(end, 4));
        end = _mm_add_epi8(end, _mm_slli_si128(end, 8));
        let zero_at = _mm_sub_epi8(end, _mm_set1_epi8(1));
        let group_bits = _mm_extract_epi8(end, 15) as u32;
        let (first, last) = (
            _mm512_cvtepu8_epi64(zero_at),
            _mm512_cvtepu8_epi64(_mm_srli_si128(zero_at, 8)),
        );
        let mut word_start = 0;
        while word_start < group_bits {
            // The zeros in this word (a shift by 64 or more, or "negative", gives none).
            let from = _mm512_set1_epi64(word_start as i64);
            let zeros = _mm512_reduce_or_epi64(_mm512_or_si512(
                _mm512_sllv_epi64(one, _mm512_sub_epi64(first, from)),
                _mm512_sllv_epi64(one, _mm512_sub_epi64(last, from)),
            )) as u64;
            let bits = (group_bits - word_start).min(64);
            w.put_word(!zeros & (u64::MAX >> (64 - bits)), bits);
            word_start += 64;
        }
    }
    write_pairs(w, groups.remainder());
}

/// The 64 bits from byte `at` of `stream`, zeros past its end.
#[inline(always)]
fn word_at(stream: &[u8], at: usize) -> u64 {
    match stream.get(at..at + 8) {
        Some(b) => u64::from_le_bytes(b.try_into().expect("eight bytes")),
        None => {
            let mut w = [0u8; 8];
            let rest = stream.get(at..).unwrap_or(&[]);
            w[..rest.len()].copy_from_slice(rest);
            u64::from_le_bytes(w)
        }
    }
}

/// Room a reader's quotients need past the codes it reads: the vector reader stores a whole
/// vector of them at a time.
pub const SLACK: usize = 64;

/// Reads `n` codes from the start of `stream` into `q` (`n + SLACK` long): the bytes they took
/// and how many were escapes. Corrupt when the stream ends first, a code is longer than an
/// escape, or the last byte's bits after the codes are not zero.
#[inline(always)]
pub fn read(
    kernel: InstructionSet,
    stream: &[u8],
    q: &mut [u8],
    n: usize,
) -> Result<(usize, usize), Corrupt> {
    assert!(q.len() >= n + SLACK, "room for the quotients");
    let end_bits = match kernel {
        InstructionSet::Portable => ends_portable(stream, q, n)?,
        // SAFETY: the kernel is only chosen where the CPU has what it is compiled for.
        #[cfg(target_arch = "x86_64")]
        InstructionSet::Avx512 => unsafe { ends_avx512(stream, q, n)? },
    };
    let used = end_bits.div_ceil(8) as usize;
    if used > stream.len() {
        return Err(Corrupt);
    }
    if end_bits % 8 != 0 && stream[used - 1] >> (end_bits % 8) != 0 {
        return Err(Corrupt);
    }
    let (mut escapes, mut longest) = (0, 0);
    for &v in &q[..n] {
        escapes += (v as u32 == ESCAPE) as usize;
        longest = longest.max(v);
    }
    if longest as u32 > ESCAPE {
        return Err(Corrupt);
    }
    Ok((used, escapes))
}

/// Reads the codes a zero at a time: the bit after the last.
fn ends_portable(stream: &[u8], q: &mut [u8], n: usize) -> Result<u64, Corrupt> {
    let mut i = 0;
    // The bit after the last code read, and the first bit of the word being read.
    let mut end_bits: u64 = 0;
    let mut word_bits: u64 = 0;
    while i < n {
        let at = (word_bits / 8) as usize;
        if at >= stream.len() {
            return Err(Corrupt);
        }
        // Each zero ends a code: the ones since the code before are its quotient.
        let mut zeros = !word_at(stream, at);
        let left = n - i;
        if zeros.count_ones() as usize > left {
            // The word holds the stream's last codes: only the first `left` zeros are theirs.
            zeros = first_ones(zeros, left);
        }
        while zeros != 0 {
            let bit = word_bits + zeros.trailing_zeros() as u64;
            // (A run of ones past an escape is corrupt: clamped so as not to wrap.)
            q[i] = (bit - end_bits).min(u8::MAX as u64) as u8;
            end_bits = bit + 1;
            zeros &= zeros - 1;
            i += 1;
        }
        word_bits += 64;
    }
    Ok(end_bits)
}

/// The lowest `n` set bits of `bits`.
fn first_ones(mut bits: u64, n: usize) -> u64 {
    let mut kept = 0;
    for _ in 0..n {
        let lowest = bits & bits.wrapping_neg();
        kept |= lowest;
        bits ^= lowest;
    }
    kept
}

/// Reads the codes a word at a time: the positions of its zeros gathered in one instruction
/// (VBMI2's compress), the quotients their differences; the bit after the last.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi,avx512vbmi2,popcnt,lzcnt")]
unsafe fn ends_avx512(stream: &[u8], q: &mut [u8], n: usize) -> Result<u64, Corrupt> {
    use std::arch::x86_64::*;
    if n == 0 {
        return Ok(0);
    }
    let lane: [u8; 64] = std::array::from_fn(|i| i as u8);
    // SAFETY: 64 bytes.
    let lane = unsafe { _mm512_loadu_si512(lane.as_ptr() as *const _) };
    // Lane i takes lane i - 1 (lane 0's is replaced).
    let before = _mm512_sub_epi8(lane, _mm512_set1_epi8(1));
    let (mut i, mut at) = (0usize, 0usize);
    // The ones since the last zero, before the word being read.
    let mut run: i32 = 0;
    let mut zeros = 0u64;
    while i < n {
        if at >= stream.len() {
            return Err(Corrupt);
        }
        zeros = !word_at(stream, at);
        if zeros == 0 {
            // 64 ones: no code is that long.
            return Err(Corrupt);
        }
        let at_zeros = _mm512_maskz_compress_epi8(zeros, lane);
        let previous = _mm512_permutexvar_epi8(before, at_zeros);
        // The first code's ones began `run` bits before the word: as if its zero before were
        // at -1 - run.
        let previous = _mm512_mask_mov_epi8(previous, 1, _mm512_set1_epi8((-1 - run) as i8));
        let quotients = _mm512_sub_epi8(_mm512_sub_epi8(at_zeros, previous), _mm512_set1_epi8(1));
        let out = &mut q[i..i + 64];
        // SAFETY: 64 bytes' room (q holds n + SLACK, and i < n).
        unsafe { _mm512_storeu_si512(out.as_mut_ptr() as *mut _, quotients) };
        i += zeros.count_ones() as usize;
        run = zeros.leading_zeros() as i32;
        at += 8;
    }
    // The last word's zeros past the n-th end codes that are not the stream's.
    let past = i - n;
    let last = first_ones(zeros, zeros.count_ones() as usize - past);
    Ok((at as u64 - 8) * 8 + 64 - last.leading_zeros() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(qs: &[u32]) -> Vec<u8> {
        let mut out = vec![0u8; UnaryWriter::room_for(qs.len())];
        let mut w = UnaryWriter::new(&mut out);
        for &q in qs {
            w.put(q);
        }
        let len = w.finish();
        out.truncate(len);
        out
    }

    #[test]
    fn codes_come_back_across_words_and_take_their_bits() {
        let qs: Vec<u32> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 27) % (ESCAPE + 1))
            .collect();
        let stream = written(&qs);
        // Two at a time, the same bits.
        let mut paired = vec![0u8; UnaryWriter::room_for(qs.len())];
        let mut w = UnaryWriter::new(&mut paired);
        for two in qs.chunks(2) {
            match two {
                [a, b] => w.put_two(*a, *b),
                [a] => w.put(*a),
                _ => unreachable!(),
            }
        }
        let len = w.finish();
        assert_eq!(paired[..len], stream[..]);
        // And as each kernel writes them (a group with an escape among them too).
        let q8: Vec<u8> = qs.iter().map(|&q| q as u8).collect();
        for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
            let mut out = vec![0u8; UnaryWriter::room_for(qs.len())];
            let mut w = UnaryWriter::new(&mut out);
            write(kernel, &mut w, &q8);
            let len = w.finish();
            assert_eq!(out[..len], stream[..], "{kernel:?}");
        }
        let small: Vec<u8> = (0..1000u32).map(|i| ((i * 7) % 15) as u8).collect();
        let mut by = Vec::new();
        for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
            let mut out = vec![0u8; UnaryWriter::room_for(small.len())];
            let mut w = UnaryWriter::new(&mut out);
            write(kernel, &mut w, &small);
            let len = w.finish();
            by.push(out[..len].to_vec());
        }
        assert_eq!(by[0], by[1], "quotients of at most 14, four to a word");
        let bits: u32 = qs.iter().map(|q| q + 1).sum();
        assert_eq!(stream.len(), bits.div_ceil(8) as usize);
        let n = qs.len();
        let escapes = qs.iter().filter(|&&q| q == ESCAPE).count();
        let mut more = stream.clone();
        more.extend_from_slice(&[0xff; 9]);
        for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
            let mut back = vec![0; n + SLACK];
            assert_eq!(
                read(kernel, &stream, &mut back, n),
                Ok((stream.len(), escapes))
            );
            assert!(back[..n].iter().map(|&q| q as u32).eq(qs.iter().copied()));
            // Followed by other bytes, it still ends where its codes do.
            assert_eq!(
                read(kernel, &more, &mut back, n),
                Ok((stream.len(), escapes))
            );
        }
    }

    #[test]
    fn a_stream_short_of_codes_too_long_a_code_or_bits_after_its_end_is_corrupt() {
        for kernel in [InstructionSet::Portable, InstructionSet::detect()] {
            corrupt_or_not(kernel);
        }
    }

    fn corrupt_or_not(kernel: InstructionSet) {
        let read = |stream: &[u8], n: usize| read(kernel, stream, &mut vec![0; n + SLACK], n);
        let stream = written(&[3, 0, 16, 2]);
        // Four codes in 25 bits, then 7 zero bits of padding, read as codes of 0 if asked for
        // (the frame's length says where the stream ends); a twelfth is past its end...
        assert!(read(&stream, 11).is_ok());
        assert_eq!(read(&stream, 12), Err(Corrupt));
        // ...and a one in that padding is not the stream's.
        let mut padded_one = stream.clone();
        *padded_one.last_mut().unwrap() |= 0x80;
        assert_eq!(read(&padded_one, 4), Err(Corrupt));
        // Seventeen ones: no quotient is that long; nor 64.
        assert_eq!(read(&[0xff, 0xff, 0x01], 1), Err(Corrupt));
        assert_eq!(read(&[0xff; 9], 1), Err(Corrupt));
        assert_eq!(read(&[], 1), Err(Corrupt));
        assert_eq!(read(&[], 0), Ok((0, 0)));
        assert_eq!(read(&stream, 4), Ok((stream.len(), 1)));
    }
}
