#!/usr/bin/env bash
# The test command of the README: installs what is missing, runs every test of the
# workspace, then checks that the safety tests still catch the bugs they guard against.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
echo "test: set up in $SECONDS s"
# Each stage's time, printed again at the end (docs/development.md, "CI time").
times=("set up: $SECONDS s")
lap=$SECONDS
# Incremental artifacts grow without bound in a shared target dir (they filled a
# 90 GB disk twice); CI builds without them, and clears what earlier builds left
# when the disk runs low: incremental state and old test executables only, never
# the dependency artifacts (RocksDB's build stays warm).
export CARGO_INCREMENTAL=0
mkdir -p "$CARGO_TARGET_DIR"
free_gb=$(df -Pk "$CARGO_TARGET_DIR" 2>/dev/null | awk 'NR==2 {print int($4/1048576)}')
if [ "${free_gb:-100}" -lt 30 ]; then
  echo "test: ${free_gb} GB free; clearing incremental state and old test executables"
  rm -rf "$CARGO_TARGET_DIR"/debug/incremental "$CARGO_TARGET_DIR"/mutants
  find "$CARGO_TARGET_DIR"/debug/deps -maxdepth 1 -type f -perm -u+x \
    ! -name '*.so' ! -name '*.rlib' ! -name '*.rmeta' ! -name '*.d' -mmin +60 -delete 2>/dev/null || true
fi
# The gateway's /metrics must pass promtool (setup.sh installs it).
export CI_REQUIRE_PROMTOOL=1
PATH="$PATH:/opt/prometheus/usr/bin"

# Layering (docs/development.md, "Layers"): the gateway and the SDK reach cells through
# clients only; servers never depend on the SDK (the wire edge, holdfast-rpc, is theirs).
for crate in holdfast-gateway holdfast-client; do
  if cargo tree --locked -e normal -p "$crate" | grep -qE 'openraft|rocksdb'; then
    echo "layering: $crate depends on openraft or rocksdb" >&2
    exit 1
  fi
done
for crate in holdfast-cell holdfast-registry holdfast-raft holdfast-rpc; do
  if cargo tree --locked -e normal -p "$crate" | grep -q 'holdfast-client'; then
    echo "layering: $crate depends on the SDK (holdfast-client)" >&2
    exit 1
  fi
done

# The layer table of docs/development.md against the manifests (and its self-test: a
# planted upward dependency must be refused).
python3 scripts/check_layers.py --self-test
python3 scripts/check_layers.py
# Every repo path the docs and the comments cite exists (and the check finds a planted
# stale one).
python3 scripts/check_citations.py --self-test
python3 scripts/check_citations.py

# Every planted bug's guarded text is still in the code (the mutants themselves run last).
python3 scripts/check_safety_tests.py --texts-only

cargo fmt --all --check
# Lints, warnings as errors. With no debug info for dependencies (Cargo.toml), clippy
# and the tests run librocksdb-sys's build script as one unit: RocksDB's C++ is
# compiled once, here on a fresh machine, and the test build reuses it. (Pointing
# ROCKSDB_LIB_DIR elsewhere for clippy would make every later test build compile it
# again: docs/development.md.)
cargo clippy --locked --workspace --all-targets -- -D warnings
# The simulation is a workspace of its own (drills/sim/Cargo.toml says why).
cargo fmt --manifest-path drills/sim/Cargo.toml --check
cargo clippy --locked --manifest-path drills/sim/Cargo.toml --all-targets -- -D warnings

echo "test: formatted and linted at $((SECONDS / 60)) min"
times+=("layering, texts, format, lints: $((SECONDS - lap)) s")
lap=$SECONDS
# terraform/: formatted, the modules applied offline, the Kubernetes objects checked.
scripts/terraform-check.sh

# Alert rules (promtool check and unit tests) and the dashboard (docs/observability.md).
scripts/check-observability.sh
times+=("terraform, alerts, dashboard: $((SECONDS - lap)) s")

# TEST_NO_FAIL_FAST=1 (scripts/stress.sh) runs every stage and every test binary even
# after one fails, and exits non-zero at the end if any did. CI stops at the first.
failed=0
stage() {
  local began=$SECONDS
  if [ -n "${TEST_NO_FAIL_FAST:-}" ]; then "$@" || { echo "test: FAILED: $*"; failed=1; }; else "$@"; fi
  echo "test: stage took $((SECONDS - began)) s (at $((SECONDS / 60)) min): $*"
  times+=("$1: $((SECONDS - began)) s")
}
# Every test binary of the workspace and the deterministic simulation's fixed seeds
# (docs/simulation.md; thousands of seeds: scripts/simulate.sh), built first, then run
# two binaries at a time (TEST_JOBS): most of them wait far more than they compute; the
# heavy ones (many processes, or all CPU) never beside each other; the simulation (on
# simulated time) beside them all at the lowest CPU priority (docs/development.md, "CI
# time").
stage scripts/run_tests.py --suite=--workspace --suite="--manifest-path drills/sim/Cargo.toml" \
  --background "drills/sim test:sim" \
  --heavy "cli test:drill" --heavy "cli test:observability" --heavy "cli test:processes" --heavy "gateway test:gateway" --heavy "cli test:security" \
  ${TEST_NO_FAIL_FAST:+--no-fail-fast} -- --test-threads=2
# TEST_SKIP_MUTANTS=1 (scripts/stress.sh only: the mutants run the suite's own tests
# again, and under stress they take an hour). CI never sets it.
if [ -z "${TEST_SKIP_MUTANTS:-}" ]; then
  stage scripts/check-safety-tests.sh
fi
echo "test: done in $((SECONDS / 60)) min $((SECONDS % 60)) s"
printf 'test: %s\n' "${times[@]}"
exit $failed
