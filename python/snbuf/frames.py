"""DUNE's frame layouts as snbuf stores them (docs/FORMAT.md, "Frames"): where each frame type
keeps its timestamp, sequence number and identity, decoded for many frames at once with numpy.
Frames are given as a uint8 array of shape (frames, frame_bytes)."""

from dataclasses import dataclass

import numpy as np

WIB1_Z = 1 << 63


@dataclass(frozen=True)
class Layout:
    name: str
    frame_bytes: int
    subframes: int
    ticks_per_frame: int
    clock_hz: int
    timestamp: str  # "u64", "wib2" or "wib1"
    timestamp_offset: int = 0
    header: str = "none"  # "daqeth", "wib2", "wib1" or "none"

    @property
    def subframe_bytes(self):
        return self.frame_bytes // self.subframes

    @property
    def ticks_per_subframe(self):
        return self.ticks_per_frame // self.subframes

    @property
    def adc(self):
        """(channels, samples per frame) of the frame type's ADC values, or None for custom
        frames."""
        return ADC_SHAPES.get(self.name)

    @property
    def ticks_per_sample(self):
        """Ticks between two ADC samples: a frame's ticks over its samples, so 32 for WIBEth and
        WIB2, 31.25 for TDEEth (2000 ticks, 64 samples), 25 for ProtoDUNE WIB on its 50 MHz
        clock, 1 for DAPHNE streams. None without ADC values."""
        if self.adc is None:
            return None
        return self.ticks_per_frame / self.adc[1]

    def sample_offsets_ticks(self):
        """float64 array: ticks from a frame's timestamp to each of its samples (exact)."""
        return np.arange(self.adc[1]) * (self.ticks_per_frame / self.adc[1])

    def unpack_adc(self, frames):
        """(frames, samples, channels) uint16: the ADC values of frames of this type (all of
        DUNE's; not custom frames)."""
        frames = _as_frames(frames, self.frame_bytes)
        n = len(frames)
        if self.name in ("wibeth", "tdeeth"):
            return unpack_wibeth_adc(frames)
        if self.name == "daphneeth-stream":
            rows = frames[:, DAPHNE_STREAM_ADC_OFFSET:].reshape(n * 280, 7)
            return _unpack14(rows, 4).reshape(n, 280, 4)
        if self.name == "wib2":
            sub = frames.reshape(n * 12, 472)[:, WIB2_ADC_OFFSET:WIB2_ADC_OFFSET + 448]
            return _unpack14(sub, 256).reshape(n, 12, 256)
        if self.name == "protodune-wib":
            return _unpack_wib1(frames.reshape(n * 12, 464)).reshape(n, 12, 256)
        raise ValueError(f"no ADC values to decode in {self.name} frames")

    def subframe_timestamps(self, frames):
        """(frames, subframes) uint64: the timestamp of every detector frame."""
        frames = _as_frames(frames, self.frame_bytes)
        sub = frames.reshape(len(frames), self.subframes, self.subframe_bytes)
        if self.timestamp == "u64":
            o = self.timestamp_offset
            return _u64(sub[:, :, o:o + 8])
        if self.timestamp == "wib2":
            lo = _u32(sub[:, :, 4:8]).astype(np.uint64)
            hi = _u32(sub[:, :, 8:12]).astype(np.uint64)
            return lo | (hi << np.uint64(32))
        w = _u64(sub[:, :, 8:16])
        z = (w & np.uint64(WIB1_Z)) != 0
        return np.where(z, w & np.uint64((1 << 48) - 1), w & ~np.uint64(WIB1_Z))

    def timestamps(self, frames):
        """uint64 array: each frame's timestamp (its first detector frame's)."""
        return self.subframe_timestamps(frames)[:, 0]

    def sequence(self, frames):
        """The DAQEthHeader's 12-bit seq_id of each frame, or None for layouts without one."""
        if self.header != "daqeth":
            return None
        return ((_u64(_as_frames(frames, self.frame_bytes)[:, 0:8]) >> np.uint64(40))
                & np.uint64(0xFFF)).astype(np.uint16)

    def identity(self, frames):
        """dict of arrays: version, det_id, crate_id, slot_id, stream_id (None without one)."""
        frames = _as_frames(frames, self.frame_bytes)
        if self.header == "daqeth":
            w = _u64(frames[:, 0:8])
            f = lambda lo, n: ((w >> np.uint64(lo)) & np.uint64((1 << n) - 1)).astype(np.uint16)
            return {"version": f(0, 6), "det_id": f(6, 6), "crate_id": f(12, 10),
                    "slot_id": f(22, 4), "stream_id": f(26, 8)}
        if self.header == "wib2":
            w = _u32(frames[:, 0:4]).astype(np.uint64)
            f = lambda lo, n: ((w >> np.uint64(lo)) & np.uint64((1 << n) - 1)).astype(np.uint16)
            return {"version": f(0, 6), "det_id": f(6, 6), "crate_id": f(12, 10),
                    "slot_id": f(22, 3), "stream_id": f(26, 6)}
        if self.header == "wib1":
            w = _u32(frames[:, 0:4]).astype(np.uint64)
            f = lambda lo, n: ((w >> np.uint64(lo)) & np.uint64((1 << n) - 1)).astype(np.uint16)
            zero = np.zeros(len(frames), dtype=np.uint16)
            return {"version": f(8, 5), "det_id": zero, "crate_id": f(16, 5),
                    "slot_id": f(21, 3), "stream_id": f(13, 3)}
        return None


def _as_frames(frames, frame_bytes):
    a = np.asarray(frames, dtype=np.uint8)
    return a.reshape(-1, frame_bytes)


