#!/usr/bin/env bash
# The frame codec beside the general-purpose compressors and the HDF5 filters, on one core each
# (`snbuf bench codec`: emulated WIBEth frames, every frame its own noise; zstd, xz, lz4 as
# their tools; bitshuffle and Blosc2 through h5py and hdf5plugin), kept in
# bench/results/codec/<date>-<host>.json for BENCHMARKS.md's table. Run it at a commit (the
# result names it). Installs hdf5plugin for Debian's python3 if it is missing.
#
# usage: bench/codec.sh [FRAMES=4096] [PASSES=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
frames="${1:-4096}"
passes="${2:-3}"
cd "$root"
if ! /usr/bin/python3 -c 'import h5py, hdf5plugin' 2>/dev/null; then
  /usr/bin/python3 -m pip install --quiet --root-user-action=ignore --break-system-packages hdf5plugin
fi
cargo build --release -q -p snbuf
mkdir -p bench/results/codec
# The day and the minute: a second run the same day is kept beside the first, not over it.
out="bench/results/codec/$(date -u +%F-%H%M)-$(hostname).json"
PATH="/usr/bin:$PATH" target/release/snbuf bench codec --frames "$frames" --passes "$passes" --json "$out"
