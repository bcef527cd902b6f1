#!/usr/bin/env bash
# Failover, side by side: how long lock grants stop when the leader dies, for holdfast
# (a one-region playground, through its gateway, mutual TLS as deployed) and for its
# anchor (a 3-member etcd cluster, v3lock), in the same run on this machine. One
# client cycles lock + unlock on one key; the leader is SIGKILLed, and restarted a few
# seconds later, KILLS times. Reports every gap between consecutive grants and the
# ratio of the longest ones (docs/guarantees.md, "Failover"). Not part of CI.
#
#   scripts/failover.sh            # 5 kills per system
#   KILLS=10 scripts/failover.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

kills="${KILLS:-5}"
out="bench/results/failover-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

source scripts/anchors.sh
anchors_install
anchors_build

start_etcd
start_holdfast holdfast 7400

kill_leader() { # system
    case $1 in
        etcd)
            local i
            i=$(etcd_leader)
            [ -n "$i" ] || { echo "   no etcd leader found"; return 0; }
            kill -KILL "${etcd_pid[$i]}"
            echo "   killed etcd member e$i"
            ;;
        holdfast) "$bin/holdfast" drill fault kill-leader --data-dir "$work/holdfast" --cell east-1 | sed 's/^/   /' ;;
    esac
}

restart_killed() { # system
    case $1 in
        etcd)
            local i
            for i in 1 2 3; do
                kill -0 "${etcd_pid[$i]}" 2>/dev/null || start_etcd_member "$i" existing
            done
            ;;
        holdfast) "$bin/holdfast" drill fault restart --data-dir "$work/holdfast" >/dev/null ;;
    esac
}

{
    echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) cores"
    echo "etcd $(etcd --version | head -1 | awk '{print $3}'); $kills leader kills per system, SIGKILL then restart after 4 s"
} >"$out/README"
secs=$((5 + kills * 8 + 2))
for sys in etcd holdfast; do
    case $sys in
        etcd) args=(--system etcd --endpoints "$etcd_eps") ;;
        holdfast) args=(--system holdfast --endpoints 127.0.0.1:7400 --label gateway --certs-dir "$work/holdfast/certs") ;;
    esac
    echo "-- $sys: $secs s of lock + unlock, the leader killed $kills times"
    "$bin/holdfast-bench" failover "${args[@]}" --seconds "$secs" >"$work/$sys.json" 2>"$work/$sys.err" &
    client=$!
    sleep 5
    for _ in $(seq "$kills"); do
        kill_leader "$sys"
        sleep 4
        restart_killed "$sys"
        sleep 4
    done
    wait "$client" || { cat "$work/$sys.err"; exit 1; }
    tee -a "$out/results.jsonl" <"$work/$sys.json"
done
python3 - "$out/results.jsonl" "$kills" <<'PY' | tee "$out/summary.md"
import json, statistics, sys
rows = {r["system"]: r for r in map(json.loads, open(sys.argv[1]))}
print("| system | grants | errors | longest gap (ms) | median of the longest gaps, one per kill (ms) | gaps ≥ 250 ms |")
print("|---|---|---|---|---|---|")
med = {}
for name, r in rows.items():
    # One gap per kill: the `kills` longest.
    top = sorted((g for _, g in r["gaps"]), reverse=True)[: int(sys.argv[2])]
    med[name] = statistics.median(top) if top else 0.0
    listed = ", ".join(f"{g:.0f} @{t:.0f}s" for t, g in r["gaps"])
    print(f"| {name} | {r['grants']} | {r['errors']} | {r['max_gap_ms']:.0f} | {med[name]:.0f} | {listed} |")
if "etcd" in rows and "holdfast" in rows and rows["etcd"]["max_gap_ms"] > 0:
    print()
    print(f"holdfast ÷ etcd, longest gap: {rows['holdfast']['max_gap_ms'] / rows['etcd']['max_gap_ms']:.2f}×; "
          f"median gap per kill: {med['holdfast'] / med['etcd']:.2f}×" if med.get("etcd") else "")
PY
echo "results in $out"
