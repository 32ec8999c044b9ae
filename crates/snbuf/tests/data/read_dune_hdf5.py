"""Reads DUNE HDF5 raw-data files the way an offline analysis would, with h5py and numpy only
(not snbuf), and prints what it found as JSON: the file attributes, every record's group,
attributes and dataset names, every attribute's HDF5 type, every fragment's FragmentHeader fields, and per SourceID the
SHA-256 of the frames of all its fragments back to back, in record order. Each fragment's
dataset also says the HDF5 filters it is stored through and its bytes in the file; filtered
datasets are read through hdf5plugin's filters (as an analysis would), when it is installed.

usage: read_dune_hdf5.py FILE.hdf5 [FILE.hdf5 ...]
"""
import hashlib
import json
import struct
import sys

import h5py
import numpy as np

try:
    import hdf5plugin  # noqa: F401  (registers Blosc, zstd, bitshuffle, ... with h5py)
except ImportError:
    pass

FRAGMENT_HEADER = struct.Struct("<IIQQQQQIIIHHHHI")  # 72 bytes, FragmentHeader.hpp v5 and v6
TIMESLICE_HEADER = struct.Struct("<IIQIIHHI")  # 32 bytes, TimeSliceHeader.hpp v2


def as_text(v):
    return v.decode() if isinstance(v, bytes) else str(v)


def attr_type(attrs, name):
    """The attribute's type as stored: "u64", "i32", ..., or "vlen-str:utf-8"."""
    dt = attrs.get_id(name).dtype
    s = h5py.check_string_dtype(dt)
    if s is not None:
        return ("vlen-str:" if s.length is None else f"str{s.length}:") + s.encoding
    return f"{dt.kind.replace('i', 'i').replace('u', 'u')}{dt.itemsize * 8}{'' if dt.byteorder in '<=|' else '-be'}"


def main(paths):
    out = {"files": [], "frames_sha256": {}, "frames": {}}
    digests = {}
    for path in paths:
        f = h5py.File(path, "r")
        attrs = {k: (as_text(v) if isinstance(v, (str, bytes)) else int(v)) for k, v in f.attrs.items()}
        attr_types = {k: attr_type(f.attrs, k) for k in f.attrs.keys()}
        records = []
        for name in sorted(f.keys()):
            g = f[name]
            raw = g["RawData"]
            rec = {"name": name, "attrs": {k: json.loads(as_text(v)) for k, v in g.attrs.items()},
                   "datasets": sorted(raw.keys()), "fragments": []}
            for ds_name in sorted(raw.keys()):
                ds = raw[ds_name]
                dcpl = ds.id.get_create_plist()
                filters = [dcpl.get_filter(i)[0] for i in range(dcpl.get_nfilters())]
                data = ds[:].ravel().view(np.uint8).tobytes()
                if ds_name.endswith("_TimeSliceHeader"):
                    m, ver, num, run, pad, sv, ss, sid = TIMESLICE_HEADER.unpack(data)
                    rec["timeslice_header"] = {"marker": m, "version": ver, "timeslice_number": num,
                                               "run_number": run, "subsys": ss, "id": sid}
                    continue
                (marker, version, size, trigger_number, trigger_ts, begin, end, run, status_bits,
                 ftype, seq, det, sid_version, subsys, sid) = FRAGMENT_HEADER.unpack(data[:72])
                payload = data[72:]
                key = f"{subsys}:{sid}"
                digests.setdefault(key, hashlib.sha256()).update(payload)
                out["frames"][key] = out["frames"].get(key, 0) + len(payload)
                rec["fragments"].append({
                    "dataset": ds_name, "marker": marker, "version": version, "size": size,
                    "dataset_bytes": len(data), "trigger_number": trigger_number,
                    "trigger_timestamp": trigger_ts, "window_begin": begin, "window_end": end,
                    "run_number": run, "status_bits": status_bits, "fragment_type": ftype,
                    "sequence_number": seq, "detector_id": det, "source_id_version": sid_version,
                    "subsys": subsys, "id": sid, "payload_bytes": len(payload),
                    "filters": filters, "storage_bytes": ds.id.get_storage_size(),
                })
            records.append(rec)
        out["files"].append({"path": path, "attrs": attrs, "attr_types": attr_types,
                             "records": records})
    out["frames_sha256"] = {k: d.hexdigest() for k, d in digests.items()}
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
