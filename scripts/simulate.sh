#!/usr/bin/env bash
# The deterministic simulation (docs/simulation.md): one 3-node cell — real openraft,
# the real cell service on RocksDB's in-memory environment, the SDK — over turmoil's
# simulated network and time, with seeded partitions and crashes; the drills' checker
# reads every seed's history. A failing seed prints the command that replays it.
# `--moves`: two cells, the registry and a gateway, the shard moving between the cells.
#
#   scripts/simulate.sh --seeds 10000            # seeds 0..9999, then seeds/s
#   scripts/simulate.sh --seeds 200 --moves      # with the registry and shard moves
#   scripts/simulate.sh --seeds 500 --from 7000
#   scripts/simulate.sh --seeds 200 --no-slow-disk  # without the slow disks (older histories)
#   scripts/simulate.sh --seed 4711 --history /tmp/h.jsonl   # replay one, keep its history
#   RUST_LOG=info scripts/simulate.sh --seed 4711            # ... with the servers' logs
#   scripts/simulate.sh --seeds 20 --plant token-reuse       # a planted bug (debug build)
#   scripts/simulate.sh --mutants 50 [--moves 5]     # each mutant of check_safety_tests.py
#                                                    # in the simulated code, up to 50 seeds
#                                                    # (5 for those that need moves; 0 skips them)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
export CARGO_INCREMENTAL=0
if [ "${1:-}" = "--mutants" ]; then
    exec python3 scripts/check_safety_tests.py --simulate "${2:?--mutants N}" "${@:3}"
fi
# A workspace of its own (drills/sim/Cargo.toml says why), in the shared target
# directory. Release-like speed for thousands of seeds; planted bugs exist only in
# debug builds.
profile=perf
for a in "$@"; do [ "$a" = "--plant" ] && profile=dev; done
cargo build -q --locked --profile "$profile" --manifest-path drills/sim/Cargo.toml
exec "$CARGO_TARGET_DIR/$([ "$profile" = dev ] && echo debug || echo perf)/holdfast-sim" "$@"
