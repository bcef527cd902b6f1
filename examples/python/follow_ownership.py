"""Follow shard ownership: list the namespace's shards (page by page), then follow
ownership changes over Server-Sent Events from the list's revision, so no change is
missed between the two. This is the SDK's OwnershipCache (docs/sdk.md), in Python.
"""

import threading


class Ownership:
    """`owner(shard)` from memory, kept current by a background stream."""

    def __init__(self, client, ns, page_size=100):
        self.client, self.ns = client, ns
        self.owners = {}
        self.changed = threading.Condition()
        revision = None
        for page, o in client.pages("/v1/shards", "shards", ns=ns, page_size=page_size):
            revision = page["revision"] if revision is None else revision
            self.owners[o["shard"]] = o
        if revision is None:  # no shard yet: an empty page still has a revision
            revision = client.call_retrying("GET", f"/v1/shards?ns={ns}")["revision"]
        self.revision = revision
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, daemon=True)
        self._thread.start()

    def _follow(self):
        path = f"/v1/shards/events?ns={self.ns}"
        for kind, ident, e in self.client.events(path, last_event_id=self.revision, stop=self._stop):
            if kind != "ownership":
                continue
            with self.changed:
                self.owners[e["shard"]] = e
                self.revision = int(ident)
                self.changed.notify_all()

    def owner(self, shard):
        return self.owners.get(shard)

    def wait_for(self, cond, timeout):
        """Waits until cond(self) holds (re-checked on each change)."""
        with self.changed:
            return self.changed.wait_for(lambda: cond(self), timeout)

    def close(self):
        self._stop.set()
