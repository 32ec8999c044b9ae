"""Coded link files (`<file>.snbl`, written by `snbuf export --codec frames`) back to the link
files they stand for, byte for byte, in Python alone: snbuf's frame codec (crates/codec) and its
link-file container (crates/burst/src/coded_link.rs), read as snbuf reads them.

A coded link file: magic `SNBL`, format 1, the frame type's name; records, each a kind byte
(0 raw bytes, 1 a coded chunk payload) and a u32 length before its bytes; then 0xff, the link
file's length (u64) and CRC-32C. A coded payload (`SNBC`, format 2, or 1 as written before): the
frame type, the frame length, the raw length and CRC-32C, then each frame stored raw (0) or
modeled (1: headers verbatim, each channel's samples predicted and Rice-coded: in format 2 the
codes' quotients, their low bits and the escaped samples apart; in format 1 over four
interleaved bit streams), then any tail.
Every payload is checked against its raw CRC, the whole file against its own: a strict decode
is the link file exactly or a ValueError; one as snbuf's readers do it (`keep_reading`) turns
what does not decode into a chunk that fails its CRC. Never a wrong frame.

In Python with numpy, a frame at a time (format 2's parts as arrays; format 1's codes bit by bit):
for a slice, not a whole burst. For more, `snbuf extract` decodes a link at the codec's speed.
"""
import os
import struct

import numpy as np

from ._crc32c import crc32c
from .frames import (ADC_BITS, DAPHNE_STREAM_ADC_OFFSET, ETH_ADC_OFFSET, LAYOUTS, WIB2_ADC_OFFSET,
                     layout)

LINK_MAGIC, LINK_VERSION = b"SNBL", 1
CHUNK_MAGIC, CHUNK_VERSIONS = b"SNBC", (1, 2)
RAW, CODED, END = 0, 1, 0xFF
STORED_RAW, STORED_MODELED = 0, 1
SUFFIX = ".snbl"
# The codec a coded copy's manifest names (crates/burst/src/coded_link.rs CODEC_NAME).
# Its number is the newest payload format written; a reader reads every codec of CODECS_READ.
CODEC_NAME = "snbuf-frames-2"
CODECS_READ = ("snbuf-frames-1", CODEC_NAME)


class NewerFormat(ValueError):
    """Bytes a newer snbuf wrote: not damage, so never read as zeros, even when keeping on."""
# A payload that does not decode reads as this many zeros at most a coded byte (coded_link.rs).
MAX_ZEROS_PER_CODED_BYTE = 64
# The codec's constants (crates/codec/src/rice.rs, unary.rs, frame_model.rs and its v1.rs): an
# escape is ESCAPE_ONES ones (format 1: then ESCAPED_BITS of the value; format 2: then a zero).
STREAMS, ESCAPE_ONES, ESCAPED_BITS, MAX_K = 4, 16, 16, 14

# ProtoDUNE WIB1 (crates/frames/src/adc.rs): a WIB header, then four COLDATA blocks of a
# 16-byte header and 96 bytes of segments, in each 464-byte detector frame.
WIB1_HEADER_BYTES, WIB1_BLOCK_BYTES, COLDATA_HEADER_BYTES = 16, 112, 16


