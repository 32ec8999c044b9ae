#!/usr/bin/env bash
# The recorder's keep-up rate: the highest total input rate at which a recording loses no frame,
# beside `snbuf bench write` for the same method, chunk size and writers, and beside fio's best
# O_DIRECT write on the same disk, with CPU core-seconds per GiB recorded. See BENCHMARKS.md.
#
# usage: bench/keepup.sh [--disk DIR]... [--shm DIR] [--links N] [--writers N] [--methods uring,direct,nt] [--quick]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
command -v fio >/dev/null || { echo "installing fio" >&2; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >&2; }
(cd "$root" && cargo build --release -q)
exec python3 "$here/keepup.py" --snbuf "$root/target/release/snbuf" "$@"
