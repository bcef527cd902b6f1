"""Leader election on a lock (the shape of etcd's concurrency.Election).

A candidate campaigns by acquiring the election's lock, waiting in its queue; the
grant makes it leader and its token is its term: a resource that fences on it (see
fenced_write.py) refuses a deposed leader. Resign by releasing. A leader whose process
dies stops renewing its session; when the lease runs out the next candidate in the
queue is granted.
"""

import threading


class Candidate:
    def __init__(self, client, ns, election, name, ttl_ms=3_000, shard="default"):
        self.client, self.election, self.name = client, election, name
        self.session = client.session(ns, ttl_ms=ttl_ms, shard=shard, label=f"candidate-{name}")
        self.token = None
        self.elected = threading.Event()
        self._attempt = 0

    def campaign(self, wait_ms=60_000):
        """Blocks until this candidate leads (or the wait runs out: LOCK_HELD/TIMEOUT
        raise). The lock's value names the leader for observers."""
        while True:
            self._attempt += 1
            grant = self.session.acquire(self.election, request_id=f"{self.name}-{self._attempt}", wait_ms=wait_ms, value=self.name)
            if not grant.get("unfenced"):
                self.token = int(grant["token"])
                self.elected.set()
                return self.token

    def resign(self):
        self.session.release(self.election, self.token)
        self.elected.clear()

    def crash(self):
        """Stops renewing, as a killed process would: the lease runs out."""
        self.session.stop_renewing()


def leader(client, ns, election, shard="default"):
    """Who leads now, from the lock's holder: (name, token) or None."""
    lock = client.call_retrying("GET", f"/v1/locks/{ns}/{shard}/{election}")
    if not lock["holders"]:
        return None
    h = lock["holders"][0]
    return h["value"], int(h["token"])
