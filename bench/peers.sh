#!/usr/bin/env bash
# Measures snbuf's persistence methods beside the real peers installed from Debian, in one run on
# the same targets, and prints ratios snbuf/peer (see BENCHMARKS.md):
#   pmem stand-in (a /dev/shm file): snbuf nt vs PMDK pmem_memcpy_persist loop, fio libpmem
#     (direct=1 sync=1: non-temporal copy + drain per write) and fio mmap (fdatasync=1: msync per write)
#   disk: snbuf direct/uring vs fio psync (direct=1), libaio and io_uring (direct=1, iodepth=32)
#
# usage: bench/peers.sh [--quick] [--rounds N] [--duration S] [--shm DIR] [--disk DIR] [--json FILE]
# The raw result goes to bench/results/peers/<date>-<host>.json; bench/tables.py makes
# BENCHMARKS.md's tables from it.
# Rounds are interleaved (snbuf, peers, snbuf, ...) and the median of each is reported, because
# the machines this runs on are shared and drift by several percent from one second to the next.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

need=()
command -v fio >/dev/null || need+=(fio)
[ -f /usr/include/libpmem.h ] || need+=(libpmem-dev)
command -v gcc >/dev/null || need+=(gcc)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  if [ "$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2; fi
fi

(cd "$root" && cargo build --release --features pmdk -q)
mkdir -p "$root/target/peers"
gcc -O2 -Wall -o "$root/target/peers/pmem_persist_loop" "$here/peers/pmem_persist_loop.c" -lpmem -lpthread

exec python3 "$here/peers.py" --snbuf "$root/target/release/snbuf" \
  --pmem-loop "$root/target/peers/pmem_persist_loop" "$@"