class Shape:
    """Where a frame type's ADC values lie (crates/frames/src/adc.rs's AdcShape)."""

    def __init__(self, kind, channels, samples, frame_bytes, offset=0, bits=ADC_BITS):
        self.kind, self.channels, self.samples = kind, channels, samples
        self.frame_bytes, self.offset, self.bits = frame_bytes, offset, bits

    def adc_ranges(self):
        sub = self.frame_bytes // self.samples
        if self.kind == "rows":
            row = self.channels * ADC_BITS // 8
            return [(self.offset, self.offset + self.samples * row)]
        if self.kind == "wib2":
            at = WIB2_ADC_OFFSET
            return [(s * sub + at, s * sub + at + 256 * ADC_BITS // 8) for s in range(self.samples)]
        block = lambda s, b: s * sub + WIB1_HEADER_BYTES + b * WIB1_BLOCK_BYTES
        return [(block(s, b) + COLDATA_HEADER_BYTES, block(s, b) + WIB1_BLOCK_BYTES)
                for s in range(self.samples) for b in range(4)]

    def write_samples(self, frame, values):
        """Writes `values` (samples x channels) into the bytearray `frame`'s ADC bits."""
        sub = self.frame_bytes // self.samples
        if self.kind == "wib1":
            for s in range(self.samples):
                for c in range(self.channels):
                    _wib1_pack(frame, s * sub, c, int(values[s, c]))
            return
        row = self.channels * ADC_BITS // 8
        packed = _pack14(values)
        for s in range(self.samples):
            at = self.offset + s * row if self.kind == "rows" else s * sub + WIB2_ADC_OFFSET
            frame[at:at + row] = packed[s].tobytes()


def shape_of(frame_type, frame_bytes):
    """The shape of a frame type (as snbuf names it), or None: a type the codec stores raw."""
    shapes = {
        "wibeth": Shape("rows", 64, 64, LAYOUTS["wibeth"].frame_bytes, offset=ETH_ADC_OFFSET),
        "tdeeth": Shape("rows", 64, 64, LAYOUTS["tdeeth"].frame_bytes, offset=ETH_ADC_OFFSET),
        "daphneeth-stream": Shape("rows", 4, 280, LAYOUTS["daphneeth-stream"].frame_bytes,
                                  offset=DAPHNE_STREAM_ADC_OFFSET),
        "wib2": Shape("wib2", 256, 12, LAYOUTS["wib2"].frame_bytes),
        "protodune-wib": Shape("wib1", 256, 12, LAYOUTS["protodune-wib"].frame_bytes, bits=12),
    }
    s = shapes.get(frame_type)
    return s if s is not None and s.frame_bytes == frame_bytes else None


def _pack14(values):
    """(samples, channels) values as rows of LSB-first 14-bit fields: (samples, channels*14/8)."""
    v = values.astype(np.uint64).reshape(values.shape[0], -1, 4)
    w = v[..., 0] | v[..., 1] << np.uint64(14) | v[..., 2] << np.uint64(28) | v[..., 3] << np.uint64(42)
    return w.astype("<u8").view(np.uint8).reshape(values.shape[0], -1, 8)[..., :7].reshape(values.shape[0], -1)


def _wib1_pack(frame, base, channel, value):
    """ProtoDUNE WIB1: `value` (12 bits) as channel `channel` of the detector frame at `base`."""
    block, c = divmod(channel, 64)
    adc, ch = divmod(c, 8)
    seg = (adc // 2) * 2 + ch // 4
    at = base + WIB1_HEADER_BYTES + block * WIB1_BLOCK_BYTES + COLDATA_HEADER_BYTES + seg * 12
    words = list(struct.unpack_from("<III", frame, at))
    odd = adc % 2

    def put(i, lo, n, x):
        m = ((1 << n) - 1) << lo
        words[i] = (words[i] & ~m & 0xFFFFFFFF) | ((x << lo) & m)

    v = value & 0xFFF
    k = ch % 4
    if k == 0:
        put(0, 8 * odd, 8, v), put(0, 16 + 8 * odd, 4, v >> 8)
    elif k == 1:
        put(0, 20 + 8 * odd, 4, v), put(1, 8 * odd, 8, v >> 4)
    elif k == 2:
        put(1, 16 + 8 * odd, 8, v), put(2, 8 * odd, 4, v >> 8)
    else:
        put(2, 4 + 8 * odd, 4, v), put(2, 16 + 8 * odd, 8, v >> 4)
    struct.pack_into("<III", frame, at, *words)


def _zigzag(r):
    """Signed to unsigned, small magnitudes first: 0, -1, 1, -2, 2, ... as 0, 1, 2, 3, 4."""
    return 2 * r if r >= 0 else -2 * r - 1


def _unzigzag(m):
    return (m >> 1) ^ -(m & 1)


class _Model:
    """One link's channels as the codec sees them, frame after frame of a chunk."""

    def __init__(self, frame_type, shape):
        self.frame_type, self.shape = frame_type, shape
        start = 1 << (shape.bits - 1)
        n = shape.channels
        self.mean, self.from_last, self.k = [start] * n, [1] * n, [4] * n
        self.before = [start] * n
        self.headers, at = [], 0
        for a, b in shape.adc_ranges() + [(shape.frame_bytes, shape.frame_bytes)]:
            if a > at:
                self.headers.append((at, a))
            at = b
        self.header_bytes = sum(b - a for a, b in self.headers)
        self.full_scale = (1 << shape.bits) - 1

    def least_coded_bytes(self, version):
        lengths = 4 * (STREAMS - 1) if version == 1 else 0
        return self.header_bytes + lengths + (self.shape.channels * self.shape.samples + 7) // 8

    def learn(self, values):
        """Each channel's prediction and Rice parameter for the next frame (rice.rs learn_frame)."""
        n, samples = self.shape.channels, self.shape.samples
        for c in range(n):
            col = values[:, c].tolist()
            prev, mean = self.before[c], self.mean[c]
            total = cost_last = cost_mean = 0
            for v in col:
                total += v
                cost_last += _zigzag(v - prev)
                cost_mean += _zigzag(v - mean)
                prev = v
            from_last = cost_last <= cost_mean
            cost = cost_last if from_last else cost_mean
            k = 0
            while k < MAX_K and (samples << (k + 1)) < cost:
                k += 1
            self.k[c], self.from_last[c] = k, int(from_last)
            self.mean[c] = (total + samples // 2) // samples
            self.before[c] = col[-1]

    def observe(self, frame):
        """A frame stored raw: the model learns from it as the encoder did."""
        self.learn(self._values_of(frame))

    def _values_of(self, frame):
        frames = np.frombuffer(bytes(frame), dtype=np.uint8).reshape(1, -1)
        return layout(self.frame_type).unpack_adc(frames)[0].astype(np.int64)

    def decode(self, body, version):
        """One modeled frame of format `version` from exactly its coded bytes."""
        sh = self.shape
        frame = bytearray(sh.frame_bytes)
        at = 0
        for a, b in self.headers:
            if at + (b - a) > len(body):
                raise ValueError("a coded frame ends in its headers")
            frame[a:b] = body[at:at + b - a]
            at += b - a
        n, samples = sh.channels, sh.samples
        codes = self._codes_v1(body, at) if version == 1 else self._codes_v2(body, at)
        values = np.zeros((samples, n), dtype=np.int64)
        prev = list(self.before)
        for s in range(samples):
            row = codes[s]
            for c in range(n):
                code = row[c]
                if code < 0:
                    v = ~code
                else:
                    m = self.mean[c]
                    predicted = m + self.from_last[c] * (prev[c] - m)
                    v = predicted + _unzigzag(code)
                if v < 0 or v > self.full_scale:
                    raise ValueError("a decoded sample beyond the ADC's full scale")
                values[s, c] = v
            prev = values[s].tolist()
        sh.write_samples(frame, values)
        self.learn(values)
        return bytes(frame)

    def _codes_v1(self, body, at):
        """Format 1: the codes of four interleaved bit streams, their lengths before them."""
        if at + 4 * (STREAMS - 1) > len(body):
            raise ValueError("a coded frame ends before its streams")
        lengths = list(struct.unpack_from(f"<{STREAMS - 1}I", body, at))
        at += 4 * (STREAMS - 1)
        rest = len(body) - at - sum(lengths)
        if rest < 0:
            raise ValueError("a coded frame's streams are longer than it")
        lengths.append(rest)
        codes = [[0] * self.shape.channels for _ in range(self.shape.samples)]
        for g in range(STREAMS):
            stream = body[at:at + lengths[g]]
            at += lengths[g]
            self._read_stream(stream, g, codes)
        return codes

    def _codes_v2(self, body, at):
        """Format 2 (frame_model.rs): the codes' quotients as one unary stream, then their low
        bits (each channel's k, row by row), then the escaped samples (u16 each), in the
        samples' order; each part ends where the one before and the parameters say."""
        n, samples = self.shape.channels, self.shape.samples
        count = n * samples
        bits = np.unpackbits(np.frombuffer(bytes(body[at:]), dtype=np.uint8), bitorder="little")
        ends = np.flatnonzero(bits == 0)[:count]
        if len(ends) < count:
            raise ValueError("a coded frame ends in its quotients")
        q = np.diff(ends, prepend=-1) - 1
        if q.max(initial=0) > ESCAPE_ONES:
            raise ValueError("a coded frame's quotient is longer than an escape")
        used_bits = int(ends[-1]) + 1 if count else 0
        used = (used_bits + 7) // 8
        if bits[used_bits:8 * used].any():
            raise ValueError("a coded frame's quotients do not end where its codes do")
        ks = np.tile(np.array(self.k, dtype=np.int64), samples)
        low_bits = int(ks.sum())
        low_bytes = (low_bits + 7) // 8
        escaped = q == ESCAPE_ONES
        if len(body) - at != used + low_bytes + 2 * int(escaped.sum()):
            raise ValueError("a coded frame's parts do not add up to its length")
        if bits[8 * used + low_bits:8 * (used + low_bytes)].any():
            raise ValueError("a coded frame's low bits do not end where its codes do")
        # Each code's low bits: bit j of code i at starts[i] + j, for j below its k.
        low = np.concatenate([bits[8 * used:8 * used + low_bits], np.zeros(MAX_K, np.uint8)])
        starts = np.cumsum(ks) - ks
        place = np.arange(MAX_K)
        picked = low[starts[:, None] + place[None, :]].astype(np.int64) * (place[None, :] < ks[:, None])
        low_values = (picked << place[None, :]).sum(axis=1)
        codes = (q.astype(np.int64) << ks) | low_values
        values = np.frombuffer(bytes(body[at + used + low_bytes:]), dtype="<u2").astype(np.int64)
        codes[escaped] = ~values
        return codes.reshape(samples, n).tolist()

    def _read_stream(self, stream, g, codes):
        """Stream g's codes (channels g, g+4, ...) into `codes`: each a mapped residual, or
        ~value (negative) where escaped. Its codes must end in its last byte."""
        bits = int.from_bytes(stream, "little")
        length = 8 * len(stream)
        pos = 0
        ks = self.k
        for row in codes:
            for c in range(g, self.shape.channels, STREAMS):
                window = (bits >> pos) & 0xFFFFFFFFFFFF
                q = ((window ^ (window + 1)).bit_length() - 1)  # trailing ones
                if q < ESCAPE_ONES:
                    k = ks[c]
                    row[c] = (q << k) | ((window >> (q + 1)) & ((1 << k) - 1))
                    pos += q + 1 + k
                else:
                    row[c] = ~((window >> ESCAPE_ONES) & 0xFFFF)
                    pos += ESCAPE_ONES + ESCAPED_BITS
        if not (pos <= length < pos + 8) or bits >> pos:
            raise ValueError("a coded frame's stream does not end where its codes do")


def _frame_bytes_of(frame_type):
    """A frame type's frame length as snbuf names the type (`custom:BYTES:TICKS` too); a
    ValueError for a name snbuf does not know."""
    try:
        return layout(frame_type).frame_bytes
    except (ValueError, IndexError):
        raise ValueError(f"frame type {frame_type!r} unknown") from None


def claimed_raw_len(coded):
    """The raw length a coded payload says it has, if readable and at most MAX_ZEROS_PER_CODED_BYTE
    times its coded length (what a reader fills with zeros where it does not decode)."""
    if len(coded) < 6:
        return None
    at = 6 + coded[5] + 4
    if len(coded) < at + 8:
        return None
    (raw,) = struct.unpack_from("<Q", coded, at)
    return raw if raw <= len(coded) * MAX_ZEROS_PER_CODED_BYTE else None


def decode_chunk(coded, frame_type):
    """The raw bytes of one coded chunk payload (`SNBC`), checked against its CRC-32C."""
    if coded[:4] != CHUNK_MAGIC:
        raise ValueError("not an snbuf-coded chunk (no SNBC magic)")
    if len(coded) < 6:
        raise ValueError("the coded chunk ends early")
    version = coded[4]
    if version < min(CHUNK_VERSIONS):
        raise ValueError(f"format {version}, which no snbuf wrote")
    if version > max(CHUNK_VERSIONS):
        raise NewerFormat(f"coded in format {version}; this reader reads formats {CHUNK_VERSIONS}")
    name_len = coded[5]
    name = coded[6:6 + name_len].decode("utf-8", "replace")
    at = 6 + name_len
    if len(coded) < at + 16:
        raise ValueError("the coded chunk ends early")
    frame_bytes, raw_len, stored_crc = struct.unpack_from("<IQI", coded, at)
    at += 16
    if name != frame_type:
        raise ValueError(f"a payload of {name} in a file of {frame_type}")
    if frame_bytes == 0 or frame_bytes != _frame_bytes_of(name):
        raise ValueError(f"frame type {name!r} with frames of {frame_bytes} B")
    shape = shape_of(name, frame_bytes)
    model = _Model(name, shape) if shape else None
    frames, tail = divmod(raw_len, frame_bytes)
    least = 1 + (min(4 + model.least_coded_bytes(version), frame_bytes) if model else frame_bytes)
    if frames * least + tail > len(coded) - at:
        raise ValueError("the coded chunk claims more than its bytes can hold")
    out = bytearray()
    for n in range(frames):
        if at >= len(coded):
            raise ValueError(f"the coded chunk ends in frame {n}")
        how = coded[at]
        at += 1
        if how == STORED_RAW:
            frame = coded[at:at + frame_bytes]
            if len(frame) != frame_bytes:
                raise ValueError(f"the coded chunk ends in frame {n}")
            at += frame_bytes
            if model:
                model.observe(frame)
            out += frame
        elif how == STORED_MODELED and model:
            if at + 4 > len(coded):
                raise ValueError(f"the coded chunk ends in frame {n}")
            (length,) = struct.unpack_from("<I", coded, at)
            at += 4
            body = coded[at:at + length]
            if len(body) != length:
                raise ValueError(f"the coded chunk ends in frame {n}")
            at += length
            out += model.decode(body, version)
        else:
            raise ValueError(f"frame {n} is stored in an unknown way ({how})")
    if at + tail > len(coded):
        raise ValueError("the coded chunk ends in its tail")
    out += coded[at:at + tail]
    at += tail
    if at != len(coded):
        raise ValueError(f"{len(coded) - at} bytes after the end of the coded chunk")
    got = crc32c(bytes(out))
    if got != stored_crc:
        raise ValueError(f"the decoded bytes do not match their CRC-32C (stored {stored_crc:#010x}, "
                         f"got {got:#010x}): a corrupt chunk")
    return bytes(out)


def decode_link_file(path, out, keep_reading=False):
    """Writes the link file the coded file `path` holds into the binary file `out`; returns
    (bytes written, damaged). A record at a time: memory holds one chunk's payload, whatever the
    file's size. Strict (`keep_reading` False): a ValueError, naming the file and what is wrong,
    wherever it is not the link file exactly. As snbuf's readers do (`keep_reading`): a payload
    that does not decode is written as zeros (its chunk then fails its CRC, as a damaged chunk of
    a link file does), the file ends where its records can no longer be told apart, and damaged
    says so; never a wrong frame either way."""
    with open(path, "rb") as f:
        try:
            return _decode_link(_Records(f), _Out(out), keep_reading)
        except NewerFormat as e:
            raise NewerFormat(f"{path}: {e}: upgrade snbuf to read it") from None
        except ValueError as e:
            raise ValueError(f"{path}: a corrupt coded link file: {e}") from None
        except OSError as e:
            raise OSError(e.errno, f"{path} decoded into the temporary directory ($TMPDIR): "
                                   f"{e.strerror}") from None


class _Out:
    """The decoded file, counted and checksummed as it is written."""

    def __init__(self, f):
        self.f, self.length, self.crc = f, 0, 0

    def write(self, raw):
        self.crc = crc32c(raw, self.crc)
        self.length += len(raw)
        self.f.write(raw)


class _Records:
    """The coded file's fields, read in order, never past its end."""

    def __init__(self, f):
        self.f, self.left = f, os.fstat(f.fileno()).st_size

    def take(self, n):
        if n > self.left:
            raise ValueError("it ends early")
        self.left -= n
        b = self.f.read(n)
        if len(b) != n:
            raise ValueError("it ends early")
        return b


def _decode_link(r, out, keep_reading):
    if r.take(4) != LINK_MAGIC:
        raise ValueError("no SNBL magic")
    version, name_len = r.take(2)
    if version > LINK_VERSION:
        raise NewerFormat(f"coded in file format {version} (this reader reads {LINK_VERSION})")
    if version != LINK_VERSION:
        raise ValueError(f"file format {version}")
    frame_type = r.take(name_len).decode("utf-8", "replace")
    _frame_bytes_of(frame_type)
    damaged = False
    try:
        while True:
            kind = r.take(1)[0]
            if kind == END:
                break
            (n,) = struct.unpack("<I", r.take(4))
            body = r.take(n)
            if kind == RAW:
                out.write(body)
            elif kind == CODED:
                try:
                    out.write(decode_chunk(body, frame_type))
                except NewerFormat:
                    raise
                except ValueError:
                    if not keep_reading:
                        raise
                    damaged = True
                    out.write(bytes(claimed_raw_len(body) or 0))
            else:
                raise ValueError(f"record kind {kind}")
        want_len, want_crc = struct.unpack("<QI", r.take(12))
    except NewerFormat:
        raise
    except ValueError:
        if not keep_reading:
            raise
        return out.length, True
    whole = (want_len, want_crc) == (out.length, out.crc) and not r.left
    if not whole and not keep_reading:
        raise ValueError("bytes after its end" if r.left else
                         f"it decodes to {out.length} B of CRC-32C {out.crc:#010x}, not the "
                         f"{want_len} B of {want_crc:#010x} it was")
    return out.length, damaged or not whole
