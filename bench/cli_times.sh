#!/usr/bin/env bash
# How long the commands the docs time take, from a release build: `snbuf record` on its defaults
# (README's first command) and `snbuf bench paper --quick` on /dev/shm, each in a fresh temp
# directory, REPEAT times. Keeps the wall-clock seconds in bench/results/cli_times/<date>-<host>.json,
# which README.md and `bench paper --help` quote.
#
# usage: bench/cli_times.sh [REPEAT (default 3)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
repeat="${1:-3}"
cd "$root"
cargo build --release -q -p snbuf
bin="$root/target/release/snbuf"
lines="$(mktemp)"
work="$(mktemp -d)"
trap 'rm -rf "$lines" "$work"' EXIT
time_of() {  # time_of NAME COMMAND...: runs it in a fresh directory, one JSON line
  local name="$1"; shift
  local dir="$work/$name-$i"
  mkdir -p "$dir"
  local start end
  start=$(date +%s.%N)
  (cd "$dir" && timeout 900 "$@" >/dev/null 2>&1)
  end=$(date +%s.%N)
  rm -rf "$dir"
  python3 -c "import json,sys; print(json.dumps({'command': sys.argv[1], 'repeat': int(sys.argv[2]), 'wall_seconds': round(float(sys.argv[4]) - float(sys.argv[3]), 2)}))" \
    "$name" "$i" "$start" "$end" >>"$lines"
}
for i in $(seq 1 "$repeat"); do
  time_of "snbuf record" "$bin" record
  time_of "snbuf bench paper --quick --target /dev/shm" "$bin" bench paper --quick --target /dev/shm --out out
done
python3 bench/keep.py cli_times "$lines" --command "bench/cli_times.sh $repeat"
