"""Take a lock and write through a fencing check (docs/fencing.md).

The resource (`FencedStore`, standing in for a database row or an object store)
remembers the highest token that has written and refuses any lower one. That is what
makes a lock safe for correctness: a holder that paused past its lease and wakes
believing it still holds the lock has a lower token than whoever holds it now, so its
late write is refused instead of landing after the newer holder's.
"""

import threading


class StaleToken(Exception):
    pass


class FencedStore:
    def __init__(self):
        self._lock = threading.Lock()
        self.highest = 0
        self.writes = []  # (token, value), in the order accepted

    def write(self, token, value):
        token = int(token)  # tokens travel as decimal strings: they exceed 2^53
        with self._lock:
            if token < self.highest:
                raise StaleToken(f"token {token} is older than {self.highest}")
            self.highest = token
            self.writes.append((token, value))


def demo(client, ns, shard="default"):
    """Two holders one after the other; the first writes late and is refused."""
    store = FencedStore()
    a = client.session(ns, ttl_ms=10_000, shard=shard, label="writer-a")
    b = client.session(ns, ttl_ms=10_000, shard=shard, label="writer-b")
    try:
        first = a.acquire("ledger", request_id="a-1", wait_ms=5_000)
        store.write(first["token"], "from a")
        a.release("ledger", first["token"])  # (or: a paused, and its lease ran out)
        second = b.acquire("ledger", request_id="b-1", wait_ms=5_000)
        assert int(second["token"]) > int(first["token"]), (first, second)
        store.write(second["token"], "from b")
        try:
            store.write(first["token"], "from a, late")
            raise AssertionError("a stale write was accepted")
        except StaleToken as refused:
            print(f"fenced: {refused}")
        b.release("ledger", second["token"])
        assert [v for _, v in store.writes] == ["from a", "from b"], store.writes
        return store
    finally:
        a.close()
        b.close()
