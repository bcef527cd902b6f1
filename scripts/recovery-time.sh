#!/usr/bin/env bash
# How long `holdfast registry recover` takes for a registry of N namespaces (issue #44;
# docs/registry.md, "Recovery from a lost majority"): reading a survivor's directory,
# raising every epoch, writing the new member, and the recovered voter's start until it
# leads; then saving that registry's snapshot file over its RPC and restoring a new
# registry from it ("Snapshots"). Not CI: a figure for the docs, on a perf build.
#
#   scripts/recovery-time.sh            # 10,000 namespaces
#   scripts/recovery-time.sh 1000
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export CARGO_INCREMENTAL=0
n="${1:-10000}"
cargo build -q --locked --profile perf -p holdfast-registry --example recovery_time
for _ in 1 2 3; do
  "$CARGO_TARGET_DIR/perf/examples/recovery_time" "$n"
done
