#!/usr/bin/env bash
# The papers' measurements in one command (`snbuf bench paper`, built with PMDK), kept: the results
# directory goes to bench/results/paper/<date>-<host>/ with the command beside it (kept.json), and
# bench/tables.py makes BENCHMARKS.md's paper tables from it. `snbuf report DIR` draws the figures.
#
# usage: bench/paper.sh [--quick] [TARGET (default /dev/shm)] [SECOND_TARGET (default /var/tmp)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
quick=()
[ "${1:-}" = --quick ] && { quick=(--quick); shift; }
target="${1:-/dev/shm}"
second="${2:-/var/tmp}"
[ -f /usr/include/libpmem.h ] || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libpmem-dev; }
(cd "$root" && cargo build --release -q --features snbuf/pmdk)
out="$root/bench/results/paper/$(date -u +%F)-$(uname -n)"
rm -rf "$out"
start=$(date +%s)
"$root/target/release/snbuf" bench paper "${quick[@]}" --target "$target" --second-target "$second" --out "$out"
python3 - "$out" "$(($(date +%s) - start))" "bench/paper.sh ${quick[*]} $target $second" <<'PY'
import json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "..", ".."))
import keep
out, seconds, command = sys.argv[1], float(sys.argv[2]), " ".join(sys.argv[3].split())
import datetime
json.dump({"suite": "paper", "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
           "command": command, "seconds": seconds, "machine": keep.machine()},
          open(os.path.join(out, "kept.json"), "w"), indent=1)
print(f"kept {out}")
PY
