# Sourced by the bench scripts that export to a real S3 store: `start_garage WORK` starts a fresh
# one-node Garage on 127.0.0.1 storing under WORK, with a key and a bucket `bench`, and exports
# the client's environment (AWS_*, SNBUF_S3_ENDPOINT). Installs Garage first if it is missing
# (cargo install, ~12 min on 2 cores). The caller stops it: `kill "$garage_pid"`.
# GARAGE_NICE: run the store at that nice and in the idle I/O class, so that a store on the
# same machine stands in for a remote one rather than competing with what is measured.
garage="$(command -v garage || echo "$HOME/.cargo/bin/garage")"
start_garage() {
  local work="$1"
  [ -x "$garage" ] || { echo "installing garage (cargo install, ~12 min)" >&2; cargo install garage --version 2.5.0 --locked -q; }
  port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  local s3 rpc admin node key
  s3=$(port); rpc=$(port); admin=$(port)
  mkdir -p "$work"
  cat > "$work/garage.toml" <<TOML
metadata_dir = "$work/meta"
data_dir = "$work/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$(python3 -c 'import secrets; print(secrets.token_hex(32))')"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$s3"
root_domain = ".s3.garage.localhost"
[admin]
api_bind_addr = "127.0.0.1:$admin"
TOML
  g() { "$garage" -c "$work/garage.toml" "$@"; }
  if [ -n "${GARAGE_NICE:-}" ]; then
    nice -n "$GARAGE_NICE" ionice -c3 "$garage" -c "$work/garage.toml" server >/dev/null 2>&1 &
  else
    "$garage" -c "$work/garage.toml" server >/dev/null 2>&1 &
  fi
  garage_pid=$!
  for _ in $(seq 50); do node=$(g status 2>/dev/null | awk '/NO ROLE/ {print $1}' || true); [ -n "$node" ] && break; sleep 0.2; done
  [ -n "$node" ] || { echo "garage did not start" >&2; return 1; }
  g layout assign -z dc1 -c 100G "$node" >/dev/null
  g layout apply --version 1 >/dev/null
  key=$(g key create bench)
  export AWS_ACCESS_KEY_ID=$(echo "$key" | awk '/Key ID/ {print $NF}')
  export AWS_SECRET_ACCESS_KEY=$(echo "$key" | awk '/Secret key/ {print $NF}')
  export AWS_REGION=garage SNBUF_S3_ENDPOINT="http://127.0.0.1:$s3"
  g bucket create bench >/dev/null
  g bucket allow --read --write --owner bench --key bench >/dev/null
  echo "garage $("$garage" --version 2>/dev/null | head -1) on 127.0.0.1:$s3"
}
