#!/usr/bin/env bash
# A first look at the lossless frame codec (crates/codec) on one core: the emulator's WIBEth frames
# (ProtoDUNE-HD's noise), 4096 frames, coded size and encode/decode GiB/s, RUNS times; then the
# same bytes through zstd (-1, -3, -19), xz -6 and lz4, each on one thread, size and compress
# time. Not yet the full comparison issue 52 asks (`snbuf bench codec`, Blosc2, the entropy
# bound). Kept in bench/results/codec_first_look/.
#
# usage: bench/codec_first_look.sh [RUNS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-3}"
cd "$root"
cargo build --release -q -p snbuf-codec --example speed
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
lines="$work/lines.jsonl"
start=$(date +%s)
for ((i = 0; i < runs; i++)); do
  SNBUF_CODEC_RESULT="$lines" SNBUF_CODEC_RAW="$work/raw.bin" target/release/examples/speed
done
raw_bytes=$(stat -c %s "$work/raw.bin")
peer() {  # name, command reading stdin and writing stdout
  local t0 t1 bytes
  t0=$(date +%s.%N)
  bytes=$($2 < "$work/raw.bin" | wc -c)
  t1=$(date +%s.%N)
  python3 -c "import json,sys; r,b,s=$raw_bytes,$bytes,$t1-$t0; print(json.dumps({'peer':'$1','raw_bytes':r,'coded_bytes':b,'ratio':b/r,'encode_gib_s':r/2**30/s}))" >> "$lines"
  tail -n 1 "$lines"
}
peer "zstd -1" "zstd -1 -T1 -c"
peer "zstd -3" "zstd -3 -T1 -c"
peer "zstd -19" "zstd -19 -T1 -c"
peer "xz -6" "xz -6 -T1 -c"
peer "lz4" "lz4 -c"
python3 bench/keep.py codec_first_look "$lines" --seconds $(($(date +%s) - start)) \
  --command "bench/codec_first_look.sh $runs"
