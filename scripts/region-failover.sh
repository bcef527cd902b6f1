#!/usr/bin/env bash
# A region holding 1,000 shards lost and failed over in one command (issue #43;
# figures in docs/registry.md, "A region lost"). On a fresh three-region playground
# (release build: the `perf` profile) with a short ownership lease, SHARDS shards are
# placed in the south region over NAMESPACES namespaces. In the same run, as the anchor:
# a planned evacuation of those shards (`drill evacuate`) and its rollback. Then south's
# processes are SIGKILLed and `holdfast region failover south` runs twice, on two
# playgrounds: with `--fence-confirmed` (the moves complete at once) and without (each
# waits out the source's ownership lease). Reported: each run's wall time against its
# bound (10 s; the lease plus 10 s), the share of the shards each surviving cell took
# (at most 60 %), the checker's verdict on the failover's history, and the failovers'
# times as ratios of the planned evacuation's. Not part of CI.
#
#   scripts/region-failover.sh                         # 1,000 shards, a 30 s lease
#   SHARDS=200 LEASE_MS=10000 PROFILE=debug scripts/region-failover.sh
#
# Writes bench/results/region-failover-<UTC time>/{summary.md,results.jsonl,*.txt}.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/setup.sh >/dev/null
shards="${SHARDS:-1000}"
namespaces="${NAMESPACES:-10}"
lease_ms="${LEASE_MS:-30000}"
profile="${PROFILE:-perf}"
base="${BASE_PORT:-7800}"
if [ "$profile" = debug ]; then
  cargo build -q --locked -p holdfast --bin holdfast
else
  # A second RocksDB build (release flags) the first time: 20-25 minutes on 2 cores.
  cargo build -q --locked --profile "$profile" -p holdfast --bin holdfast
fi
bin="$CARGO_TARGET_DIR/$profile/holdfast"
out="bench/results/region-failover-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
work=$(mktemp -d)
dev=""
stop_dev() {
  if [ -n "$dev" ]; then
    kill -TERM "$dev" 2>/dev/null || true
    wait "$dev" 2>/dev/null || true
    dev=""
  fi
}
trap 'stop_dev; rm -rf "$work"' EXIT
now_ms() { date +%s%3N; }

# start_playground NAME: a fresh playground in $work/NAME; sets $pg and $gw.
start_playground() {
  pg="$work/$1"
  "$bin" dev --data-dir "$pg" --base-port "$base" --ownership-lease-ms "$lease_ms" >"$out/$1-playground.log" 2>&1 &
  dev=$!
  for _ in $(seq 240); do [ -f "$pg/endpoints.json" ] && break; sleep 0.5; done
  [ -f "$pg/endpoints.json" ] || { tail -20 "$out/$1-playground.log"; exit 1; }
  gw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["regions"]["east"]["gateway"]["grpc"])' "$pg/endpoints.json")
  # The drill commands find the playground by HOLDFAST_PLAYGROUND; the others are
  # given the east gateway (the playground's certificates are their default).
  export HOLDFAST_PLAYGROUND="$pg"
}

# place_shards: NAMESPACES namespaces, SHARDS shards over them, all on south-1.
place_shards() {
  local began i n
  began=$(now_ms)
  for n in $(seq "$namespaces"); do
    "$bin" ns create "bench-$n" --owner bench --intent correctness --endpoints "$gw" >/dev/null
  done
  for i in $(seq 0 $((shards - 1))); do echo "bench-$((i % namespaces + 1)) s$i"; done |
    xargs -P 4 -L 1 sh -c '"$0" shard place "$2" "$3" --cell south-1 --endpoints "$1" >/dev/null' "$bin" "$gw"
  echo "placed $shards shards over $namespaces namespaces on south-1 in $(($(now_ms) - began)) ms"
}

# shares: each cell's share of the bench shards, as JSON {cell: count}.
shares() {
  "$bin" shard list -o json --endpoints "$gw" | python3 -c '
import collections, json, sys
rows = json.load(sys.stdin)
rows = rows.get("shards", rows) if isinstance(rows, dict) else rows
c = collections.Counter(r["cell"] for r in rows if r["ns"].startswith("bench-"))
print(json.dumps(dict(sorted(c.items()))))'
}

# timed NAME CMD...: runs CMD, its output to $out/NAME.txt; records NAME's wall ms.
timed() {
  local name=$1 began rc
  shift
  began=$(now_ms)
  rc=0
  "$@" >"$out/$name.txt" 2>&1 || rc=$?
  local took=$(($(now_ms) - began))
  echo "{\"run\": \"$name\", \"ms\": $took, \"exit\": $rc, \"shares\": $(shares)}" | tee -a "$out/results.jsonl"
  [ "$rc" = 0 ] || { tail -20 "$out/$name.txt"; exit 1; }
}

{
  echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) cores, profile $profile"
  echo "$shards shards over $namespaces namespaces homed in south; ownership lease $lease_ms ms"
} | tee "$out/README"

# 1. With the fencing confirmed; the planned evacuation and its rollback first, as the anchor.
start_playground confirmed
place_shards | tee -a "$out/README"
# In waves of 100 like the failover (the evacuation's default is 2, for a gentle drill).
timed evacuate "$bin" drill evacuate --region south --max-wave 100 --timeout-s 1800 --state-dir "$work/evac"
timed rollback "$bin" drill evacuate --region south --rollback --max-wave 100 --timeout-s 1800 --state-dir "$work/evac"
"$bin" drill fault kill-region --region south >"$out/kill-confirmed.txt"
timed failover-confirmed "$bin" region failover south --fence-confirmed --reason "region-failover.sh killed south" --out "$out/failover-confirmed"
stop_dev

# 2. Without a confirmation: every move waits out the source's lease.
start_playground unconfirmed
place_shards >/dev/null
"$bin" drill fault kill-region --region south >"$out/kill-unconfirmed.txt"
timed failover-unconfirmed "$bin" region failover south --out "$out/failover-unconfirmed"
stop_dev

python3 - "$out/results.jsonl" "$lease_ms" "$shards" <<'PY' | tee "$out/summary.md"
import json, sys
rows = {r["run"]: r for r in map(json.loads, open(sys.argv[1]))}
lease, shards = int(sys.argv[2]), int(sys.argv[3])
bounds = {"failover-confirmed": 10_000, "failover-unconfirmed": lease + 10_000}
print("| run | wall (ms) | bound (ms) | largest share of a surviving cell | ÷ planned evacuation |")
print("|---|---|---|---|---|")
evac = rows["evacuate"]["ms"]
for name in ("evacuate", "rollback", "failover-confirmed", "failover-unconfirmed"):
    r = rows[name]
    share = ""
    if name.startswith("failover"):
        counts = {c: n for c, n in r["shares"].items() if not c.startswith("south")}
        top = max(counts.values()) if counts else 0
        share = f"{100 * top / shards:.0f} % ({counts})"
    bound = bounds.get(name)
    verdict = "" if bound is None else (" ✓" if r["ms"] <= bound else " ✗ over")
    print(f"| {name} | {r['ms']}{verdict} | {bound or ''} | {share} | {r['ms'] / evac:.2f}× |")
PY
echo "results in $out"
