#!/usr/bin/env bash
# The writer's CPU per GiB against an earlier commit, paired in one run on this machine:
# `snbuf record` (10 emulated links x 100 MB/s, the default method, ext4 under /var/tmp) built
# at BASE and at HEAD, run alternately RUNS times each, so that the machine's noise falls on both
# alike. Each run's `record --json` gives the writer threads' CPU (writer_cpu_s), the whole
# process's less the emulated links' (unit_cpu_core_s_per_gib) and the bytes recorded; the
# medians are compared. Kept in bench/results/writer_cost/, tabled by bench/tables.py.
#
# usage: bench/writer_cost.sh [BASE=5bce3b9] [RUNS=10] [LINKS=10] [MB_S=100]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${1:-5bce3b9}" runs="${2:-10}" links="${3:-10}" rate="${4:-100}"
(cd "$root" && cargo build --release -q -p snbuf)
head_bin="$root/target/release/snbuf"
base_tree="/var/tmp/snbuf-base-$base"
if [ ! -x "$base_tree/target/release/snbuf" ]; then
  rm -rf "$base_tree"
  git -C "$root" worktree add --detach "$base_tree" "$base" >/dev/null
  (cd "$base_tree" && CARGO_TARGET_DIR="$base_tree/target" cargo build --release -q -p snbuf)
fi
base_bin="$base_tree/target/release/snbuf"
work="$(mktemp -d /var/tmp/snbuf-writer-cost.XXXXXX)"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
lines="$work/lines.jsonl"
python3 "$root/bench/writer_cost.py" --head "$head_bin" --base "$base_bin" --base-commit "$base" \
  --runs "$runs" --links "$links" --rate-mb-s "$rate" --work "$work" --lines "$lines"
python3 "$root/bench/keep.py" writer_cost "$lines" --seconds $(($(date +%s) - start)) \
  --command "bench/writer_cost.sh $base $runs $links $rate"
