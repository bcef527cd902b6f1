#!/usr/bin/env bash
# Where one client's writes spend the machine: a one-region playground over mutual TLS
# (as scripts/bench.sh starts it), one `single` client direct to the cell for
# CPU_SECONDS (10), and, per process, the CPU time and the context switches per Raft
# write (the cell leader's proposals in that time). A diagnostic beside the benchmark,
# not a benchmark: it has no anchor and claims no ratio. See docs/benchmarks.md
# ("Where one write's CPU goes").
#
#   scripts/cpu-per-write.sh
#   CPU_SECONDS=30 CPU_WORKLOAD=parallel scripts/cpu-per-write.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

secs="${CPU_SECONDS:-10}"
workload="${CPU_WORKLOAD:-single}"

source scripts/anchors.sh
anchors_install
anchors_build
start_holdfast holdfast 7400
certs="$work/holdfast/certs"
curl_tls=(--cacert "$certs/ca.crt" --cert "$certs/client.root.crt" --key "$certs/client.root.key")

# Per process of the playground: "pid name cpu_ticks context_switches" (all threads).
snapshot() {
    for p in $(pgrep -f "$work/holdfast"); do
        local name ticks switches
        name=$(tr '\0' ' ' <"/proc/$p/cmdline" | grep -o 'nodes/[a-z0-9-]*' | head -1 | cut -d/ -f2)
        ticks=$(awk '{print $14 + $15}' "/proc/$p/stat")
        switches=$(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s + 0}')
        echo "$p ${name:-supervisor} $ticks $switches"
    done
}

# Raft proposals committed by each cell node so far (only the leader has any).
proposals() {
    local total=0 n
    for port in 7410 7411 7412; do
        n=$(curl -s "${curl_tls[@]}" "https://127.0.0.1:$port/metrics" | awk '/^holdfast_raft_propose_seconds_count/ {print $2}')
        total=$((total + ${n:-0}))
    done
    echo "$total"
}

before=$(snapshot)
writes_before=$(proposals)
"$bin/holdfast-bench" run --workload "$workload" --seconds "$secs" --system holdfast \
    --endpoints 127.0.0.1:7404,127.0.0.1:7405,127.0.0.1:7406 --certs-dir "$certs" | tee "$work/run.json"
after=$(snapshot)
writes=$(($(proposals) - writes_before))

python3 - "$writes" "$(getconf CLK_TCK)" "$work/run.json" <<EOF
import json, sys
writes, hz = int(sys.argv[1]), int(sys.argv[2])
run = json.load(open(sys.argv[3]))
before = {l.split()[0]: l.split() for l in """$before""".splitlines() if l.strip()}
after = [l.split() for l in """$after""".splitlines() if l.strip()]
print(f"\n{run['workload']}: {run['ops_per_s']:.0f} cycles/s, {writes} Raft writes in the run (the leader's proposals)")
print(f"| process | CPU ms per write | context switches per write |")
print(f"|---|---:|---:|")
for pid, name, ticks, switches in after:
    if pid not in before or writes == 0:
        continue
    cpu_ms = (int(ticks) - int(before[pid][2])) * 1000 / hz / writes
    cs = (int(switches) - int(before[pid][3])) / writes
    print(f"| {name} | {cpu_ms:.3f} | {cs:.1f} |")
EOF
