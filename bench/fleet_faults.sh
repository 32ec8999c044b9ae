#!/usr/bin/env bash
# Fault trials of the fleet (Jepsen-style): a 3-server NATS cluster started from
# deploy/nats-cluster.conf, UNITS `snbuf serve` units, a trigger every 2.5 s for SECONDS, and a
# seeded nemesis that kills (SIGKILL) and restarts a server, pauses one (SIGSTOP/SIGCONT), kills
# and restarts a unit, or restarts the whole cluster, one fault at a time. Each trial reports
# triggers sent, accepted, recorded by every unit, missed (by reason), duplicates, lost, and the
# longest `fleet status` and `trigger --nats` calls. See RELIABILITY.md.
#
# usage: bench/fleet_faults.sh [TRIALS (default 3)] [SEED (default: the time)]
#        UNITS=8 SECONDS_PER_TRIAL=180 by default.
# Each trial's report is kept in bench/results/fleet_faults/<date>-<host>.json (bench/tables.py
# makes RELIABILITY.md's table from it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
trials="${1:-3}"
seed="${2:-$(date +%s)}"
units="${UNITS:-8}"
seconds="${SECONDS_PER_TRIAL:-180}"
echo "fleet fault trials: $trials x ${seconds} s, $units units, 3 servers, seed $seed" >&2
cd "$root"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
start=$(date +%s)
rc=0
SNBUF_REQUIRE_NATS=1 SNBUF_FLEET_TRIALS="$trials" SNBUF_FLEET_SEED="$seed" \
  SNBUF_FLEET_UNITS="$units" SNBUF_FLEET_SECONDS="$seconds" SNBUF_FLEET_RESULT="$lines" \
  cargo test --release -q -p snbuf --test fleet_faults -- --nocapture --test-threads 1 2>&1 |
  grep -A2 -E 'fleet faults: kept|panicked|test result' | cut -c1-600 || rc=1
python3 bench/keep.py fleet_faults "$lines" --seconds $(($(date +%s) - start)) \
  --command "UNITS=$units SECONDS_PER_TRIAL=$seconds bench/fleet_faults.sh $trials $seed"
exit $rc
