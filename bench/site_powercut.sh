#!/usr/bin/env bash
# A site power cut, again and again: one QEMU guest holds a whole site (three nats-servers from
# deploy/nats-cluster.conf, a Garage store with its fsyncs on, two `snbuf serve` units exporting
# to it, an operator sending a trigger every 4 s) on one disk with a volatile write cache. The plug
# is pulled CUTS times at seeded moments (mid-burst, mid-export), the machine booting again each
# time with everything restarting by itself; then it runs until every burst is exported, and the
# host checks that every trigger acknowledged to the operator is a verified burst in the store,
# per unit. Run once with deploy/'s `sync_interval: always` and once with the server's default,
# to show what the setting guards. Root only (the disk is loop-mounted to read the store back).
# See crates/snbuf/tests/powercut/site.rs and RELIABILITY.md.
#
# usage: bench/site_powercut.sh [CUTS (default 20)] [SEED (default: the time)]
#        SYNCS="always default" by default.
# Each run's tally is kept in bench/results/site_powercut/<date>-<host>.json (bench/tables.py
# makes RELIABILITY.md's table from it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cuts="${1:-20}"
seed="${2:-$(date +%s)}"
syncs="${SYNCS:-always default}"
cd "$root"
cargo test --release -q -p snbuf --test powercut --no-run
lines="$(mktemp)"
logs="$(mktemp -d /tmp/site-powercut-logs.XXXXXX)"
trap 'rm -f "$lines"' EXIT
start=$(date +%s)
rc=0
for sync in $syncs; do
  echo "site power cuts: $cuts cuts, sync_interval $sync, seed $seed" >&2
  out="$logs/$sync.log"
  SNBUF_REQUIRE_QEMU=1 SNBUF_REQUIRE_GARAGE=1 SNBUF_REQUIRE_NATS=1 SNBUF_SITE_CUTS="$cuts" \
    SNBUF_SITE_SEED="$seed" SNBUF_SITE_SYNC="$sync" SNBUF_SITE_RESULT="$lines" \
    cargo test --release -q -p snbuf --test powercut a_site_power_cut -- --nocapture \
      --test-threads 1 >"$out" 2>&1 || { rc=1; echo "FAILED: the whole output is in $out" >&2; }
  grep -oE 'site cut .*|site power cuts: .*|panicked.*|test result.*' "$out" | cut -c1-600 || true
done
python3 bench/keep.py site_powercut "$lines" --seconds $(($(date +%s) - start)) \
  --command "SYNCS=\"$syncs\" bench/site_powercut.sh $cuts $seed"
exit $rc
