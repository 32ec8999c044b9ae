#!/usr/bin/env bash
# Crash trials of the real binary: `snbuf record` killed with SIGKILL at random moments, then
# `snbuf recover` and `snbuf verify`; every chunk the status file had called durable must be
# there and intact, and no frame verify accepts may differ from what the link emulator made.
# One summary line per method. See RELIABILITY.md.
#
# usage: bench/crash_trials.sh [TRIALS_PER_METHOD (default 100)] [SEED (default: the time)]
# The tallies are kept in bench/results/crash_trials/<date>-<host>.json (bench/tables.py makes
# RELIABILITY.md's table from it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
trials="${1:-100}"
seed="${2:-$(date +%s)}"
echo "crash trials: $trials per method (direct, uring, nt), seed $seed" >&2
cd "$root"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
start=$(date +%s)
rc=0
# One method at a time: trials of different methods would compete for the 2 cores and disk.
SNBUF_CRASH_TRIALS="$trials" SNBUF_CRASH_SEED="$seed" SNBUF_CRASH_RESULT="$lines" \
  cargo test --release -q -p snbuf --test crash_trials -- --nocapture --test-threads 1 2>&1 |
  grep -oE 'crash trials.*|panicked.*|FAILED.*|test result.*' || rc=1
python3 bench/keep.py crash_trials "$lines" --seconds $(($(date +%s) - start)) \
  --command "bench/crash_trials.sh $trials $seed"
exit $rc
