"""A burst on disk (docs/FORMAT.md): a manifest and one data file of checksummed chunks per
link. `scan` walks a link file as snbuf's own reader does and classifies where its valid prefix
of chunks ends; `Burst`/`Link` give the manifest, the chunks and the frames."""

import json
import os
import struct
import tempfile
import warnings

import numpy as np

from ._crc32c import crc32c
from .coded import CODECS_READ, SUFFIX, decode_link_file
from .frames import layout as layout_of

MAGIC = b"SNBUFCHK"
HEADER_BYTES = 64
# Version 2 gives the header a block of its own (header_bytes: 64 on memory, the direct-I/O
# alignment on block devices); version 1 (header_bytes 64) is still read.
FORMAT_VERSION = 2
MAX_HEADER_BLOCK_BYTES = 32 << 10
MANIFEST_VERSION = 2
# magic, version, header length, link, sequence, first ts, last ts, frame count, frame bytes,
# payload bytes, payload CRC, stride, header CRC.
HEADER = struct.Struct("<8sHHIQQQIIIIII")
SCAN_BLOCK = 1 << 20


class HeaderError(Exception):
    def __init__(self, kind, why, version=None):
        super().__init__(why)
        self.kind, self.why, self.version = kind, why, version


class ChunkHeader:
    __slots__ = ("version", "header_bytes", "link", "sequence", "first_timestamp", "last_timestamp", "frame_count",
                 "frame_bytes", "payload_bytes", "payload_crc32c", "stride_bytes")

    @classmethod
    def decode(cls, b):
        """Parses and checks 64 header bytes; raises HeaderError (kind: no_magic, header_crc,
        future_version, bad_version, inconsistent, truncated)."""
        if len(b) < HEADER_BYTES:
            raise HeaderError("truncated", f"truncated: {len(b)} of {HEADER_BYTES} bytes")
        if b[:8] != MAGIC:
            what = "zero" if not any(b[:HEADER_BYTES]) else "not a chunk header"
            raise HeaderError("no_magic", f"no chunk here (bytes are {what})")
        (_, version, header_len, link, seq, first, last, count, fbytes, pbytes, pcrc, stride,
         hcrc) = HEADER.unpack(bytes(b[:HEADER_BYTES]))
        computed = crc32c(bytes(b[:60]))
        if hcrc != computed:
            raise HeaderError("header_crc", f"header checksum mismatch (stored {hcrc:#010x}, computed {computed:#010x})")
        if version > FORMAT_VERSION:
            raise HeaderError("future_version", f"format version {version} is newer than this reader", version)
        if version == 0:
            raise HeaderError("bad_version", "format version 0 is not a version snbuf ever wrote")
        if version == 1:
            block_ok = header_len == HEADER_BYTES
        else:
            block_ok = (HEADER_BYTES <= header_len <= MAX_HEADER_BLOCK_BYTES
                        and header_len % HEADER_BYTES == 0)
        if not block_ok:
            raise HeaderError("inconsistent", f"inconsistent header: a header block of {header_len} B in format version {version}")
        if count == 0 or fbytes == 0:
            raise HeaderError("inconsistent", "inconsistent header: no frames")
        if count * fbytes != pbytes:
            raise HeaderError("inconsistent", f"inconsistent header: {count} frames of {fbytes} B do not make {pbytes} B")
        if stride < header_len + pbytes:
            raise HeaderError("inconsistent", f"inconsistent header: stride {stride} shorter than the chunk")
        if last < first:
            raise HeaderError("inconsistent", "inconsistent header: last timestamp before the first")
        h = cls()
        h.version, h.header_bytes = version, header_len
        (h.link, h.sequence, h.first_timestamp, h.last_timestamp, h.frame_count, h.frame_bytes,
         h.payload_bytes, h.payload_crc32c, h.stride_bytes) = (link, seq, first, last, count,
                                                               fbytes, pbytes, pcrc, stride)
        return h


