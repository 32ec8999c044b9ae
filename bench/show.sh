#!/usr/bin/env bash
# `snbuf show` on bursts of growing size: its peak memory (it must not grow with the burst) and
# its read rate, beside `cat` reading the same link files (the storage's own rate, the peer)
# from a cold page cache in the same run. Each size is a 2-link WIBEth burst recorded here.
#
# usage: bench/show.sh [SIZES_GIB (default "0.5 2 8")]
#        OUT=DIR (default a temporary directory on the root disk; bursts are removed after)
# Kept in bench/results/show/<date>-<host>.json; bench/tables.py makes BENCHMARKS.md's table.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sizes="${1:-0.5 2 8}"
target="${CARGO_TARGET_DIR:-/tmp/target-bench}"
cd "$root"
CARGO_TARGET_DIR="$target" cargo build --release -q -p snbuf
snbuf="$target/release/snbuf"
work="${OUT:-$(mktemp -d /var/tmp/snbuf-show-bench.XXXXXX)}"
lines="$(mktemp)"
trap 'rm -rf "$work" "$lines"' EXIT
cold() {  # drop the page cache so that each read comes from the disk (root only)
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; else echo "warm" ; fi
}
start=$(date +%s)
for gib in $sizes; do
  rate_mb=100   # per link, MB/s
  post_s=$(python3 -c "print(round($gib * (1 << 30) / (2 * $rate_mb * 1e6), 2))")
  id="b$gib"
  "$snbuf" record --frame wibeth --links 2 --rate-per-link "${rate_mb}MB/s" --buffer 1s \
    --pre 500ms --post "${post_s}s" --trigger-after 1s --method direct --output "$work" \
    --burst-id "$id" --json "$work/$id.record.json" >/dev/null 2>&1
  burst="$work/$id"
  bytes=$(cat "$burst"/link-*.dat | wc -c)
  cache=$(cold)
  t0=$(date +%s.%N); cat "$burst"/link-*.dat > /dev/null; t1=$(date +%s.%N)
  cold >/dev/null
  /usr/bin/time -f "%M %e %U %S" -o "$work/time" "$snbuf" show "$burst" --out "$work/page-$id" \
    --json > "$work/show.json" 2>/dev/null
  read -r rss_kb wall user sys < "$work/time"
  python3 - "$gib" "$bytes" "$t0" "$t1" "$rss_kb" "$wall" "$user" "$sys" "$work/show.json" "${cache:-cold}" >> "$lines" <<'PY'
import json, sys
gib, size, t0, t1, rss_kb, wall, user, sys_s, shown, cache = sys.argv[1:]
s = json.load(open(shown))
size = int(size)
cat_s = float(t1) - float(t0)
print(json.dumps({
    "burst_gib": float(gib), "file_bytes": size, "links": len(s["links"]),
    "frames": sum(l["frames"] for l in s["links"]),
    "show_s": float(wall), "show_cpu_s": float(user) + float(sys_s),
    "show_max_rss_mib": int(rss_kb) / 1024,
    "reduction_bytes_per_link": s["memory_bytes_per_link"],
    "show_mb_per_s": size / float(wall) / 1e6, "cat_s": cat_s, "cat_mb_per_s": size / cat_s / 1e6,
    "show_over_cat": (size / float(wall)) / (size / cat_s), "page_cache": cache}))
PY
  tail -1 "$lines" >&2
  rm -rf "$burst" "$work/page-$id"
done
python3 bench/keep.py show "$lines" --seconds $(($(date +%s) - start)) --command "bench/show.sh \"$sizes\""
