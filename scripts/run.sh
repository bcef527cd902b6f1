#!/usr/bin/env bash
# The README's run command: builds the `holdfast` binary and runs `holdfast dev`, a local
# multi-region playground on loopback — a registry voter, a 3-node cell and a gateway per
# region, one OS process per node — until Ctrl-C. Arguments go to `holdfast dev`:
#
#   scripts/run.sh                         fresh data directory (printed), ports from 7000
#   scripts/run.sh --data-dir /tmp/hf      the same directory again: same deployment back
#   scripts/run.sh --once                  start, take a lock through a gateway, print
#                                          its token, stop everything, exit 0
#
# $HOLDFAST_PLAYGROUND stands for --data-dir. See docs/playground.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh >/dev/null
# The same selection the tests build (--workspace --tests), so this reuses their
# RocksDB build instead of needing one of its own (docs/development.md).
cargo build -q --workspace --tests
exec "$CARGO_TARGET_DIR/debug/holdfast" dev "$@"
