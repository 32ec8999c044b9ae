#!/usr/bin/env bash
# Network ingest's loss-free rate: `snbuf record --source udp://...` fed by `snbuf emit` on
# loopback, beside iperf3 -u -l 7200 in the same run, with the receive thread's CPU per GiB.
# See bench/ingest.py and BENCHMARKS.md.
#
# usage: bench/ingest.sh [--links N] [--seconds S] [--repeat N] [--json FILE]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
command -v iperf3 >/dev/null || { echo "installing iperf3" >&2; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >&2; }
(cd "$root" && cargo build --release -q)
exec python3 "$here/ingest.py" --snbuf "$root/target/release/snbuf" "$@"
