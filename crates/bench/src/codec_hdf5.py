"""One HDF5 filter on a file of frames, for `snbuf bench codec` (crates/bench/src/codec.rs): the
frames written as one dataset through the filter (h5py and hdf5plugin, one thread), read back,
compared. Prints one JSON line: coded_bytes (the dataset's storage), encode_s and decode_s (the
fastest of the passes), identical.

    python3 -c "$(cat codec_hdf5.py)" FILTER LAYOUT RAW_FILE H5_FILE FRAME_BYTES PASSES

LAYOUT `words`: the frames as 16-bit words where their length allows (what a shuffling filter
sees best), in chunks of about 1 MiB of whole frames. LAYOUT `bytes`: as a DUNE HDF5 file holds a
fragment, one column of bytes (`char`, shape (n, 1)), in chunks of 1 MiB: what `snbuf convert
--to dune-hdf5 --filter` writes.
"""
import json
import os
import sys
import time

os.environ.setdefault("BLOSC_NTHREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import h5py  # noqa: E402
import hdf5plugin  # noqa: E402
import numpy as np  # noqa: E402

FILTERS = {
    "bitshuffle-lz4": lambda: hdf5plugin.Bitshuffle(cname="lz4"),
    "blosc2-zstd-bitshuffle": lambda: hdf5plugin.Blosc2(
        cname="zstd", clevel=5, filters=hdf5plugin.Blosc2.BITSHUFFLE),
    "blosc2-zstd-shuffle": lambda: hdf5plugin.Blosc2(
        cname="zstd", clevel=5, filters=hdf5plugin.Blosc2.SHUFFLE),
    "zstd": lambda: hdf5plugin.Zstd(clevel=3),
    # Blosc (1), as `snbuf convert --filter blosc-zstd` writes it: zstd level 5, no shuffle (a
    # byte dataset has nothing to shuffle).
    "blosc-zstd": lambda: hdf5plugin.Blosc(
        cname="zstd", clevel=5, shuffle=hdf5plugin.Blosc.NOSHUFFLE),
}


def main():
    name, layout, raw_path, h5_path, frame_bytes, passes = sys.argv[1:7]
    frame_bytes, passes = int(frame_bytes), int(passes)
    raw = np.fromfile(raw_path, dtype=np.uint8)
    if raw.size % frame_bytes:
        sys.exit("the raw file is not whole frames")
    if layout == "bytes":
        frames = raw.view(np.int8).reshape(-1, 1)
        chunks = (min(len(frames), 1 << 20), 1)
    elif layout == "words":
        word = np.uint16 if frame_bytes % 2 == 0 else np.uint8
        frames = raw.view(word).reshape(-1, frame_bytes // np.dtype(word).itemsize)
        chunks = (max(1, min(len(frames), (1 << 20) // frame_bytes)), frames.shape[1])
    else:
        sys.exit(f"layout {layout!r}: words or bytes")
    encode_s = decode_s = float("inf")
    identical = True
    for _ in range(passes):
        t = time.perf_counter()
        with h5py.File(h5_path, "w") as f:
            f.create_dataset("frames", data=frames, chunks=chunks,
                             **FILTERS[name]())
        encode_s = min(encode_s, time.perf_counter() - t)
        t = time.perf_counter()
        with h5py.File(h5_path, "r") as f:
            back = f["frames"][...]
            coded = f["frames"].id.get_storage_size()
        decode_s = min(decode_s, time.perf_counter() - t)
        identical = identical and np.array_equal(back, frames)
    print(json.dumps({"coded_bytes": int(coded), "encode_s": encode_s, "decode_s": decode_s,
                      "identical": bool(identical)}))


main()
