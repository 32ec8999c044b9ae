#!/usr/bin/env bash
# Fuzzes the format reader and the trigger check (fuzz/: cargo-fuzz, libFuzzer with
# AddressSanitizer) for RUNS executions per target, from the seeds in fuzz/seeds/, and keeps what happened (executions,
# seconds, crashes) in bench/results/fuzz/<date>-<host>.json for RELIABILITY.md's table.
# Stable Rust: RUSTC_BOOTSTRAP=1 enables the flags cargo-fuzz needs. A crasher is left in
# fuzz/artifacts/ and fails the script.
#
# usage: bench/fuzz.sh [RUNS_PER_TARGET (default 1000000)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-1000000}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked -q
cd "$root/fuzz"
lines="$(mktemp)"
trap 'rm -f "$lines"' EXIT
rc=0
for target in chunk_reader burst_dir trigger_request codec_decode; do
  log="$(mktemp)"
  mkdir -p "corpus/$target"
  start=$(date +%s)
  # A bound on the whole run: a hang in the reader is a finding too (libFuzzer's -timeout per
  # input catches it first).
  if RUSTC_BOOTSTRAP=1 timeout 7200 cargo fuzz run -O "$target" "corpus/$target" "seeds/$target" -- \
      -runs="$runs" -max_len=65536 -timeout=10 >"$log" 2>&1; then crashed=0; else crashed=1; rc=1; fi
  took=$(($(date +%s) - start))
  done_line=$(grep -E '^Done [0-9]+ runs' "$log" | tail -1 || true)
  executions=$(echo "$done_line" | awk '{print $2}')
  seconds=$(echo "$done_line" | awk '{print $5}')
  echo "$target: ${done_line:-no Done line}; crashed=$crashed" >&2
  [ "$crashed" = 0 ] || tail -30 "$log" >&2
  printf '{"target": "%s", "runs_asked": %s, "executions": %s, "fuzzing_seconds": %s, "wall_seconds": %s, "crashes": %s, "sanitizer": "address"}\n' \
    "$target" "$runs" "${executions:-null}" "${seconds:-null}" "$took" "$crashed" >>"$lines"
  rm -f "$log"
done
cd "$root"
python3 bench/keep.py fuzz "$lines" --command "bench/fuzz.sh $runs"
exit $rc
