"""A tiny JSON client for tern's HTTP API (standard library only), shared by the HTTP
and cluster suites. Every request is bounded by a timeout."""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass


def message_id_of(topic_id: int, partition: int, offset: int) -> int:
    return (topic_id << 49) | (partition << 36) | offset


@dataclass
class Resp:
    method: str
    path: str
    sent: object
    status: int
    body: object  # parsed JSON, or None when the body is not JSON
    raw: bytes
    content_type: str

    def __repr__(self) -> str:
        sent = self.sent if not isinstance(self.sent, (bytes, str)) or len(self.sent) < 300 else f"<{len(self.sent)} bytes>"
        return (f"{self.method} {self.path} {sent!r} -> {self.status} {self.content_type!r} "
                f"{self.raw[:600].decode('utf-8', 'replace')!r}")


class Http:
    """A tiny JSON client for the API (urllib: a new connection per request)."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None, auth: tuple[str, str] | None = None):
        """`tls`: HTTPS with this context (its CA, and a client certificate if loaded);
        `auth`: HTTP Basic (user, password) on every request."""
        self.port = port
        self.tls = tls
        self.auth = auth
        self.base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        self.last_headers: dict[str, str] = {}

    def request(self, method: str, path: str, body: object = None, raw: bytes | None = None,
                timeout: float = 20.0, headers: dict[str, str] | None = None) -> Resp:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.auth is not None:
            token = base64.b64encode(f"{self.auth[0]}:{self.auth[1]}".encode()).decode()
            req.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.tls) as r:
                status, content, ctype = r.status, r.read(), r.headers.get("Content-Type", "")
                self.last_headers = dict(r.headers)
        except urllib.error.HTTPError as e:
            status, content, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
            self.last_headers = dict(e.headers)
        try:
            doc = json.loads(content)
        except ValueError:
            doc = None
        return Resp(method, path, raw if raw is not None else body, status, doc, content, ctype or "")

    def post(self, path: str, body: object, **kw) -> Resp:
        return self.request("POST", path, body=body, **kw)

    def get(self, path: str, timeout: float = 20.0, **params) -> Resp:
        qs = urllib.parse.urlencode(params)
        return self.request("GET", f"{path}?{qs}" if qs else path, timeout=timeout)

    def raw_post(self, path: str, data: bytes, timeout: float = 30.0) -> Resp:
        """POSTs `data` with http.client, tolerating a server that answers (and closes)
        before it has read the whole body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            try:
                conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
            except (BrokenPipeError, ConnectionResetError):
                pass
            r = conn.getresponse()
            content = r.read()
            try:
                doc = json.loads(content)
            except ValueError:
                doc = None
            return Resp("POST", path, data, r.status, doc, content, r.getheader("Content-Type", "") or "")
        finally:
            conn.close()

    # ---- the API, asserting 200 ----------------------------------------------------
    def ok(self, r: Resp) -> dict:
        assert r.status == 200, r
        assert isinstance(r.body, dict), r
        assert "json" in r.content_type, r
        return r.body

    def create_topic(self, name: str, partitions: int | None = None, publisher_id: int = 1) -> dict:
        body = {"publisher_id": publisher_id, "topic_name": name}
        if partitions is not None:
            body["partitions"] = partitions
        doc = self.ok(self.post("/create_topic", body))
        assert doc["status"] == "ok", doc
        return doc

    def publish(self, topic_id: int, content: str, key: str | None = None) -> dict:
        body = {"topic_id": topic_id, "message_content": content}
        if key is not None:
            body["key"] = key
        doc = self.ok(self.post("/publish_message", body))
        assert doc["status"] == "ok", doc
        assert doc["message_id"] == message_id_of(doc["topic_id"], doc["partition"], doc["offset"]), doc
        return doc

    def subscribe(self, consumer_id: int, topic_id: int) -> dict:
        doc = self.ok(self.post("/subscribe", {"consumer_id": consumer_id, "topic_id": topic_id}))
        assert doc["status"] == "ok" and doc["group"] == f"http-{consumer_id}", doc
        return doc

    def next_message(self, consumer_id: int, topic_id: int, wait_ms: int = 5000) -> dict:
        """GET /message; returns the body ({"status": "ok", ...} or {"status": "empty"})."""
        doc = self.ok(self.get("/message", consumer_id=consumer_id, topic_id=topic_id, wait_ms=wait_ms,
                               timeout=wait_ms / 1000 + 20))
        assert doc["status"] in ("ok", "empty"), doc
        return doc

    def messages(self, consumer_id: int, topic_id: int, max_: int, wait_ms: int = 0) -> list[dict]:
        doc = self.ok(self.get("/message", consumer_id=consumer_id, topic_id=topic_id, wait_ms=wait_ms,
                               max=max_, timeout=wait_ms / 1000 + 20))
        assert doc["status"] == "ok" and isinstance(doc.get("messages"), list), doc
        return doc["messages"]

    def ack(self, consumer_id: int, topic_id: int, message_id: int) -> None:
        doc = self.ok(self.post("/ack", {"consumer_id": consumer_id, "topic_id": topic_id, "message_id": message_id}))
        assert doc == {"status": "ok"} or doc.get("status") == "ok", doc

    def status(self, message_id: int) -> dict:
        doc = self.ok(self.get("/message_status", message_id=message_id))
        assert doc["status"] == "ok", doc
        return doc


class KeepAlive:
    """One keep-alive HTTP/1.1 connection: calls follow each other with no connection set-up
    in between, as a busy client's do (urllib opens a connection per request)."""

    def __init__(self, port: int, timeout: float = 30.0):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def call(self, method: str, path: str, body: object = None) -> tuple[int, object]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"} if data is not None else {}
        self.conn.request(method, path, body=data, headers=headers)
        r = self.conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw)
        except ValueError:
            return r.status, raw

    def ok(self, method: str, path: str, body: object = None) -> dict:
        status, doc = self.call(method, path, body)
        assert status == 200 and isinstance(doc, dict), (method, path, body, status, doc)
        return doc

    def close(self) -> None:
        self.conn.close()
