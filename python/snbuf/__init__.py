"""Read snbuf bursts in Python (numpy only).

    import snbuf
    b = snbuf.open("snbuf-data/20261121T231000Z-0001")
    b.manifest["run_number"], b.frame_type
    link = b.link(0)
    link.chunks[0]                 # header fields; .frames() reads it, its CRC-32C checked
    ts = link.timestamps()         # numpy uint64, read from the frames
    adc = snbuf.unpack_wibeth_adc(link.chunks[0].frames())   # (frames, 64 samples, 64 channels)
    snbuf.verify(b)["valid"]       # what `snbuf verify` says
    t, adc = link.adc(-0.01, 0.01)  # every sample with its time (s from the trigger), (samples, channels)
    link.baseline(), link.rms()    # per channel, as `snbuf show` computes them
    import snbuf.plot; snbuf.plot.heat_map(link)   # with matplotlib
"""

from .burst import Burst, Chunk, ChunkHeader, HeaderError, Link, open_burst as open  # noqa: A001
from .frames import LAYOUTS, Layout, layout, unpack_wibeth_adc
from .verify import verify
from ._crc32c import crc32c

__all__ = ["Burst", "Chunk", "ChunkHeader", "HeaderError", "Link", "open", "LAYOUTS", "Layout",
           "layout", "unpack_wibeth_adc", "verify", "crc32c"]
__version__ = "0.1.0"
