#!/usr/bin/env bash
# The registry's quorum lost for 30 minutes (issue #43, static stability): the
# `registry-outage` drill (docs/drills.md) against a fresh three-region playground with
# the production ownership lease (35 minutes), two of the three registry voters
# SIGSTOPped for MINUTES while the drill's fenced workload runs in every region. The
# drill checks the history: no failed call in any region, a registry write refused
# with UNAVAILABLE, writes back after the voters resume. CI runs the same drill for
# 60 s (cli/tests/drill.rs); this is the long run, not CI. Figures: docs/registry.md.
#
#   scripts/registry-outage.sh              # 30 minutes
#   MINUTES=5 scripts/registry-outage.sh
#
# Writes bench/results/registry-outage-<UTC time>/{drill.txt,report.md,report.json,report.svg};
# the history (about 60 MB for 30 minutes) and the playground's log stay out of the
# repo, in HISTORY_DIR (default ~/.cache/holdfast/drills/registry-outage-<UTC time>).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh >/dev/null
minutes="${MINUTES:-30}"
# The same selection the tests build (docs/development.md), so RocksDB is built once.
cargo build -q --workspace --tests
bin="$CARGO_TARGET_DIR/debug/holdfast"
stamp="registry-outage-$(date -u +%Y%m%dT%H%M%SZ)"
out="bench/results/$stamp"
keep="${HISTORY_DIR:-$HOME/.cache/holdfast/drills/$stamp}"
mkdir -p "$out" "$keep"
work=$(mktemp -d)
"$bin" dev --data-dir "$work/pg" --base-port "${BASE_PORT:-7600}" >"$keep/playground.log" 2>&1 &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 240); do [ -f "$work/pg/endpoints.json" ] && break; sleep 0.5; done
[ -f "$work/pg/endpoints.json" ] || { tail -20 "$keep/playground.log"; exit 1; }
echo "registry outage: $minutes minutes; commit $(git describe --always --dirty); history in $keep" | tee "$out/drill.txt"
status=0
"$bin" drill run --data-dir "$work/pg" --scenario registry-outage --settle-s 5 --cut-s $((minutes * 60)) --out "$keep" \
  | tee -a "$out/drill.txt" || status=$?
cp "$keep"/report.* "$out"/ 2>/dev/null || true
exit $status
