#!/usr/bin/env bash
# Soak: back-to-back triggers in one `snbuf serve` (4 links, direct): every burst verifies, and
# the server's open descriptors and resident memory after each burst are printed (and must stay
# flat). See RELIABILITY.md.
#
# usage: bench/soak.sh [TRIGGERS (default 20)]
# The figures are kept in bench/results/soak/<date>-<host>.json (one row per run: several runs the
# same day add rows), and bench/tables.py makes RELIABILITY.md's table from them.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
triggers="${1:-20}"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
start=$(date +%s)
rc=0
SNBUF_SOAK_TRIGGERS="$triggers" SNBUF_SOAK_RESULT="$lines" \
  cargo test --release -q -p snbuf --test soak -- --nocapture 2>&1 |
  grep -oE 'soak:.*|panicked.*|FAILED.*|test result.*' || rc=1
python3 bench/keep.py soak "$lines" --seconds $(($(date +%s) - start)) --append \
  --command "bench/soak.sh $triggers"
exit $rc
