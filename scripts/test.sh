#!/usr/bin/env bash
# The test command of the README: installs what is missing, runs every test of the
# workspace, then checks that the safety tests still catch the bugs they guard against.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh
cargo test --workspace --locked -- --test-threads=2
scripts/check-safety-tests.sh
