#!/usr/bin/env bash
# The side-by-side benchmark: holdfast against its anchor, a 3-member etcd 3.4 cluster
# (Debian etcd-server, v3lock API), on this machine, in this run. Same workloads, same
# client machine, rounds in alternating order; medians and ratios in the summary. With
# holdfast over mutual TLS (BENCH_TLS=on or both), a second etcd runs over mutual TLS
# too, and the summary sets each TLS row beside it. Not part of CI
# (docs/design.md: benchmarks do not run in CI). See docs/benchmarks.md.
#
#   scripts/bench.sh                 # 10 s per workload per system
#   BENCH_SECONDS=30 BENCH_ROUNDS=5 scripts/bench.sh
#   BENCH_TLS=on BENCH_WORKLOADS=single scripts/bench.sh   # a subset
#   BENCH_TLS=on BENCH_WORKLOADS="floor-rpc floor-fsync single efficiency" scripts/bench.sh  # with the machine's floor
#   BENCH_TLS=on BENCH_WORKLOADS="parallel:8 parallel:16 parallel:32" scripts/bench.sh  # other client counts
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

secs="${BENCH_SECONDS:-10}"
out="bench/results/$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

source scripts/anchors.sh
anchors_install
anchors_build

start_etcd

# Two holdfast playgrounds, each one region (a registry voter, a 3-node cell, a
# gateway) on loopback: as deployed (mutual TLS on every port), and --insecure
# (plaintext), so the cost of TLS is measured in the same run (BENCH_TLS=on|off|both).
tls="${BENCH_TLS:-both}"
systems=(etcd)
if [ "$tls" != off ]; then
    # etcd as deployed too (mutual TLS), so the TLS rows have a like-for-like anchor.
    start_etcd_tls
    start_holdfast holdfast 7400
    systems+=(etcd-tls holdfast-gateway holdfast-cell)
fi
if [ "$tls" != on ]; then
    start_holdfast holdfast-plain 7500 --insecure
    systems+=(holdfast-gateway-plain holdfast-cell-plain)
fi

{
    echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ), $(nproc) cores"
    echo "etcd $(etcd --version | head -1 | awk '{print $3}'); $secs s per workload per system, ${BENCH_ROUNDS:-3} rounds"
} >"$out/README"
rounds="${BENCH_ROUNDS:-3}"
for round in $(seq "$rounds"); do
    for spec in ${BENCH_WORKLOADS:-floor-rpc floor-fsync single efficiency parallel contended owner-lookups renewals}; do
        # `parallel:16`: a workload at a client count other than its default (the
        # acquire-p99 load envelope is a sweep of these, docs/benchmarks.md).
        w="${spec%%:*}"
        clients=()
        if [ "$spec" != "$w" ]; then clients=(--clients "${spec#*:}"); fi
        # Alternate the order every round, so no system always runs on the warmer (or
        # the more fragmented) machine.
        order=("${systems[@]}")
        if [ $((round % 2)) -eq 0 ]; then order=($(printf '%s\n' "${systems[@]}" | tac)); fi
        for sys in "${order[@]}"; do
            # Owner lookups are a gateway's (and the registry's) answer, not a cell's.
            if [ "$w" = owner-lookups ] && [[ $sys == holdfast-cell* ]]; then continue; fi
            # The floor (a gRPC round trip to a gateway, a synced append) is the
            # machine's, measured on the gateway paths only.
            if [[ $w == floor-* ]] && [[ $sys == etcd* || $sys == holdfast-cell* ]]; then continue; fi
            certs=(--certs-dir "$work/holdfast/certs")
            case $sys in
                etcd) args=(--system etcd --endpoints "$etcd_eps") ;;
                etcd-tls) args=(--system etcd --endpoints "$etcd_tls_eps" --label "mutual TLS" --certs-dir "$work/etcd-certs") ;;
                holdfast-gateway) args=(--system holdfast --endpoints 127.0.0.1:7400 --label gateway "${certs[@]}") ;;
                holdfast-cell) args=(--system holdfast --endpoints 127.0.0.1:7404,127.0.0.1:7405,127.0.0.1:7406 --label cell "${certs[@]}") ;;
                holdfast-gateway-plain) args=(--system holdfast --endpoints 127.0.0.1:7500 --label "gateway, plaintext") ;;
                holdfast-cell-plain) args=(--system holdfast --endpoints 127.0.0.1:7504,127.0.0.1:7505,127.0.0.1:7506 --label "cell, plaintext") ;;
            esac
            echo "-- round $round: $spec $sys"
            "$bin/holdfast-bench" run --workload "$w" --seconds "$secs" "${clients[@]}" "${args[@]}" | tee -a "$out/results.jsonl"
        done
    done
done
python3 scripts/bench_summary.py "$out/results.jsonl" | tee "$out/summary.md"
echo "results in $out"
