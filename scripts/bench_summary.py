#!/usr/bin/env python3
"""Turns holdfast-bench's JSON lines (several rounds) into a Markdown table: per
workload and system, the median over rounds of each figure, the spread of the
throughput, and the ratios of the medians to etcd's."""
import json
import statistics
import sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
# Keyed by workload, client count and system: a workload swept over client counts
# (`parallel:16`) is compared with etcd at the same count.
runs = defaultdict(list)
for r in rows:
    runs[(r["workload"], r["clients"], r["system"] + (f" ({r['label']})" if r.get("label") else ""))].append(r)


def med(rs, k):
    return statistics.median(r[k] for r in rs)


aims = {
    "single": "≥ 2× cycles/s, ≤ 0.5× acquire p99",
    "efficiency": "≥ 5× etcd's cycles/s through the gateway, ≥ 10× direct (etcd runs its one kind of lock)",
    "parallel": "≥ 2× cycles/s",
    "contended": "≥ 3× hand-offs/s",
    "owner_lookups": "≥ 3× etcd's range reads (lookups/s; 'acquire' is one lookup)",
    "renewals": "single's acquire p99 with the background renewing ≤ 1.1× single's alone (below)",
}
# Aimed ratios to etcd's cycles/s, per workload and path (gateway, cell), for the floor
# table at the end.
AIMED = {"single": {"gateway": 1.5, "cell": 2.0}, "efficiency": {"gateway": 5.0, "cell": 10.0}}
WORKLOADS = ["floor_rpc", "floor_fsync", "single", "efficiency", "parallel", "contended", "owner_lookups", "renewals"]
print("| workload | system | clients | rounds | ops/s (median) | ops/s min–max | acquire p50 ms | acquire p99 ms | cycle p99 ms | errors | ops/s vs etcd | acquire p99 vs etcd |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for w in WORKLOADS:
    for (rw, clients, name), rs in sorted(runs.items(), key=lambda kv: kv[0][1]):
        if rw != w:
            continue
        etcd = runs.get((w, clients, "etcd"))
        ops = [r["ops_per_s"] for r in rs]
        if etcd:
            thr = f"{med(rs, 'ops_per_s') / med(etcd, 'ops_per_s'):.2f}×"
            lat = f"{med(rs, 'acquire_p99_ms') / med(etcd, 'acquire_p99_ms'):.2f}×"
        else:
            thr = lat = "-"
        print(
            f"| {w} | {name} | {rs[0]['clients']} | {len(rs)} | {med(rs, 'ops_per_s'):.0f} | {min(ops):.0f}–{max(ops):.0f} "
            f"| {med(rs, 'acquire_p50_ms'):.2f} | {med(rs, 'acquire_p99_ms'):.2f} | {med(rs, 'cycle_p99_ms'):.2f} "
            f"| {sum(r['errors'] for r in rs)} | {thr} | {lat} |"
        )
print()
for w, a in aims.items():
    if any(rw == w for rw, _, _ in runs):
        print(f"- {w}: the aim is {a}")
# Renewals: the same system's single client with and without the background.
lines = []
for (w, clients, name), rs in runs.items():
    alone = runs.get(("single", clients, name))
    if w != "renewals" or not alone:
        continue
    bg = [r["background"] for r in rs]
    lines.append(
        f"| {name} | {bg[0]['sessions']} × {bg[0]['ttl_ms'] / 1000:g} s | {max(b['setup_s'] for b in bg):.1f} | {sum(b['lost'] for b in bg)} "
        f"| {med(rs, 'acquire_p99_ms') / med(alone, 'acquire_p99_ms'):.2f}× | {med(rs, 'ops_per_s') / med(alone, 'ops_per_s'):.2f}× |"
    )
if lines:
    print()
    print("Renewals: one client's cycles with the background renewing at TTL/3, against `single` alone, same system, same run:")
    print()
    print("| system | background | creation s (max) | lost | acquire p99 with ÷ without | cycles/s with ÷ without |")
    print("|---|---|---:|---:|---:|---:|")
    print("\n".join(sorted(lines)))
# The cost of mutual TLS: the same path with and without it, in the same run.
pairs = [("gateway", "holdfast (gateway)", "holdfast (gateway, plaintext)"), ("cell", "holdfast (cell)", "holdfast (cell, plaintext)")]
lines = []
for w, clients in sorted({(w, c) for w, c, _ in runs}):
    for path, on, off in pairs:
        if (w, clients, on) in runs and (w, clients, off) in runs:
            a, b = runs[(w, clients, on)], runs[(w, clients, off)]
            lines.append(
                f"| {w} | {path} | {med(a, 'ops_per_s') / med(b, 'ops_per_s'):.2f}× | {med(a, 'acquire_p99_ms') / med(b, 'acquire_p99_ms'):.2f}× |"
            )
if lines:
    print()
    print("Mutual TLS against plaintext, same path, same run (aim: within 15 % of the throughput):")
    print()
    print("| workload | path | ops/s TLS ÷ plaintext | acquire p99 TLS ÷ plaintext |")
    print("|---|---|---:|---:|")
    print("\n".join(lines))

# As deployed on both sides: holdfast over mutual TLS against etcd over mutual TLS
# (scripts/anchors.sh, start_etcd_tls), same workload, same run. The table above sets
# every row beside plaintext etcd.
lines = []
for w in WORKLOADS:
    for (rw, clients, name), rs in sorted(runs.items()):
        etcd_tls = runs.get((w, clients, "etcd (mutual TLS)"))
        if rw != w or not etcd_tls or name not in ("holdfast (gateway)", "holdfast (cell)"):
            continue
        lines.append(
            f"| {w} | {name} | {clients} | {med(rs, 'ops_per_s'):.0f} | {med(etcd_tls, 'ops_per_s'):.0f} "
            f"| {med(rs, 'ops_per_s') / med(etcd_tls, 'ops_per_s'):.2f}× | {med(rs, 'acquire_p99_ms') / med(etcd_tls, 'acquire_p99_ms'):.2f}× |"
        )
if lines:
    print()
    print("Both over mutual TLS: holdfast as deployed against etcd as deployed, same run:")
    print()
    print("| workload | system | clients | ops/s | etcd (mutual TLS) ops/s | ops/s vs etcd TLS | acquire p99 vs etcd TLS |")
    print("|---|---|---:|---:|---:|---:|---:|")
    print("\n".join(lines))

# The machine's floor (bench/src/floor.rs): a cycle's round trips and synced appends at
# their medians, with no other work. One write direct to the cell: the client's call
# (one round trip) around the leader's AppendEntries to a follower (one more) and the
# follower's synced append, the leader's own append running alongside; through the
# gateway, one round trip more. An efficiency call is one round trip (two through the
# gateway). A cycle is two of each.
rtt_of = {}
for (w, clients, name), rs in runs.items():
    if w == "floor_rpc":
        rtt_of[name] = med(rs, "acquire_p50_ms")
fsyncs = [r["acquire_p50_ms"] for (w, _, _), rs in runs.items() if w == "floor_fsync" for r in rs]
if rtt_of and fsyncs:
    fsync = statistics.median(fsyncs)
    print()
    print(f"The floor on this machine in this run: a synced 128-byte append {fsync:.3f} ms (median of {len(fsyncs)} runs' p50).")
    print()
    print("| workload | system | round trip ms | floor of a cycle ms | etcd's cycle ms | best ratio this machine allows | aimed | measured |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for (w, clients, name), rs in sorted(runs.items()):
        if w not in AIMED or not name.startswith("holdfast"):
            continue
        path = "gateway" if "gateway" in name else "cell"
        rtt = rtt_of.get(name.replace("(cell", "(gateway"))
        etcd = runs.get((w, clients, "etcd"))
        if rtt is None or not etcd:
            continue
        hops = (2 if path == "cell" else 3) if w == "single" else (1 if path == "cell" else 2)
        floor = 2 * (hops * rtt + (fsync if w == "single" else 0.0))
        etcd_cycle = 1000.0 / med(etcd, "ops_per_s")
        print(
            f"| {w} | {name} | {rtt:.3f} | {floor:.3f} | {etcd_cycle:.3f} | {etcd_cycle / floor:.2f}× "
            f"| {AIMED[w][path]:g}× | {med(rs, 'ops_per_s') / med(etcd, 'ops_per_s'):.2f}× |"
        )
