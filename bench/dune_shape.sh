#!/usr/bin/env bash
# A unit at DUNE's operating shape, scaled in rate only (bench/dune_shape.py says what runs):
# a 10 s buffer, alerts 9 s before to 100 s after, (a) one alert, (b) a second 50 s into it,
# (c) a third 3 s after the grown window's end, (d) one while a burst exports to a real S3
# store (a one-node Garage on this machine, run at nice 19 and idle I/O so that it stands in for
# a remote store), on ext4 (the root disk) and on tmpfs (/dev/shm, memory: its rate is lower so
# that two bursts fit in RAM); then a soak on ext4. Kept in bench/results/dune_shape/, from
# which bench/tables.py makes RELIABILITY.md's table.
#
# usage: bench/dune_shape.sh [LINKS=10] [EXT4_MB_S=4] [TMPFS_MB_S=2] [SOAK_MINUTES=60]
# (10 x 4 MB/s: the largest scale whose two complements, their copies in the store and the
# bursts being sealed fit on this machine's disk at once: ~20 GB of bursts, ~15 GB stored)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
links="${1:-10}" ext4_rate="${2:-4}" tmpfs_rate="${3:-2}" soak_minutes="${4:-60}"
(cd "$root" && cargo build --release -q)
S="$root/target/release/snbuf"
work="$(mktemp -d /var/tmp/snbuf-shape.XXXXXX)"
shm="/dev/shm/snbuf-shape.$$"
. "$root/bench/garage.sh"
stop_garage() { kill ${garage_pid:-} 2>/dev/null || true; wait ${garage_pid:-} 2>/dev/null || true; garage_pid=; rm -rf "$work/garage"; }
trap 'stop_garage; rm -rf "$work" "$shm"' EXIT
start=$(date +%s)
rc=0
# Each run's rows are kept as soon as it ends (--append), so that a later run cut short loses
# only its own; its serve.log is kept beside the lines until the script ends.
run() { # MEDIUM DIR RATE [more options]
  local medium="$1" dir="$2" rate="$3" lines="$work/lines-$1-$$.jsonl"; shift 3
  echo "== $medium: $links links x $rate MB/s $*"
  if [[ " $* " == *" --export-to "* ]]; then GARAGE_NICE=19 start_garage "$work/garage"; fi
  python3 "$root/bench/dune_shape.py" --snbuf "$S" --output "$dir/out" --medium "$medium" \
    --links "$links" --rate-mb-s "$rate" --lines "$lines" "$@" || rc=1
  stop_garage
  cp "$dir/serve.log" "$work/serve-$medium.log" 2>/dev/null || true
  rm -rf "$dir"
  # The first run starts the day's file afresh (a run earlier that day was of another commit);
  # the next ones add to it.
  [ -s "$lines" ] && python3 "$root/bench/keep.py" dune_shape "$lines" $append \
    --seconds $(($(date +%s) - start)) \
    --command "bench/dune_shape.sh $links $ext4_rate $tmpfs_rate $soak_minutes" && append=--append
  rm -f "$lines"
}
append=
run ext4 "$work/ext4" "$ext4_rate" --export-to s3://bench/ext4
mkdir -p "$shm"
run tmpfs "$shm" "$tmpfs_rate" --export-to s3://bench/tmpfs
if [ "$soak_minutes" != 0 ]; then
  run ext4 "$work/soak" "$ext4_rate" --soak-minutes "$soak_minutes" --soak-every 180
fi
exit $rc
