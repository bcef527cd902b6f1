#!/usr/bin/env bash
# The safety checker's positive control (issue #20; docs/guarantees.md, "The checker's
# positive control"): a lock holder SIGSTOPped past its lease while another takes the
# lock and writes, then resumed to make its write; the drills' checker reads each
# run's whole history. Against a 3-member etcd 3.4 (v3lock API, as the benchmark runs
# it) and a holdfast playground (mutual TLS), each with a resource that accepts every
# write and one that checks fencing tokens. Not part of CI (it needs etcd).
#
#   scripts/control.sh                    # 5 trials per row
#   CONTROL_TRIALS=20 scripts/control.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

trials="${CONTROL_TRIALS:-5}"
out="bench/results/control-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"

source scripts/anchors.sh
anchors_install
anchors_build

start_etcd
start_holdfast holdfast 7400

echo "commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ); $trials trials per row, 3 s leases" >"$out/README"
for sys in etcd holdfast; do
    for fenced in no yes; do
        case $sys in
            etcd) args=(--system etcd --endpoints "$etcd_eps") ;;
            holdfast) args=(--system holdfast --endpoints 127.0.0.1:7400 --label gateway --certs-dir "$work/holdfast/certs") ;;
        esac
        flag=()
        if [ "$fenced" = yes ]; then flag=(--fenced); fi
        echo "-- $sys, fenced: $fenced"
        "$bin/holdfast-bench" control "${args[@]}" "${flag[@]}" --trials "$trials" --history "$out/$sys-fenced-$fenced.jsonl" | tee -a "$out/results.jsonl"
    done
done
python3 - "$out/results.jsonl" <<'PY' | tee "$out/summary.md"
import json, sys
print("| system | resource | trials | trials with a stale write accepted | late writes refused | other violations |")
print("|---|---|---:|---:|---:|---|")
for l in open(sys.argv[1]):
    r = json.loads(l)
    other = {k: v for k, v in r["violations"].items() if k != "stale write accepted"}
    print(f"| {r['system']} | {'fenced (holdfast-fence)' if r['fenced'] else 'accepts every write'} | {r['trials']} "
          f"| {r['trials_with_stale_write']} | {r['late_writes_rejected']} | {other or 'none'} |")
PY
echo "results in $out"
