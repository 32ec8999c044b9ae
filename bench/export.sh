#!/usr/bin/env bash
# Export throughput against a real S3 store: a fresh one-node Garage on 127.0.0.1, a ~400 MB
# burst, then (1) unthrottled export beside a raw multipart upload of the same files with the
# same client (target: export >= 0.9x raw), and (2) exports at a set rate (target: within 5%).
# See BENCHMARKS.md. Every export is kept in bench/results/export/<date>-<host>.json, from which
# bench/tables.py makes BENCHMARKS.md's tables.
#
# With BASELINE=PATH (an snbuf binary of an earlier commit, BASELINE_COMMIT its commit), each
# unthrottled round also runs the baseline's export of the same burst to the same store, right
# after this commit's: a change of the export path measured in the same run (issue 53: no worse).
#
# usage: [BASELINE=PATH BASELINE_COMMIT=SHA] bench/export.sh [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-3}"
(cd "$root" && cargo build --release -q)
S="$root/target/release/snbuf"
work="$(mktemp -d)"
. "$root/bench/garage.sh"
trap 'kill ${garage_pid:-} 2>/dev/null; wait ${garage_pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
start_garage "$work/garage"
"$S" record --links 4 --rate-per-link 25MB/s --buffer 2s --pre 1s --post 3s --trigger-after 1.2s \
  --output "$work/rec" --burst-id b --method direct >/dev/null 2>&1
echo "burst: $(du -sh "$work/rec/b" | cut -f1)"
lines="$work/lines.jsonl"
burst_bytes=$(du -sb "$work/rec/b" | cut -f1)
keep_row() { # ROUND RATE_MB_S [BASELINE_COMMIT]: the export's --json on stdin, one line out
  python3 -c 'import json,sys; r=json.load(sys.stdin); r.pop("objects", None); r["round"]=int(sys.argv[1]); r["rate_mb_s"]=float(sys.argv[2]) if sys.argv[2] else None; r["burst_bytes"]=int(sys.argv[3]); r["garage"]=sys.argv[4]; r.update({"baseline_commit": sys.argv[5]} if sys.argv[5] else {}); print(json.dumps(r))' \
    "$1" "$2" "$burst_bytes" "$("$garage" --version 2>/dev/null | head -1)" "${3:-}" >>"$lines"
}
say_row() {
  tail -1 "$lines" | python3 -c 'import json,sys; r=json.load(sys.stdin); s=r["seconds"]-r["verify_seconds"]; print("%s: %.1f MB/s, raw %.1f MB/s, ratio %.3f" % ("baseline " + r["baseline_commit"] if "baseline_commit" in r else "unthrottled", r["bytes_sent"]/s/1e6, r["raw_upload_bytes"]/r["raw_upload_seconds"]/1e6, (r["bytes_sent"]/s)/(r["raw_upload_bytes"]/r["raw_upload_seconds"])))'
}
for r in $(seq "$rounds"); do
  rm -f "$work/rec/b/export.json" "$work/rec/b/.export-journal.json"
  "$S" export "$work/rec/b" --to "s3://bench/unthrottled$r" --raw-compare --json 2>/dev/null | keep_row "$r" ""
  say_row
  if [ -n "${BASELINE:-}" ]; then
    rm -f "$work/rec/b/export.json" "$work/rec/b/.export-journal.json"
    "$BASELINE" export "$work/rec/b" --to "s3://bench/baseline$r" --raw-compare --json 2>/dev/null |
      keep_row "$r" "" "${BASELINE_COMMIT:-unknown}"
    say_row
  fi
done
for rate in 20 50; do
  for r in $(seq "$rounds"); do
    rm -f "$work/rec/b/export.json" "$work/rec/b/.export-journal.json"
    "$S" export "$work/rec/b" --to "s3://bench/rate$rate-$r" --rate "${rate}MB/s" --json 2>/dev/null | keep_row "$r" "$rate"
    tail -1 "$lines" | python3 -c 'import json,sys; r=json.load(sys.stdin); s=r["seconds"]-r["verify_seconds"]; print("--rate %gMB/s: %.2f MB/s sending" % (r["rate_mb_s"], r["bytes_sent"]/s/1e6))'
  done
done
python3 "$root/bench/keep.py" export "$lines" --command "bench/export.sh $rounds"
