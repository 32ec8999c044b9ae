#!/usr/bin/env bash
# Where network ingest's time goes at a high rate, in the steady state: `snbuf serve` (a small
# window, so preparing its files is over before the profile starts; no trigger) fed by `snbuf
# emit` with the defaults (GSO sender, GRO receiver), `perf record -a -g` over both CPUs for 3 s.
# The unit gets CPU 0, the sender CPU 1. Keeps the report, with these commands and the run's
# counts, as bench/results/ingest/<date>-<host>-profile.txt. See BENCHMARKS.md.
#
# usage: bench/ingest_profile.sh [RATE_PER_LINK]   (default 1180MB/s: 4 links, ~4.4 GiB/s)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
rate="${1:-1180MB/s}"
command -v perf >/dev/null || { echo "ingest_profile: needs perf" >&2; exit 2; }
(cd "$root" && cargo build --release -q)
snbuf="$root/target/release/snbuf"
work="$(mktemp -d /dev/shm/ingest-profile.XXXXXX)"
out="$here/results/ingest/$(date -u +%F)-$(hostname)-profile.txt"
port=$((40000 + RANDOM % 20000))
cleanup() { kill "${sender:-}" "${unit:-}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
"$snbuf" serve --source "udp://127.0.0.1:$port" --frame wibeth --links 4 --rate-per-link "$rate" \
  --buffer 0.75s --pre 0.2s --post 0.2s --method nt --output "$work/out" --socket "$work/ctl.sock" \
  --rcvbuf 32MiB --cpus 0 >/dev/null 2>&1 &
unit=$!
sleep 2
"$snbuf" emit --to "udp://127.0.0.1:$port" --links 4 --rate-per-link "$rate" --cpu 1 \
  --json "$work/emit.json" >/dev/null 2>&1 &
sender=$!
# The unit zeroes its buffers before it takes data (seconds on a VM): profile once frames come.
for _ in $(seq 120); do
  frames=$(timeout 5 "$snbuf" status --socket "$work/ctl.sock" --json 2>/dev/null |
    python3 -c 'import json,sys; print(sum((l or {}).get("frames", 0) for l in json.load(sys.stdin)["ingest"]["links"]))' 2>/dev/null || echo 0)
  [ "${frames:-0}" -gt 100000 ] && break
  sleep 0.5
done
[ "${frames:-0}" -gt 100000 ] || { echo "ingest_profile: no data reached the unit in 60 s" >&2; exit 1; }
# Then once the next burst's files are prepared (zeroing them is not ingest): the preparing
# thread's CPU time stands still for a second, or it is gone.
prepare_ticks() {
  for t in /proc/"$unit"/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = snbuf-prepare ] && awk '{print $14 + $15}' "$t/stat" 2>/dev/null
  done
  return 0
}
for _ in $(seq 120); do
  before=$(prepare_ticks); sleep 1
  [ "$before" = "$(prepare_ticks)" ] && break
done
perf record -q -a -g -o "$work/perf.data" -- sleep 3 2>/dev/null
timeout 10 "$snbuf" status --socket "$work/ctl.sock" --json > "$work/status.json"
kill -INT "$sender"; wait "$sender" || true
# The report is cut with head, which closes the pipe early: not a failure.
set +o pipefail
report() { perf report -i "$work/perf.data" --no-children -q -g none "$@" 2>/dev/null | grep -v '^$'; }
{
  echo "# bench/ingest_profile.sh $rate: perf record -a -g for 3 s, steady state, no trigger"
  echo "#   snbuf serve --source udp://127.0.0.1:PORT --frame wibeth --links 4 --rate-per-link $rate --buffer 0.75s --pre 0.2s --post 0.2s --method nt --output /dev/shm/... --rcvbuf 32MiB --cpus 0"
  echo "#   snbuf emit --to udp://127.0.0.1:PORT --links 4 --rate-per-link $rate --cpu 1"
  python3 - "$work/status.json" "$work/emit.json" <<'PY'
import json, sys
s, e = (json.load(open(p)) for p in sys.argv[1:3])
ing = [l for l in s["ingest"]["links"] if l]
fr, rc = sum(l["frames"] for l in ing), sum(l["receives"] for l in ing)
print("# whole run: %d frames, %.1f frames per receive, %d kernel drops, %d frames missing by timestamp;"
      " sender at most %.0f ms behind its schedule, its thread %.3f core-s/GiB"
      % (fr, fr / max(rc, 1), sum(l["kernel_drops"] for l in ing), sum(l["timestamp_gap_frames"] for l in ing),
         e["max_lag_s"] * 1e3, e["cpu_s"] / (e["bytes_per_s"] * e["seconds"] / 2**30)))
PY
  echo "# samples by CPU and command (CPU 0: the unit; CPU 1: the sender):"
  report --sort cpu,comm | head -8
  echo "# CPU 1 (the sender), by symbol ([k] kernel, [.] user):"
  report --cpu 1 --sort symbol | head -14
  echo "# CPU 0 (the unit), by thread and symbol:"
  report --cpu 0 --sort comm,symbol | head -16
} > "$out"
cat "$out"
