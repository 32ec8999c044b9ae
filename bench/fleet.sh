#!/usr/bin/env bash
# Trigger delivery to a fleet: a fresh nats-server (JetStream) on 127.0.0.1, then
# `snbuf fleet bench` with 150 lightweight units and 100 triggers, three rounds. Target: p99
# <= 50 ms. See BENCHMARKS.md. The rounds are kept in bench/results/fleet/<date>-<host>.json, from
# which bench/tables.py makes BENCHMARKS.md's table.
#
# usage: bench/fleet.sh [UNITS=150] [TRIGGERS=100] [ROUNDS=3]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
units="${1:-150}"; triggers="${2:-100}"; rounds="${3:-3}"
command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ] || {
  echo "installing nats-server" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nats-server >&2
}
(cd "$root" && cargo build --release -q)
store="$(mktemp -d)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PATH="$PATH:/usr/sbin" nats-server -js -a 127.0.0.1 -p "$port" -sd "$store" >/dev/null 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true; rm -rf "$store"' EXIT
sleep 0.5
lines="$(mktemp)"
version="$(PATH="$PATH:/usr/sbin" nats-server --version 2>/dev/null | head -1)"
for r in $(seq "$rounds"); do
  "$root/target/release/snbuf" fleet bench --nats "nats://127.0.0.1:$port" --units "$units" --triggers "$triggers" \
    --json "$store/round.json" 2>/dev/null
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); r["round"]=int(sys.argv[2]); r["nats_server"]=sys.argv[3]; print(json.dumps(r))' \
    "$store/round.json" "$r" "$version" >>"$lines"
done
python3 "$root/bench/keep.py" fleet "$lines" --command "bench/fleet.sh $units $triggers $rounds"
rm -f "$lines"
