#!/usr/bin/env bash
# Power-cut trials on a real kernel: `snbuf record` in a QEMU guest (Debian's kernel, an ext4 or
# xfs disk with a volatile write cache: nbdkit's cache filter in writeback mode), the plug pulled
# at a seeded random moment, then recover, verify, and every acknowledged chunk checked. One
# summary line per method; a failure names its seed so that it can be replayed. Root only (the
# image is loop-mounted to check it). See crates/snbuf/tests/powercut/ and RELIABILITY.md.
#
# usage: bench/powercut.sh [TRIALS_PER_METHOD (default 100)] [SEED (default: the time)]
#        env FS=ext4|xfs|ext4,xfs (default ext4), METHODS=direct,uring,buffered,msync, JOBS=1|2,
#        PROGRAMS=record,serve (default record; serve: cut mid-burst, then booted again and
#        started again, it must recover the burst itself),
#        APPEND=1 (add to the day's kept result instead of replacing it)
# The tallies are kept in bench/results/powercut/<date>-<host>.json (bench/tables.py makes
# RELIABILITY.md's table from it).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
trials="${1:-100}"
seed="${2:-$(date +%s)}"
filesystems="${FS:-ext4}"
methods="${METHODS:-direct,uring,buffered,msync}"
jobs="${JOBS:-1}"
programs="${PROGRAMS:-record}"
need=()
for p in qemu-system-x86_64:qemu-system-x86 nbdkit:nbdkit cpio:cpio mkfs.xfs:xfsprogs; do
  command -v "${p%%:*}" >/dev/null || need+=("${p#*:}")
done
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
ls /boot/vmlinuz-* >/dev/null 2>&1 || need+=(linux-image-amd64)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
fi
cd "$root"
cargo test --release -q -p snbuf --test powercut --no-run
lines="$(mktemp)"
logs="$(mktemp -d /tmp/powercut-logs.XXXXXX)"
trap 'rm -f "$lines"' EXIT
start=$(date +%s)
rc=0
IFS=, read -r -a all <<<"$methods"
IFS=, read -r -a fss <<<"$filesystems"
for fs in "${fss[@]}"; do
  echo "power cuts: $trials per method ($methods) on $fs, seed $seed, $jobs at a time" >&2
  # Methods split over JOBS processes: each guest is one emulated CPU.
  pids=()
  for ((j = 0; j < jobs; j++)); do
    mine=()
    for ((i = j; i < ${#all[@]}; i += jobs)); do mine+=("${all[i]}"); done
    [ ${#mine[@]} -gt 0 ] || continue
    # The whole output is kept (a failure's console tail is in it); the summary lines go on.
    out="$logs/$fs-$j.log"
    (status=0
      IFS=,; SNBUF_REQUIRE_QEMU=1 SNBUF_POWERCUT_FS="$fs" SNBUF_POWERCUT_TRIALS="$trials" \
      SNBUF_POWERCUT_SEED="$seed" SNBUF_POWERCUT_METHODS="${mine[*]}" SNBUF_POWERCUT_RESULT="$lines" \
      SNBUF_POWERCUT_PROGRAMS="$programs" \
      cargo test --release -q -p snbuf --test powercut "power_cuts_on_$fs" -- --nocapture \
        --test-threads 1 >"$out" 2>&1 ||
        status=1
      grep -oE 'power cuts \(.*|promises broken.*|panicked.*|test result.*|"[^"]*seed[^"]*"' "$out"
      [ $status = 0 ] || echo "FAILED: the whole output is in $out"
      exit $status) &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
done
# The trials must catch three broken recorders (one trial each, usually): their findings are
# kept beside the tallies.
SNBUF_REQUIRE_QEMU=1 SNBUF_POWERCUT_RESULT="$lines" \
  cargo test --release -q -p snbuf --test powercut the_trials_catch -- --nocapture 2>&1 |
  grep -oE '[a-z-]+: caught in trial.*|panicked.*|test result.*' || rc=1
# APPEND=1 adds this run's rows to the day's kept file (another method or file system).
python3 bench/keep.py powercut "$lines" ${APPEND:+--append} --seconds $(($(date +%s) - start)) \
  --command "FS=$filesystems METHODS=$methods JOBS=$jobs PROGRAMS=$programs bench/powercut.sh $trials $seed"
exit $rc
