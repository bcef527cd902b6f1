#!/usr/bin/env bash
# The deterministic simulation (docs/simulation.md): one 3-node cell — real openraft,
# the real cell service on RocksDB's in-memory environment, the SDK — over turmoil's
# simulated network and time, with seeded partitions and crashes; the drills' checker
# reads every seed's history. A failing seed prints the command that replays it.
#
#   scripts/simulate.sh --seeds 10000            # seeds 0..9999, then seeds/s
#   scripts/simulate.sh --seeds 500 --from 7000
#   scripts/simulate.sh --seed 4711 --history /tmp/h.jsonl   # replay one, keep its history
#   RUST_LOG=info scripts/simulate.sh --seed 4711            # ... with the servers' logs
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
# A workspace of its own (drills/sim/Cargo.toml says why), in the shared target
# directory; release-like speed for thousands of seeds.
cargo build -q --locked --profile perf --manifest-path drills/sim/Cargo.toml
exec "$CARGO_TARGET_DIR/perf/holdfast-sim" "$@"
