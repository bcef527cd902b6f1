#!/usr/bin/env bash
# The README's run command: a local 3-node cell on loopback, one OS process per node,
# formed, given a namespace and a shard, with a lock taken and described. Stays up
# until Ctrl-C (or exits after the demo with --once). Data lives under a fresh
# directory it names (or $HOLDFAST_DATA_DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh >/dev/null
cargo build -q -p holdfast
bin="$CARGO_TARGET_DIR/debug/holdfast"

once=0
[ "${1:-}" = "--once" ] && once=1
data="${HOLDFAST_DATA_DIR:-$(mktemp -d /tmp/holdfast-local.XXXXXX)}"
echo "data directory: $data"

pids=()
stop() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT INT TERM

for i in 1 2 3; do
  RUST_LOG=warn "$bin" cell run --node-id "$i" --data-dir "$data/node-$i" \
    --raft-addr "127.0.0.1:$((7100 + i))" --client-addr "127.0.0.1:$((7000 + i))" \
    >"$data/node-$i.log" 2>&1 &
  pids+=($!)
done
sleep 1
"$bin" cell init --raft-endpoint 127.0.0.1:7101 \
  --member 1=127.0.0.1:7101,127.0.0.1:7001 \
  --member 2=127.0.0.1:7102,127.0.0.1:7002 \
  --member 3=127.0.0.1:7103,127.0.0.1:7003 2>/dev/null || echo "(already initialized)"

export HOLDFAST_ENDPOINT=127.0.0.1:7001
for _ in $(seq 1 50); do
  "$bin" ns apply --ns payments --owner team-pay --intent correctness --lock-delay-ms 1000 --version 1 >/dev/null 2>&1 && break
  sleep 0.2
done
"$bin" shard adopt --ns payments --epoch 1 >/dev/null 2>&1 || true
echo "--- cell status (node 1)"
"$bin" cell status --raft-endpoint 127.0.0.1:7101
echo "--- take a lock"
"$bin" lock acquire --ns payments settle-batch-7 --ttl-ms 30000 --value worker-a
echo "--- describe it"
"$bin" lock describe --ns payments settle-batch-7
echo
echo "cell up: clients 127.0.0.1:7001-7003, raft 127.0.0.1:7101-7103, logs in $data"
if [ "$once" = 1 ]; then exit 0; fi
echo "Ctrl-C to stop."
wait
