#!/usr/bin/env bash
# Export of one burst of emulated WIBEth links (the detector's noise; DUNE's ten links a socket by
# default) to a fresh one-node Garage at
# a paced link, as it is (`--codec none`) and through the frame codec (`--codec frames`), each
# read back and checked by the export, ROUNDS times alternating; kept in
# bench/results/export_codec/<date>-<host>.json for BENCHMARKS.md's table. Target (issue 52): a
# coded export in at most 45 % of the time of the uncompressed one, at --rate 100MB/s.
#
# usage: bench/export_codec.sh [ROUNDS=2] [RATES_MB_S="100 20"] [LINKS=10]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-2}"
rates="${2:-100 20}"
links="${3:-10}"
(cd "$root" && cargo build --release -q)
S="$root/target/release/snbuf"
work="$(mktemp -d)"
. "$root/bench/garage.sh"
trap 'kill ${garage_pid:-} 2>/dev/null; wait ${garage_pid:-} 2>/dev/null || true; rm -rf "$work"' EXIT
GARAGE_NICE=10 start_garage "$work/garage"
"$S" record --links "$links" --rate-per-link 25MB/s --buffer 2s --pre 1s --post 3s --trigger-after 1.2s \
  --frame wibeth --output "$work/rec" --burst-id b --method direct >/dev/null 2>&1
burst_bytes=$(du -sb "$work/rec/b" | cut -f1)
echo "burst: $(du -sh "$work/rec/b" | cut -f1)"
lines="$work/lines.jsonl"
start=$(date +%s)
for rate in $rates; do
  for r in $(seq "$rounds"); do
    for codec in none frames; do
      rm -f "$work/rec/b/export.json" "$work/rec/b/.export-journal.json"
      "$S" export "$work/rec/b" --to "s3://bench/$codec-$rate-$r" --rate "${rate}MB/s" --codec "$codec" --json 2>/dev/null |
        python3 -c 'import json,sys; r=json.load(sys.stdin); objs=r.pop("objects"); r.update(codec=sys.argv[1], rate_mb_s=float(sys.argv[2]), round=int(sys.argv[3]), burst_bytes=int(sys.argv[4]), links=int(sys.argv[5]), object_bytes=sum(o["size_bytes"] for o in objs)); print(json.dumps(r))' \
          "$codec" "$rate" "$r" "$burst_bytes" "$links" >>"$lines"
      tail -1 "$lines" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("--rate %gMB/s --codec %s: %.1f s (%.1f coding, %.1f reading back), %d B sent" % (r["rate_mb_s"], r["codec"], r["seconds"], r["coding_seconds"], r["verify_seconds"], r["bytes_sent"]))'
    done
  done
done
python3 "$root/bench/keep.py" export_codec "$lines" --command "bench/export_codec.sh $rounds \"$rates\" $links" \
  --seconds $(($(date +%s) - start))
