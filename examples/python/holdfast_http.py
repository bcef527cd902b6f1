"""A small holdfast client over the gateway's HTTP API, standard library only.

What it shows (docs/http-clients.md): authenticating (a client certificate or a bearer
token over HTTPS), the error shape and when to retry, sessions kept alive at a third of
their TTL, and Server-Sent Events resumed with Last-Event-ID.
"""

import json
import random
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request


class HoldfastError(Exception):
    """An error answer: {code, message, retryable, retry_after_ms} (docs/api.md)."""

    def __init__(self, status, body):
        self.status = status
        self.code = body.get("code", "UNAVAILABLE")
        self.message = body.get("message", "")
        self.retryable = bool(body.get("retryable", False))
        self.retry_after_ms = body.get("retry_after_ms")
        super().__init__(f"{self.code} (HTTP {status}): {self.message}")


class Client:
    """One gateway. `ca` verifies the gateway; `cert`/`key` present a client
    certificate, or `token` (hft.<name>.<secret>) a bearer token."""

    def __init__(self, base_url, ca=None, cert=None, key=None, token=None, timeout=10.0):
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = {"content-type": "application/json"}
        if token:
            self.headers["authorization"] = f"Bearer {token}"
        self.ctx = None
        if self.base.startswith("https://"):
            self.ctx = ssl.create_default_context(cafile=ca)
            if cert:
                self.ctx.load_cert_chain(cert, key)

    def _open(self, method, path, body=None, headers=None, timeout=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method, headers={**self.headers, **(headers or {})})
        try:
            return urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self.ctx)
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"code": "UNAVAILABLE", "message": raw.decode(errors="replace"), "retryable": True}
            raise HoldfastError(e.code, body) from None

    def call(self, method, path, body=None, timeout=None):
        """One call; an error answer raises HoldfastError."""
        with self._open(method, path, body, timeout=timeout) as r:
            return json.loads(r.read())

    def call_retrying(self, method, path, body=None, within=30.0, timeout=None):
        """Retries what the answer calls retryable, after the delay it names (with
        jitter), until `within` seconds have passed."""
        deadline = time.monotonic() + within
        while True:
            try:
                return self.call(method, path, body, timeout=timeout)
            except HoldfastError as e:
                if not e.retryable or time.monotonic() > deadline:
                    raise
                delay = (e.retry_after_ms if e.retry_after_ms is not None else 200) / 1000.0
                time.sleep(delay + random.uniform(0, 0.1))
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def pages(self, path, key, **query):
        """Every item of a paged listing (`GET /v1/namespaces`, `/v1/shards`,
        `/v1/sessions`), following next_page_token; yields (page, item)."""
        token = None
        while True:
            q = {k: v for k, v in query.items() if v is not None}
            if token:
                q["page_token"] = token
            page = self.call_retrying("GET", f"{path}?{urllib.parse.urlencode(q)}")
            for item in page[key]:
                yield page, item
            token = page.get("next_page_token")
            if not token:
                return

    def events(self, path, last_event_id=None, stop=None):
        """Server-Sent Events of `path` as (event, id, data) tuples, reconnecting with
        Last-Event-ID after a dropped connection or a retryable `error` event. Ends
        when `stop` (a threading.Event) is set."""
        while stop is None or not stop.is_set():
            headers = {"accept": "text/event-stream"}
            if last_event_id is not None:
                headers["last-event-id"] = str(last_event_id)
            try:
                with self._open("GET", path, headers=headers, timeout=30) as stream:
                    kind, ident, data = "message", None, []
                    for raw in stream:
                        if stop is not None and stop.is_set():
                            return
                        line = raw.decode().rstrip("\r\n")
                        if line.startswith(":"):
                            continue  # a keep-alive comment
                        if line:
                            field, _, value = line.partition(":")
                            value = value[1:] if value.startswith(" ") else value
                            if field == "event":
                                kind = value
                            elif field == "id":
                                ident = value
                            elif field == "data":
                                data.append(value)
                            continue
                        if data:
                            payload = json.loads("\n".join(data))
                            if kind == "error":
                                err = HoldfastError(0, payload)
                                if not err.retryable:
                                    raise err
                                break  # reconnect from the last id
                            if ident is not None:
                                last_event_id = ident
                            yield kind, ident, payload
                        kind, ident, data = "message", None, []
            except HoldfastError as e:
                if not e.retryable:
                    raise
                time.sleep((e.retry_after_ms or 200) / 1000.0)
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                time.sleep(0.2)

    def session(self, ns, ttl_ms, shard="default", label=""):
        return Session(self, ns, shard, ttl_ms, label)


class Session:
    """A session kept alive at a third of its TTL by a thread. `lost` is set when a
    renewal finds the session gone (expired or closed): every hold on it is gone."""

    def __init__(self, client, ns, shard, ttl_ms, label):
        self.client, self.ns, self.shard, self.ttl_ms = client, ns, shard, ttl_ms
        body = {"ns": ns, "shard": shard, "ttl_ms": ttl_ms, "label": label}
        self.id = client.call_retrying("POST", "/v1/sessions", body)["session"]
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, daemon=True)
        self._thread.start()

    def _renew(self):
        while not self._stop.wait(self.ttl_ms / 3000.0):
            try:
                self.client.call("POST", f"/v1/sessions/{self.id}/keepalive")
            except HoldfastError as e:
                if e.code in ("SESSION_EXPIRED", "UNKNOWN_SESSION"):
                    self.lost.set()
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass  # the next renewal tries again, within the TTL

    def stop_renewing(self):
        """What a crashed process does: its lease runs out."""
        self._stop.set()
        self._thread.join()

    def close(self):
        self.stop_renewing()
        try:
            self.client.call("DELETE", f"/v1/sessions/{self.id}")
        except HoldfastError:
            pass

    def acquire(self, name, request_id, wait_ms=0, value="", mode="exclusive"):
        """A grant: {token (a decimal string), ttl_remaining_ms, epoch, unfenced}. A
        retry reuses request_id, so the cell never grants twice."""
        body = {"session": self.id, "request_id": request_id, "mode": mode, "wait_timeout_ms": wait_ms, "value": value}
        path = f"/v1/locks/{self.ns}/{self.shard}/{urllib.parse.quote(name, safe='')}/acquire"
        # The call waits up to wait_ms in the lock's queue: the socket must wait longer.
        return self.client.call_retrying("POST", path, body, within=wait_ms / 1000.0 + 30, timeout=wait_ms / 1000.0 + 10)

    def release(self, name, token):
        path = f"/v1/locks/{self.ns}/{self.shard}/{urllib.parse.quote(name, safe='')}/release"
        # Names this session: the cell applies the release only while it holds the token.
        self.client.call_retrying("POST", path, {"token": str(token), "session": self.id})