class Chunk:
    """A valid chunk of a link file."""

    def __init__(self, link_file, offset, header, keep_open=None):
        self._file = link_file
        self._keep_open = keep_open
        self.offset = offset
        self.header = header
        for k in ChunkHeader.__slots__:
            setattr(self, k, getattr(header, k))

    def payload(self):
        """The payload's bytes, its CRC-32C checked again."""
        with open(self._file, "rb") as f:
            f.seek(self.offset + self.header_bytes)
            data = f.read(self.payload_bytes)
        if len(data) != self.payload_bytes or crc32c(data) != self.payload_crc32c:
            raise ValueError(f"{self._file}: chunk {self.sequence} at {self.offset} changed since it was checked")
        return data

    def frames(self):
        """(frame_count, frame_bytes) uint8 array."""
        return np.frombuffer(self.payload(), dtype=np.uint8).reshape(self.frame_count, self.frame_bytes)

    def __repr__(self):
        return (f"Chunk(sequence={self.sequence}, offset={self.offset}, frames={self.frame_count}, "
                f"timestamps={self.first_timestamp}..{self.last_timestamp})")


def _frames_agree(lay, h, payload):
    if h.frame_bytes != lay.frame_bytes:
        return f"frames of {h.frame_bytes} B where the frame type's are {lay.frame_bytes} B"
    frames = np.frombuffer(payload, dtype=np.uint8).reshape(h.frame_count, h.frame_bytes)
    subs = lay.subframe_timestamps(frames)
    if lay.subframes > 1:
        step = np.arange(lay.subframes, dtype=np.uint64) * np.uint64(lay.ticks_per_subframe)
        bad = np.nonzero((subs != subs[:, :1] + step).any(axis=1))[0]
        if len(bad):
            k = int(bad[0])
            j = int(np.nonzero(subs[k] != subs[k, 0] + step)[0][0])
            return (f"frame {k}: detector frame {j} has timestamp {int(subs[k, j])}, "
                    f"expected {int(subs[k, 0] + step[j])}")
    ts = subs[:, 0]
    back = np.nonzero(ts[1:] <= ts[:-1])[0]
    if len(back):
        k = int(back[0]) + 1
        return f"frame {k}'s timestamp {int(ts[k])} does not follow the frame before it ({int(ts[k - 1])})"
    if int(ts[0]) != h.first_timestamp:
        return f"frame 0's timestamp {int(ts[0])} disagrees with its chunk header (first {h.first_timestamp})"
    if int(ts[-1]) != h.last_timestamp:
        return f"the last frame's timestamp {int(ts[-1])} disagrees with its chunk header (last {h.last_timestamp})"
    return None


def _is_zero_or_end(f, offset, length):
    f.seek(offset)
    while offset < length:
        block = f.read(min(SCAN_BLOCK, length - offset))
        if not block:
            break
        if any(block):
            return False
        offset += len(block)
    return True


def _last_nonzero_end(f, offset, length):
    end = offset
    at = offset
    f.seek(offset)
    while at < length:
        block = f.read(min(SCAN_BLOCK, length - at))
        if not block:
            break
        stripped = block.rstrip(b"\0")
        if stripped:
            end = at + len(stripped)
        at += len(block)
    return end


def _count_valid_after(f, offset, length):
    n = 0
    while offset + HEADER_BYTES <= length:
        f.seek(offset)
        try:
            h = ChunkHeader.decode(f.read(HEADER_BYTES))
        except HeaderError:
            break
        if offset + h.stride_bytes > length:
            break
        f.seek(offset + h.header_bytes)
        if crc32c(f.read(h.payload_bytes)) != h.payload_crc32c:
            break
        n += 1
        offset += h.stride_bytes
    return n


