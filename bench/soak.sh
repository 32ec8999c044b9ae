#!/usr/bin/env bash
# Soak: back-to-back triggers in one `snbuf serve` (4 links, direct): every burst verifies, and
# the server's open descriptors and resident memory after each burst are printed (and must stay
# flat). See RELIABILITY.md.
#
# usage: bench/soak.sh [TRIGGERS (default 20)]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
SNBUF_SOAK_TRIGGERS="${1:-20}" \
  cargo test --release -q -p snbuf --test soak -- --nocapture 2>&1 |
  grep -oE 'soak:.*|panicked.*|FAILED.*|test result.*'
