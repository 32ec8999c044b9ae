#!/usr/bin/env bash
# Network ingest's loss-free rate: `snbuf record --source udp://...` fed by `snbuf emit` on
# loopback, beside iperf3 -u -l 7200 in the same run, with the receive thread's CPU per GiB.
# See bench/ingest.py and BENCHMARKS.md.
#
# usage: bench/ingest.sh [--links N] [--seconds S] [--repeat N] [--json FILE]
#        bench/ingest.sh sweep [--repeat N] [--seconds S] [--points 0,1,...] [--json FILE]
#          the whole serve process's CPU per GiB at 1, 4, 10 links at the detector's rate and at
#          0.5-4 GiB/s, beside the copy floor and iperf3 (bench/ingest_sweep.py)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
command -v iperf3 >/dev/null || { echo "installing iperf3" >&2; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >&2; }
(cd "$root" && cargo build --release -q)
if [ "${1:-}" = sweep ]; then
    shift
    exec python3 "$here/ingest_sweep.py" --snbuf "$root/target/release/snbuf" "$@"
fi
exec python3 "$here/ingest.py" --snbuf "$root/target/release/snbuf" "$@"
