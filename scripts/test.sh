#!/usr/bin/env bash
# The test command of the README: installs what is missing, runs every test of the
# workspace, then checks that the safety tests still catch the bugs they guard against.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
# Incremental artifacts grow without bound in a shared target dir (they filled a
# 90 GB disk once); CI builds without them.
export CARGO_INCREMENTAL=0
# The gateway's /metrics must pass promtool (setup.sh installs it).
export CI_REQUIRE_PROMTOOL=1
PATH="$PATH:/opt/prometheus/usr/bin"

# Layering (STYLE.md): the gateway and the SDK reach cells through clients only.
for crate in holdfast-gateway holdfast-client; do
  if cargo tree --locked -e normal -p "$crate" | grep -qE 'openraft|rocksdb'; then
    echo "layering: $crate depends on openraft or rocksdb" >&2
    exit 1
  fi
done

cargo test --workspace --locked -- --test-threads=2
scripts/check-safety-tests.sh
