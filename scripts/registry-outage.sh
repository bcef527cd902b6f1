#!/usr/bin/env bash
# The registry's quorum lost for 30 minutes (issue #43, static stability): the
# `registry-outage` drill (docs/drills.md) against a fresh three-region playground with
# the production ownership lease (30 minutes), two of the three registry voters
# SIGSTOPped for MINUTES while the drill's fenced workload runs in every region. The
# drill checks the history: no failed call in any region, a registry write refused
# with UNAVAILABLE, writes back after the voters resume. CI runs the same drill for
# 60 s (cli/tests/drill.rs); this is the long run, not CI. Figures: docs/registry.md.
#
#   scripts/registry-outage.sh              # 30 minutes
#   MINUTES=5 scripts/registry-outage.sh
#
# Writes bench/results/registry-outage-<UTC time>/{drill.txt,drill/,playground.log}.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh >/dev/null
minutes="${MINUTES:-30}"
# The same selection the tests build (docs/development.md), so RocksDB is built once.
cargo build -q --workspace --tests
bin="$CARGO_TARGET_DIR/debug/holdfast"
out="bench/results/registry-outage-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
work=$(mktemp -d)
"$bin" dev --data-dir "$work/pg" --base-port "${BASE_PORT:-7600}" >"$out/playground.log" 2>&1 &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 240); do [ -f "$work/pg/endpoints.json" ] && break; sleep 0.5; done
[ -f "$work/pg/endpoints.json" ] || { tail -20 "$out/playground.log"; exit 1; }
echo "registry outage: $minutes minutes; commit $(git rev-parse --short HEAD)" | tee "$out/drill.txt"
"$bin" drill run --data-dir "$work/pg" --scenario registry-outage --settle-s 5 --cut-s $((minutes * 60)) --out "$out/drill" \
  | tee -a "$out/drill.txt"