class Link:
    """One link's data file, scanned: `chunks` is the valid prefix, `end` where and why it ends
    ({"kind": "clean"|"torn_tail"|"bad_chunk"|"future_version", ...}), `gaps` the timestamps
    missing between and inside chunks."""

    def __init__(self, path, link, layout=None, ticks_per_frame=None, clock_hz=None, trigger_timestamp=None,
                 keep_open=None):
        self.path = path
        # The file `path` names, where it is a decoded one (/proc/self/fd/N): open while read.
        self.keep_open = keep_open
        self.link = link
        self.layout = layout
        self.clock_hz, self.trigger_timestamp = clock_hz, trigger_timestamp
        self.chunks, self.end, self.gaps, self.chunks_after_end = [], None, [], 0
        self._scan(ticks_per_frame)

    def _scan(self, tpf):
        length = os.path.getsize(self.path)
        offset = 0
        with open(self.path, "rb") as f:
            while True:
                if offset >= length:
                    self.end = {"kind": "clean", "zero_tail_bytes": 0}
                    break
                f.seek(offset)
                raw = f.read(min(HEADER_BYTES, length - offset))
                try:
                    h = ChunkHeader.decode(raw)
                except HeaderError as e:
                    self.end = self._end_without_header(f, offset, length, e)
                    break
                stride = h.stride_bytes
                bad = lambda why: {"kind": "bad_chunk", "offset": offset,
                                   "bytes": min(stride, length - offset), "why": why}
                if h.link != self.link:
                    self.end = bad(f"chunk of link {h.link} in the file of link {self.link}")
                    break
                if h.sequence != len(self.chunks):
                    self.end = bad(f"sequence {h.sequence} where {len(self.chunks)} was due")
                    break
                if offset + stride > length:
                    self.end = {"kind": "torn_tail", "offset": offset, "bytes": length - offset,
                                "why": f"chunk needs {stride} B, the file has {length - offset} B left"}
                    break
                f.seek(offset + h.header_bytes)
                payload = f.read(h.payload_bytes)
                c = crc32c(payload)
                if c != h.payload_crc32c:
                    why = f"payload checksum mismatch (stored {h.payload_crc32c:#010x}, computed {c:#010x})"
                    kind = "torn_tail" if _is_zero_or_end(f, offset + stride, length) else "bad_chunk"
                    self.end = {"kind": kind, "offset": offset, "bytes": stride, "why": why}
                    self.chunks_after_end = _count_valid_after(f, offset + stride, length)
                    break
                if self.layout is not None:
                    why = _frames_agree(self.layout, h, payload)
                    if why:
                        self.end = {"kind": "bad_chunk", "offset": offset, "bytes": stride, "why": why}
                        self.chunks_after_end = _count_valid_after(f, offset + stride, length)
                        break
                if tpf:
                    span = (h.frame_count - 1) * tpf
                    if h.last_timestamp - h.first_timestamp != span:
                        self.gaps.append({"after_timestamp": h.first_timestamp,
                                          "resume_timestamp": h.last_timestamp,
                                          "missing_frames": max((h.last_timestamp - h.first_timestamp) // tpf - (h.frame_count - 1), 0),
                                          "sequence": h.sequence, "inside_chunk": True})
                    if self.chunks:
                        prev = self.chunks[-1]
                        if h.first_timestamp != prev.last_timestamp + tpf:
                            self.gaps.append({"after_timestamp": prev.last_timestamp,
                                              "resume_timestamp": h.first_timestamp,
                                              "missing_frames": max(max(h.first_timestamp - prev.last_timestamp, 0) // tpf - 1, 0),
                                              "sequence": h.sequence, "inside_chunk": False})
                self.chunks.append(Chunk(self.path, offset, h, self.keep_open))
                offset += stride
        self.valid_bytes = offset
        if self.end["kind"] == "clean":
            self.end["zero_tail_bytes"] = length - offset

    @staticmethod
    def _end_without_header(f, offset, length, e):
        if e.kind == "future_version":
            return {"kind": "future_version", "offset": offset, "version": e.version}
        if _is_zero_or_end(f, offset, length):
            return {"kind": "clean", "zero_tail_bytes": length - offset}
        nonzero_end = _last_nonzero_end(f, offset, length)
        damaged = (e.kind in ("header_crc", "inconsistent", "bad_version")
                   and not _is_zero_or_end(f, offset + HEADER_BYTES, length)
                   and nonzero_end - offset > 4096)
        return {"kind": "bad_chunk" if damaged else "torn_tail", "offset": offset,
                "bytes": nonzero_end - offset, "why": e.why}

    @property
    def frames_count(self):
        return sum(c.frame_count for c in self.chunks)

    @property
    def payload_bytes(self):
        return sum(c.payload_bytes for c in self.chunks)

    def iter_frames(self):
        """Each valid chunk's frames, a (frames, frame_bytes) uint8 array at a time."""
        for c in self.chunks:
            yield c.frames()

    def frames(self):
        """All valid frames, (frames, frame_bytes) uint8 (the whole link in memory)."""
        parts = list(self.iter_frames())
        if not parts:
            fb = self.layout.frame_bytes if self.layout else 0
            return np.zeros((0, fb), dtype=np.uint8)
        return np.concatenate(parts)

    def timestamps(self):
        """uint64 array: every valid frame's timestamp, read from the frames."""
        if self.layout is None:
            raise ValueError("the manifest does not say the frame type")
        parts = [self.layout.timestamps(fr) for fr in self.iter_frames()]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    def adc(self, start_s=None, stop_s=None):
        """The link's ADC samples (WIBEth, TDEEth, WIB2) with their times: `(t, adc)`, `t`
        float64 seconds from the trigger on the detector's clock (each sample's own time: a
        TDEEth sample is 31.25 ticks after the one before it), `adc` (samples, channels) uint16.
        Only frames with timestamps in [start_s, stop_s) (seconds from the trigger) are read;
        the arrays hold them all, so bound the range on a large burst."""
        lay = self.layout
        if lay is None or lay.adc is None:
            raise ValueError(f"no ADC values to decode in {lay.name if lay else 'unknown'} frames")
        trig = self.trigger_timestamp if self.trigger_timestamp is not None else 0
        ts_parts, adc_parts = [], []
        for c in self.chunks:
            rel_last = (c.last_timestamp - trig) / self.clock_hz
            rel_first = (c.first_timestamp - trig) / self.clock_hz
            if (stop_s is not None and rel_first >= stop_s) or (start_s is not None and rel_last < start_s):
                continue
            frames = c.frames()
            ts = lay.timestamps(frames)
            # Relative ticks first: epoch timestamps (~1e17) do not fit a float64 exactly.
            rel = (ts.astype(np.int64) - np.int64(trig)).astype(np.float64) / self.clock_hz
            keep = np.ones(len(ts), dtype=bool)
            if start_s is not None:
                keep &= rel >= start_s
            if stop_s is not None:
                keep &= rel < stop_s
            if keep.any():
                ts_parts.append(ts[keep])
                adc_parts.append(lay.unpack_adc(frames[keep]))
        channels, per_frame = lay.adc
        if not ts_parts:
            return np.zeros(0), np.zeros((0, channels), dtype=np.uint16)
        ts = np.concatenate(ts_parts)
        rel = (ts.astype(np.int64) - np.int64(trig)).astype(np.float64)
        t = (rel[:, None] + lay.sample_offsets_ticks()[None, :]).ravel() / self.clock_hz
        return t, np.concatenate(adc_parts).reshape(-1, channels)

    def baseline(self, start_s=None, stop_s=None):
        """Per channel, the median ADC value (float64), as `snbuf show` gives it."""
        return np.median(self.adc(start_s, stop_s)[1], axis=0)

    def rms(self, start_s=None, stop_s=None):
        """Per channel, the RMS of the values about their mean (float64), as `snbuf show`."""
        return self.adc(start_s, stop_s)[1].astype(np.float64).std(axis=0)

    def __repr__(self):
        return f"Link({self.link}, {len(self.chunks)} chunks, {self.frames_count} frames, end {self.end['kind']})"


def link_file_name(link):
    return f"link-{link:04d}.dat"


def link_of_file_name(name):
    if name.startswith("link-") and name.endswith(".dat"):
        digits = name[5:-4]
        if len(digits) >= 4 and digits.isdigit():
            return int(digits)
    return None


class Burst:
    """A burst directory: `manifest` (dict, or None without one), `frame_type`, `layout`, and
    `links` (link number -> Link, every link the manifest lists or a file holds)."""

    def __init__(self, path):
        if not os.path.isdir(path):
            raise FileNotFoundError(f"{path}: not a burst directory")
        self.path = path
        self.manifest, self.manifest_problem = None, None
        mpath = os.path.join(path, "manifest.json")
        if os.path.exists(mpath):
            try:
                with open(mpath) as f:
                    self.manifest = json.load(f)
                if self.manifest.get("format_version", 0) > MANIFEST_VERSION:
                    self.manifest_problem = (f"{mpath}: manifest format version {self.manifest['format_version']} "
                                             f"is newer than this reader understands ({MANIFEST_VERSION})")
                    self.manifest = None
            except (ValueError, OSError) as e:
                self.manifest_problem = f"{mpath}: not a valid manifest: {e}"
        else:
            self.manifest_problem = ("no manifest.json (recording interrupted before it was written? "
                                     "`snbuf recover` rebuilds it)")
        # A copy `snbuf export --codec frames` wrote: its link files are <file>.snbl, each
        # decoded (snbuf.coded) into a temporary file when its link is first read.
        self.coded = (self.manifest or {}).get("coded")
        if self.coded and self.coded not in CODECS_READ:
            raise ValueError(f"{path}: a copy coded by {self.coded!r}; this reader decodes "
                             f"{', '.join(CODECS_READ)}: upgrade snbuf to read it")
        frame = (self.manifest or {}).get("frame") or {}
        self.frame_type = frame.get("frame_type")
        self.layout = None
        if self.frame_type:
            if (self.manifest or {}).get("format_version", MANIFEST_VERSION) < 2:
                # Version 1 bursts kept snbuf's own timestamp in frame bytes 0..8.
                self.layout = layout_of(f"custom:{frame['frame_bytes']}:{frame['ticks_per_frame']}:0")
            else:
                self.layout = layout_of(self.frame_type, frame.get("frame_bytes"), frame.get("ticks_per_frame"))
        self.ticks_per_frame = frame.get("ticks_per_frame")
        # Ticks between a link's frames: the frame type's own, or a sub-sampled link's step.
        self.frame_step_ticks = frame.get("frame_step_ticks") or self.ticks_per_frame
        # A second is this many ticks of the detector's clock (62.5 MHz for DUNE's timing system).
        self.clock_hz = frame.get("clock_hz") or (self.layout.clock_hz if self.layout else None)
        files = {}
        for l in (self.manifest or {}).get("links", []):
            files[l["link"]] = l["file"]
        for name in os.listdir(path):
            # A link file, or its coded form (read for it where `_open_link_file` says).
            name = name[:-len(SUFFIX)] if name.endswith(SUFFIX) else name
            n = link_of_file_name(name)
            if n is not None:
                files.setdefault(n, name)
        self.files = dict(sorted(files.items()))
        self._links = {}

    @property
    def links(self):
        for n, name in self.files.items():
            if "/" not in name:
                self.link(n)
        return self._links

    def _open_link_file(self, name):
        """Link file `name`, to read: (path, the decoded file kept open or None). As snbuf's
        readers choose: its coded form (`<name>.snbl`) where the manifest says the copy is coded
        or the file itself is missing, decoded as they decode it (a damaged payload reads as a
        chunk that fails its CRC, with a warning) into an unnamed temporary file in $TMPDIR,
        gone once nothing reads it (nothing is left behind, even by a killed process); else the
        file itself."""
        plain, coded = os.path.join(self.path, name), os.path.join(self.path, name + SUFFIX)
        if not (os.path.exists(coded) and (self.coded or not os.path.exists(plain))):
            return plain, None
        tmp = tempfile.TemporaryFile(prefix="snbuf-decoded-")
        _, damaged = decode_link_file(coded, tmp, keep_reading=True)
        tmp.flush()
        if damaged:
            warnings.warn(f"{coded}: coded link file damaged: what does not decode reads as a chunk "
                          "that fails its checks, or as the file's end", stacklevel=3)
        return f"/proc/self/fd/{tmp.fileno()}", tmp

    def link(self, n):
        """Link `n` (a KeyError where the burst has none), its file read (in a coded copy,
        decoded) when first asked for."""
        if n not in self._links:
            name = self.files[n]
            if "/" in name:
                raise KeyError(n)
            trigger = ((self.manifest or {}).get("trigger") or {}).get("trigger_timestamp")
            path, decoded = self._open_link_file(name)
            # A decoded file lives as long as anything read from it: the link, and its chunks.
            self._links[n] = Link(path, n, self.layout, self.frame_step_ticks, self.clock_hz, trigger,
                                  keep_open=decoded)
        return self._links[n]

    def seconds(self, ticks):
        """Ticks as seconds of the detector's clock (`clock_hz`)."""
        return ticks / self.clock_hz

    def window_s(self):
        """The trigger window (start, end) in seconds relative to the trigger, on the detector's
        clock: (-pre, +post)."""
        t = (self.manifest or {}).get("trigger")
        if not t or not self.clock_hz:
            return None
        return (self.seconds(t["window_start_timestamp"] - t["trigger_timestamp"]),
                self.seconds(t["window_end_timestamp"] - t["trigger_timestamp"]))

    def verify(self):
        from .verify import verify
        return verify(self)

    def __repr__(self):
        m = self.manifest or {}
        return f"Burst({self.path!r}, {m.get('state')}, {self.frame_type}, links {list(self.files)})"


def open_burst(path):
    return Burst(path)
