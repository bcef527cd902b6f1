#!/usr/bin/env python3
"""Runs every example against a gateway and checks what each promises; CI runs it
against `holdfast dev` (cli/tests/http_clients.rs).

    python3 examples/python/run_examples.py --playground <holdfast dev's data dir>
    python3 examples/python/run_examples.py --gateway https://gw:7480 --ca ca.crt \\
        --token hft.me.secret --cell east-1 --move-to west-1

The caller needs `operator` (it creates a namespace and places and moves its shards).
"""

import argparse
import json
import os
import sys
import threading
import time

from elect import Candidate, leader
from fenced_write import FencedStore, StaleToken, demo as fenced_demo
from follow_ownership import Ownership
from holdfast_http import Client, HoldfastError

NS = "pyexamples"


def connect(args):
    if args.playground:
        with open(os.path.join(args.playground, "endpoints.json")) as f:
            ep = json.load(f)
        regions = list(ep["regions"].values())
        tls = ep.get("tls")
        scheme = "https" if tls else "http"
        certs = tls["certs_dir"] if tls else None
        client = Client(
            f"{scheme}://{regions[0]['gateway']['http']}",
            ca=certs and os.path.join(certs, "ca.crt"),
            cert=certs and os.path.join(certs, "client.root.crt"),
            key=certs and os.path.join(certs, "client.root.key"),
        )
        return client, regions[0]["cells"][0]["cell"], regions[1]["cells"][0]["cell"]
    return Client(args.gateway, ca=args.ca, cert=args.cert, key=args.key, token=args.token), args.cell, args.move_to


def done_if_exists(f):
    try:
        return f()
    except HoldfastError as e:
        if e.code != "ALREADY_EXISTS":
            raise


def step(name):
    print(f"== {name}", flush=True)


def lock_events(client):
    step("a lock's events over Server-Sent Events")
    seen = []
    stop = threading.Event()
    started = threading.Event()

    def follow():
        path = f"/v1/locks/{NS}/default/watched/events"
        started.set()
        for kind, _, e in client.events(path, stop=stop):
            if kind == "lock":
                seen.append((e["event"], e["token"], e["reason"]))

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    started.wait()
    time.sleep(0.5)  # the stream is from now on: let it open before the grant
    s = client.session(NS, ttl_ms=10_000, label="events")
    try:
        g = s.acquire("watched", request_id="events-1", wait_ms=5_000)
        s.release("watched", g["token"])
        deadline = time.monotonic() + 10
        while ("ended", g["token"], "released") not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ("acquired", g["token"], None) in seen and ("ended", g["token"], "released") in seen, seen
        print(f"events: {seen}")
    finally:
        stop.set()
        s.close()


def ownership(client, move_to):
    step("ownership: list page by page, then follow the stream from the list's revision")
    own = Ownership(client, NS, page_size=1)
    try:
        assert {"default", "moves"} <= set(own.owners), own.owners
        before = own.owner("moves")
        if before["cell"] == move_to:
            print("`moves` already lives on", move_to, "(a rerun): nothing to move")
            return
        client.call_retrying("POST", f"/v1/shards/{NS}/moves/move", {"to_cell": move_to, "planned": True})
        arrived = own.wait_for(lambda o: o.owner("moves")["cell"] == move_to and o.owner("moves")["state"] == "active", timeout=60)
        after = own.owner("moves")
        assert arrived, f"the stream did not show the move: {after}"
        assert after["epoch"] > before["epoch"], (before, after)
        print(f"moved: {before['cell']} epoch {before['epoch']} -> {after['cell']} epoch {after['epoch']}")
    finally:
        own.close()


def election(client):
    step("leader election: one leader at a time by token; resign; a crashed leader replaced")
    config = client.call_retrying("GET", f"/v1/namespaces/{NS}")
    ttl_ms = max(3_000, config["ttl_min_ms"])
    store = FencedStore()  # every leader writes under its token
    candidates = [Candidate(client, NS, "leader", name, ttl_ms=ttl_ms) for name in ("a", "b", "c")]
    order = []

    def run(c):
        c.campaign()
        order.append((c.name, c.token))
        store.write(c.token, f"{c.name} leads")

    threads = [threading.Thread(target=run, args=(c,), daemon=True) for c in candidates]
    for t in threads:
        t.start()

    def wait_leaders(n, within):
        deadline = time.monotonic() + within
        while len(order) < n:
            leading = [c.name for c in candidates if c.elected.is_set()]
            assert len(leading) <= 1, f"two leaders at once: {leading}"
            assert time.monotonic() < deadline, f"{len(order)} leaders after {within} s, wanted {n}"
            time.sleep(0.01)

    try:
        wait_leaders(1, 30)
        first = next(c for c in candidates if c.name == order[0][0])
        assert leader(client, NS, "leader") == order[0], (leader(client, NS, "leader"), order)
        first.resign()
        wait_leaders(2, 30)
        second = next(c for c in candidates if c.name == order[1][0])
        crashed_at = time.monotonic()
        second.crash()
        second.elected.clear()
        bound = (ttl_ms + config["lock_delay_ms"]) / 1000.0 + 5
        wait_leaders(3, bound)
        took = time.monotonic() - crashed_at
        tokens = [t for _, t in order]
        assert tokens == sorted(tokens) and len(set(tokens)) == 3, order
        try:
            store.write(order[1][1], "the crashed leader, late")
            raise AssertionError("a deposed leader's write was accepted")
        except StaleToken:
            pass
        print(f"leaders in order {order}; the crashed one replaced in {took:.1f} s (bound {bound:.1f} s)")
    finally:
        for c in candidates:
            c.session.close()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--playground", help="holdfast dev's data dir (its endpoints.json and certificates)")
    p.add_argument("--gateway")
    p.add_argument("--ca")
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--token")
    p.add_argument("--cell", help="the cell to place the example's shards on")
    p.add_argument("--move-to", help="another cell, to move a shard to")
    args = p.parse_args()
    if not args.playground and not (args.gateway and args.cell and args.move_to):
        p.error("pass --playground, or --gateway with --cell and --move-to")
    client, cell, move_to = connect(args)

    step(f"a namespace made over HTTP, its shards placed on {cell} over HTTP")
    done_if_exists(lambda: client.call_retrying("POST", "/v1/namespaces", {"name": NS, "owner": "examples", "intent": "correctness"}))
    for shard in ("default", "moves"):
        done_if_exists(lambda: client.call_retrying("POST", f"/v1/shards/{NS}/{shard}/place", {"cell": cell}))

    step("take a lock, write through a fencing check")
    fenced_demo(client, NS)
    lock_events(client)
    ownership(client, move_to)
    election(client)
    print("all examples passed")


if __name__ == "__main__":
    sys.exit(main())