def _u64(b):
    return np.ascontiguousarray(b).view("<u8")[..., 0]


def _u32(b):
    return np.ascontiguousarray(b).view("<u4")[..., 0]


def _daqeth(name, frame_bytes, ticks):
    return Layout(name, frame_bytes, 1, ticks, 62_500_000, "u64", 8, "daqeth")


LAYOUTS = {
    "wibeth": _daqeth("wibeth", 7200, 2048),
    "tdeeth": _daqeth("tdeeth", 7200, 2000),
    "daphneeth-stream": _daqeth("daphneeth-stream", 2008, 280),
    "wib2": Layout("wib2", 12 * 472, 12, 12 * 32, 62_500_000, "wib2", 0, "wib2"),
    "protodune-wib": Layout("protodune-wib", 12 * 464, 12, 12 * 25, 50_000_000, "wib1", 0, "wib1"),
}


def layout(frame_type, frame_bytes=None, ticks_per_frame=None):
    """The layout of a frame type as a manifest names it (`custom:BYTES:TICKS[:OFFSET]` too)."""
    if frame_type in LAYOUTS:
        return LAYOUTS[frame_type]
    if frame_type.startswith("custom"):
        parts = frame_type.split(":")
        fb = int(parts[1]) if len(parts) > 1 else frame_bytes
        ticks = int(parts[2]) if len(parts) > 2 else ticks_per_frame
        offset = int(parts[3]) if len(parts) > 3 else 0
        return Layout(frame_type, fb, 1, ticks, 50_000_000, "u64", offset, "none")
    raise ValueError(f"unknown frame type {frame_type!r}")


# WIBEth and TDEEth: 64 time samples of 64 channels, 14-bit values packed LSB first after the
# 32 bytes of headers (docs/FORMAT.md; snbuf-frames adc.rs).
ETH_ADC_OFFSET = 32
ETH_SAMPLES = 64
ETH_CHANNELS = 64
ADC_BITS = 14


# WIB2: one sample of 256 channels per 472-byte detector frame, after its 20-byte header.
WIB2_ADC_OFFSET = 20
# DAPHNE Ethernet stream: 280 samples of 4 channels, sample-major, after 48 bytes of headers.
DAPHNE_STREAM_ADC_OFFSET = 48
# (channels, samples per stored frame), as snbuf-frames' AdcShape.
ADC_SHAPES = {"wibeth": (64, 64), "tdeeth": (64, 64), "wib2": (256, 12),
              "daphneeth-stream": (4, 280), "protodune-wib": (256, 12)}


def _wib1_channel_order():
    # Segment s of a COLDATA block holds channels (s % 2) * 4 .. + 3 of ADCs (s // 2) * 2 and
    # (s // 2) * 2 + 1; decoded as [block, segment, odd ADC, k], channel block*64 + adc*8 + ch.
    order = np.zeros((4, 8, 2, 4), dtype=np.int64)
    for b in range(4):
        for seg in range(8):
            for odd in range(2):
                for k in range(4):
                    order[b, seg, odd, k] = b * 64 + ((seg // 2) * 2 + odd) * 8 + (seg % 2) * 4 + k
    return order.ravel()


_WIB1_ORDER = _wib1_channel_order()


def _unpack_wib1(sub):
    """(n, 256) uint16 from (n, 464) ProtoDUNE WIB1 frames: 12-bit values in COLDATA segments
    (detdataformats WIBFrame.hpp, ColdataSegment's bit fields)."""
    n = len(sub)
    seg = np.ascontiguousarray(sub[:, 16:].reshape(n, 4, 112)[:, :, 16:]).reshape(n, 4, 8, 12)
    w = seg.view("<u4").astype(np.uint32)
    w0, w1, w2 = w[..., 0], w[..., 1], w[..., 2]
    b = lambda x, lo, k: (x >> np.uint32(lo)) & np.uint32((1 << k) - 1)
    out = np.zeros((n, 4, 8, 2, 4), dtype=np.uint32)
    for odd in (0, 1):
        o = 8 * odd
        out[..., odd, 0] = b(w0, o, 8) | b(w0, 16 + o, 4) << np.uint32(8)
        out[..., odd, 1] = b(w0, 20 + o, 4) | b(w1, o, 8) << np.uint32(4)
        out[..., odd, 2] = b(w1, 16 + o, 8) | b(w2, o, 4) << np.uint32(8)
        out[..., odd, 3] = b(w2, 4 + o, 4) | b(w2, 16 + o, 8) << np.uint32(4)
    result = np.zeros((n, 256), dtype=np.uint16)
    result[:, _WIB1_ORDER] = out.reshape(n, 256).astype(np.uint16)
    return result


def _unpack14(rows, n):
    """(rows, n) uint16 from rows of n 14-bit values packed LSB first."""
    bits = np.unpackbits(np.ascontiguousarray(rows), axis=1, bitorder="little")
    bits = bits.reshape(len(rows), n, ADC_BITS).astype(np.uint16)
    return (bits * (1 << np.arange(ADC_BITS, dtype=np.uint16))).sum(axis=2, dtype=np.uint16)


def unpack_wibeth_adc(frames):
    """(frames, 64 samples, 64 channels) uint16: the ADC values of WIBEth (or TDEEth) frames."""
    frames = _as_frames(frames, 7200)
    row = ETH_CHANNELS * ADC_BITS // 8
    adc = frames[:, ETH_ADC_OFFSET:ETH_ADC_OFFSET + ETH_SAMPLES * row]
    return _unpack14(adc.reshape(len(frames) * ETH_SAMPLES, row),
                     ETH_CHANNELS).reshape(len(frames), ETH_SAMPLES, ETH_CHANNELS)
