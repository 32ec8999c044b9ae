//! How a link's frames are cut into chunks: on whole 4 KiB blocks of the latency buffer where
//! the frame size allows, so that on a block device a chunk's payload goes to the device from
//! where it lies in the ring (O_DIRECT from the ring's own pages), never copied by the CPU.
//!
//! Frame n lies at byte `(n mod capacity) × frame_bytes` of a page-aligned ring. It starts a
//! 4 KiB block when n is a multiple of `block_frames` (the fewest frames that make whole blocks)
//! and the capacity is one too; a chunk from such a frame, of a multiple of `block_frames`
//! frames, is whole blocks, in one piece or (wrapping at the ring's end) two. Chunks are cut so:
//! the first of a window ends on the next block boundary, every later one is `chunk_frames`
//! long, and the last is what is left of the window (written through the staging copy if it is
//! not whole blocks).

/// The largest direct-I/O alignment the chunking plans for (512 B sectors and 4 KiB blocks).
pub const ZERO_COPY_BLOCK_BYTES: u64 = 4096;

/// A default chunk's payload, about.
const DEFAULT_CHUNK_BYTES: u64 = 1 << 20;

/// Above this a block-aligned chunk is too large to be a default (frame sizes with few factors
/// of two): chunks are then about `DEFAULT_CHUNK_BYTES` and copied.
const MAX_ALIGNED_CHUNK_BYTES: u64 = 4 << 20;

fn gcd(mut a: u64, mut b: u64) -> u64 {
    debug_assert!(a > 0 || b > 0, "gcd(0, 0) divides nothing");
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The fewest frames whose bytes are whole `ZERO_COPY_BLOCK_BYTES` blocks: 128 for WIBEth's
/// 7200 B, 64 for a 5568 B superchunk, 512 for DAPHNE's 2008 B.
pub fn block_frames(frame_bytes: u64) -> u64 {
    assert!(frame_bytes > 0, "frames have bytes");
    let bf = ZERO_COPY_BLOCK_BYTES / gcd(frame_bytes, ZERO_COPY_BLOCK_BYTES);
    assert!(
        bf <= ZERO_COPY_BLOCK_BYTES && (bf * frame_bytes).is_multiple_of(ZERO_COPY_BLOCK_BYTES),
        "block_frames frames are whole blocks"
    );
    bf
}

/// The default frames per chunk: about 1 MiB, a whole number of blocks where that stays under
/// 4 MiB.
pub fn default_chunk_frames(frame_bytes: u64) -> u32 {
    assert!(frame_bytes > 0, "frames have bytes");
    let about = (DEFAULT_CHUNK_BYTES / frame_bytes).max(1);
    let bf = block_frames(frame_bytes);
    let aligned = (about / bf).max(1) * bf;
    let frames = if aligned * frame_bytes <= MAX_ALIGNED_CHUNK_BYTES {
        aligned
    } else {
        about
    };
    assert!(
        frames >= 1 && (frames == about || frames.is_multiple_of(bf)),
        "a chunk is at least a frame, and whole blocks unless about a default's bytes"
    );
    u32::try_from(frames).unwrap_or(u32::MAX)
}

/// A latency buffer of at least `frames` frames whose end is a block boundary (so chunks that
/// wrap are two whole-block pieces).
pub fn ring_capacity_frames(frames: u64, frame_bytes: u64) -> u64 {
    let bf = block_frames(frame_bytes);
    let capacity = frames.div_ceil(bf) * bf;
    assert!(capacity >= frames && capacity.is_multiple_of(bf));
    debug_assert!(
        capacity - frames < bf,
        "rounded up by less than a block's frames"
    );
    capacity
}

/// How many frames from frame `next` the next chunk takes: up to the block boundary at or
/// before `next + chunk_frames` when chunks are whole blocks (`chunk_frames` a multiple of
/// `block_frames`), else `chunk_frames`. Always at least one.
pub fn frames_for_next_chunk(next: u64, chunk_frames: u64, block_frames: u64) -> u64 {
    assert!(chunk_frames > 0 && block_frames > 0);
    if !chunk_frames.is_multiple_of(block_frames) {
        return chunk_frames;
    }
    let end = next + chunk_frames;
    let n = end - end % block_frames - next;
    assert!(
        n >= 1 && n <= chunk_frames,
        "a chunk of 1 to {chunk_frames} frames"
    );
    debug_assert!(
        (next + n).is_multiple_of(block_frames),
        "it ends on a block boundary"
    );
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dune_frames_make_whole_blocks() {
        assert_eq!(block_frames(7200), 128);
        assert_eq!(block_frames(5568), 64);
        assert_eq!(block_frames(2008), 512);
        assert_eq!(block_frames(4096), 1);
        assert_eq!(block_frames(1001), 4096);
        for fb in [7200u64, 5568, 2008, 4096, 8192, 12 * 472] {
            assert!((block_frames(fb) * fb).is_multiple_of(ZERO_COPY_BLOCK_BYTES));
        }
    }

    #[test]
    fn default_chunks_are_about_a_mebibyte_of_whole_blocks() {
        assert_eq!(default_chunk_frames(7200), 128); // 900 KiB
        assert_eq!(default_chunk_frames(5568), 128); // 696 KiB
        assert_eq!(default_chunk_frames(2008), 512); // 1004 KiB
                                                     // 4096 frames of 1001 B would be 3.9 MiB: still whole blocks.
        assert_eq!(default_chunk_frames(1001), 4096);
        // 4096 frames of 3001 B would be 11.7 MiB: about 1 MiB instead, copied.
        assert_eq!(default_chunk_frames(3001), (1 << 20) / 3001);
        assert_eq!(
            default_chunk_frames(8 << 20),
            1,
            "a frame larger than a chunk"
        );
    }

    #[test]
    fn chunks_end_on_block_boundaries_after_the_first() {
        let (cf, bf) = (128, 64);
        let mut next = 1000; // a window starting mid-block
        let first = frames_for_next_chunk(next, cf, bf);
        assert_eq!(first, 1088 - 1000, "to the boundary at or before 1128");
        next += first;
        for _ in 0..5 {
            let n = frames_for_next_chunk(next, cf, bf);
            assert_eq!((next % bf, n), (0, cf), "whole chunks from a boundary");
            next += n;
        }
        // Chunks that are not whole blocks are cut as asked.
        assert_eq!(frames_for_next_chunk(1000, 100, 64), 100);
        assert_eq!(frames_for_next_chunk(63, 64, 64), 1);
    }

    #[test]
    fn rings_end_on_block_boundaries() {
        assert_eq!(ring_capacity_frames(1000, 7200), 1024);
        assert_eq!(ring_capacity_frames(1024, 7200), 1024);
        assert_eq!(ring_capacity_frames(3, 4096), 3);
    }
}
