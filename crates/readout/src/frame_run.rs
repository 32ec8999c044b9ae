//! A run of consecutive frames lent in place by the latency buffer (`LatencyBuffer::read_with`):
//! up to two pieces of the ring's memory (the run may wrap its end), with each frame's CRC-32C.

use std::sync::atomic::{AtomicU32, Ordering};

/// Consecutive frames lent in place by `LatencyBuffer::read_with`: the ring's memory from the
/// first frame to the end of the ring (`head`) and, if the run wraps, from its start (`tail`).
pub struct FrameRun<'a> {
    pub(crate) head: &'a [u8],
    pub(crate) tail: &'a [u8],
    pub(crate) frame_bytes: usize,
    /// The frames' CRC-32Cs, split as the frames are.
    pub(crate) crc_head: &'a [AtomicU32],
    pub(crate) crc_tail: &'a [AtomicU32],
}

impl<'a> FrameRun<'a> {
    pub(crate) fn empty(frame_bytes: usize) -> Self {
        assert!(frame_bytes > 0, "a frame has bytes");
        FrameRun {
            head: &[],
            tail: &[],
            frame_bytes,
            crc_head: &[],
            crc_tail: &[],
        }
    }

    /// The CRC-32C of frame `i` of the run, as its producer computed it. Like the frames, only
    /// to be trusted once `read_with` returned `Ok`.
    pub fn frame_crc(&self, i: usize) -> u32 {
        let in_head = self.crc_head.len();
        assert!(
            i < in_head + self.crc_tail.len(),
            "frame {i} of a run of {}",
            self.frames()
        );
        let a = if i < in_head {
            &self.crc_head[i]
        } else {
            &self.crc_tail[i - in_head]
        };
        a.load(Ordering::Relaxed)
    }

    pub fn frames(&self) -> usize {
        debug_assert!(
            self.head.len().is_multiple_of(self.frame_bytes)
                && self.tail.len().is_multiple_of(self.frame_bytes),
            "a run holds whole frames"
        );
        (self.head.len() + self.tail.len()) / self.frame_bytes
    }

    /// Frame `i` of the run.
    pub fn frame(&self, i: usize) -> &'a [u8] {
        assert!(i < self.frames(), "frame {i} of a run of {}", self.frames());
        let in_head = self.head.len() / self.frame_bytes;
        let (part, j) = if i < in_head {
            (self.head, i)
        } else {
            (self.tail, i - in_head)
        };
        &part[j * self.frame_bytes..(j + 1) * self.frame_bytes]
    }

    /// Frames `range` as at most two contiguous byte slices (empty ones left out).
    pub fn parts(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = &'a [u8]> {
        assert!(
            range.start <= range.end && range.end <= self.frames(),
            "frames {range:?} of a run of {}",
            self.frames()
        );
        let in_head = self.head.len() / self.frame_bytes;
        let fb = self.frame_bytes;
        let h = range.start.min(in_head)..range.end.min(in_head);
        let t = range.start.max(in_head) - in_head..range.end.max(in_head) - in_head;
        [
            &self.head[h.start * fb..h.end * fb],
            &self.tail[t.start * fb..t.end * fb],
        ]
        .into_iter()
        .filter(|p| !p.is_empty())
    }
}
