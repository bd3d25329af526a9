"""The HTTP publish/subscribe API (`tern serve --http 127.0.0.1:PORT`, src/http/openapi.json),
end to end against a real tern process, and its interoperation with Kafka clients:

    POST /create_topic     {publisher_id, topic_name, partitions?, replication_factor?}
    POST /publish_message  {topic_id, message_content, key?}
    GET  /message_status?message_id=
    POST /subscribe        {consumer_id, topic_id}     (the Kafka group http-<consumer_id>)
    POST /unsubscribe      {consumer_id, topic_id}
    GET  /message?consumer_id=&topic_id=[&wait_ms=][&max=]   (long poll, at-least-once)
    POST /ack              {consumer_id, topic_id, message_id}
    GET  /stream?consumer_id=&topic_id=                       (Server-Sent Events)
    GET  /openapi.json

message_id = (topic_id << 49) | (partition << 36) | offset. Errors are
{"status": "error", "error": ..., "field": ...} with 400 / 404 / 413 / 503, never another 5xx.

Only the standard library speaks HTTP here (urllib, http.client). kcat and confluent-kafka
check the Kafka side; schemathesis (the CLI in .venv/) fuzzes the served OpenAPI document.
Every wait is bounded.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from http_client import Http, Resp, message_id_of
from tern_harness import REPO, Broker, BrokerError, free_port, port_accepts, tern_bin, wait_until

KCAT = shutil.which("kcat")
OPENAPI_PATH = REPO / "src" / "http" / "openapi.json"
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
MiB = 1024 * 1024
BOUNDED_KCAT = ["-X", "message.timeout.ms=20000", "-X", "socket.timeout.ms=10000"]

needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install kcat)")


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------- HTTP client


def assert_error(r: Resp, code: int, field: str | None = None) -> dict:
    """An error response of the contract: `code`, JSON {"status": "error", "error": <text>[, "field"]}."""
    assert r.status == code, f"expected {code}: {r}"
    assert "json" in r.content_type, f"error response is not JSON: {r}"
    assert isinstance(r.body, dict), r
    assert r.body.get("status") == "error", r
    assert isinstance(r.body.get("error"), str) and r.body["error"], r
    if field is not None:
        assert r.body.get("field") == field, f"expected field {field!r}: {r}"
    return r.body


def assert_message(m: dict, topic_id: int) -> None:
    for k in ("message_id", "message_content", "key", "created_at", "partition", "offset"):
        assert k in m, (k, m)
    assert m["message_id"] == message_id_of(topic_id, m["partition"], m["offset"]), m


# ---------------------------------------------------------------------------- broker with --http


class HttpBroker:
    """A tern broker serving the HTTP API on its own free port (Kafka on .broker.port)."""

    def __init__(self, broker: Broker, http_port: int):
        self.broker = broker
        self.http_port = http_port
        self.http = Http(http_port)

    @property
    def address(self) -> str:
        return self.broker.address

    def wait_http(self, timeout: float = 30.0) -> None:
        wait_until(lambda: port_accepts(self.http_port), timeout, interval=0.05,
                   what=f"HTTP API on 127.0.0.1:{self.http_port}")

    def restart(self) -> None:
        self.broker.restart()
        self.wait_http()


@pytest.fixture
def hb(tmp_path, request):
    kafka_port = free_port()
    http_port = free_port()
    while http_port == kafka_port:
        http_port = free_port()
    b = Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=kafka_port,
               extra_args=["--http", f"127.0.0.1:{http_port}"])
    request.node._tern_broker = b  # conftest attaches the broker's log to a failure
    start_error = None
    try:
        b.start()
    except BrokerError as e:
        start_error = str(e)
    if start_error:
        pytest.fail(start_error, pytrace=False)
    h = HttpBroker(b, http_port)
    try:
        h.wait_http()
        yield h
    finally:
        stop_error = None
        try:
            b.stop()
        except BrokerError as e:
            stop_error = str(e)
        if stop_error:
            pytest.fail(stop_error, pytrace=False)


# ---------------------------------------------------------------------------- the document


def test_openapi_document_is_served():
    doc = json.loads(OPENAPI_PATH.read_text())
    assert doc["openapi"] == "3.0.3"
    assert set(doc["paths"]) == {"/create_topic", "/topics/{name}", "/publish_message", "/message_status", "/subscribe",
                                 "/unsubscribe", "/message", "/ack", "/nack", "/stream", "/openapi.json"}


def test_get_openapi_json_returns_the_document(hb):
    r = hb.http.get("/openapi.json")
    assert r.status == 200, r
    assert "json" in r.content_type, r
    assert r.body == json.loads(OPENAPI_PATH.read_text()), "GET /openapi.json differs from src/http/openapi.json"


# ---------------------------------------------------------------------------- the table, end to end


def test_end_to_end(hb, topic):
    h = hb.http
    t0 = now_ms()
    created = h.create_topic(topic, partitions=3)
    assert created["created"] is True and created["topic_name"] == topic and created["partitions"] == 3, created
    tid = created["topic_id"]
    assert isinstance(tid, int) and 1 <= tid < 16384, created

    again = h.create_topic(topic, partitions=3)
    assert again["created"] is False and again["topic_id"] == tid and again["partitions"] == 3, again

    other = h.create_topic(topic + "-other")
    assert other["created"] is True and other["partitions"] == 1, f"default partitions should be 1: {other}"
    assert other["topic_id"] > tid, f"topic ids are given in creation order: {tid} then {other['topic_id']}"

    # Published before any subscription: a new subscription starts at the partitions' end.
    before = h.publish(tid, "before-subscribe")
    time.sleep(0.02)

    sub = h.subscribe(1, tid)
    assert t0 - 5000 <= sub["subscribe_at"] <= now_ms() + 5000, sub
    time.sleep(0.02)
    sub_again = h.subscribe(1, tid)
    assert sub_again["subscribe_at"] == sub["subscribe_at"], f"re-subscribe must keep the original time: {sub} {sub_again}"
    assert h.next_message(1, tid, wait_ms=0) == {"status": "empty"}, "a new subscription delivered an older message"

    # Keyed messages: one partition per key, consecutive offsets.
    keyed = [h.publish(tid, f"keyed-{i}", key="user-42") for i in range(4)]
    assert len({m["partition"] for m in keyed}) == 1, keyed
    assert [m["offset"] for m in keyed] == list(range(keyed[0]["offset"], keyed[0]["offset"] + 4)), keyed
    for m in keyed:
        assert m["topic_id"] == tid and t0 - 5000 <= m["created_at"] <= now_ms() + 5000, m
    # Unkeyed: round-robin over the 3 partitions.
    unkeyed = [h.publish(tid, f"unkeyed-{i}") for i in range(6)]
    assert {m["partition"] for m in unkeyed} == {0, 1, 2}, f"6 unkeyed messages did not round-robin: {unkeyed}"

    st = h.status(keyed[0]["message_id"])
    assert (st["message_id"], st["topic_id"], st["partition"], st["offset"]) == (
        keyed[0]["message_id"], tid, keyed[0]["partition"], keyed[0]["offset"]), st
    assert st["message_status"] == "pending" and st["num_recipients"] == 0, st
    assert st["created_at"] == keyed[0]["created_at"], (st, keyed[0])

    # Read them all back one by one (asking again commits the previous one).
    published = {m["message_id"]: m for m in keyed + unkeyed}
    got = []
    for _ in range(len(published)):
        m = h.next_message(1, tid, wait_ms=5000)
        assert m["status"] == "ok", f"after {len(got)} of {len(published)} messages: {m}"
        assert_message(m, tid)
        got.append(m)
    assert h.next_message(1, tid, wait_ms=0) == {"status": "empty"}
    assert sorted(m["message_id"] for m in got) == sorted(published), "GET /message returned other messages"
    for m in got:
        p = published[m["message_id"]]
        want = f"keyed-{keyed.index(p)}" if p in keyed else f"unkeyed-{unkeyed.index(p)}"
        assert m["message_content"] == want and m["key"] == ("user-42" if p in keyed else None), m
        assert (m["partition"], m["offset"], m["created_at"]) == (p["partition"], p["offset"], p["created_at"]), (m, p)
    by_partition: dict[int, list[int]] = {}
    for m in got:
        by_partition.setdefault(m["partition"], []).append(m["offset"])
    for part, offs in by_partition.items():
        assert offs == sorted(offs), f"partition {part} delivered out of order: {offs}"
    keyed_contents = [m["message_content"] for m in got if m["key"] == "user-42"]
    assert keyed_contents == [f"keyed-{i}" for i in range(4)], keyed_contents

    # Everything read and committed: delivered to the one subscriber.
    for p in keyed + unkeyed:
        st = h.status(p["message_id"])
        assert st["message_status"] == "delivered" and st["num_recipients"] == 1, (p, st)
    # Published before the subscription existed: the subscription's position has passed it (1
    # recipient), but no subscription existed at publish time, so it is not "delivered".
    st = h.status(before["message_id"])
    assert st["num_recipients"] == 1 and st["message_status"] == "pending", st

    # Batches with max, and an explicit ack.
    batch_src = [h.publish(tid, f"batch-{i}", key="b") for i in range(5)]
    first = h.messages(1, tid, max_=3, wait_ms=2000)
    assert 1 <= len(first) <= 3, first
    for m in first:
        assert_message(m, tid)
    rest: list[dict] = []
    deadline = time.monotonic() + 10
    while len(first) + len(rest) < 5 and time.monotonic() < deadline:
        rest += h.messages(1, tid, max_=100, wait_ms=1000)
    assert [m["message_content"] for m in first + rest] == [f"batch-{i}" for i in range(5)], first + rest
    assert h.messages(1, tid, max_=10, wait_ms=0) == []
    h.ack(1, tid, batch_src[-1]["message_id"])
    assert h.status(batch_src[-1]["message_id"])["message_status"] == "delivered"

    # ack of another topic's message: 400.
    foreign = h.publish(other["topic_id"], "elsewhere")
    assert_error(h.post("/ack", {"consumer_id": 1, "topic_id": tid, "message_id": foreign["message_id"]}), 400,
                 "message_id")

    un = h.ok(h.post("/unsubscribe", {"consumer_id": 1, "topic_id": tid}))
    assert un["status"] == "ok" and t0 - 5000 <= un["unsubscribe_at"] <= now_ms() + 5000, un
    assert_error(h.post("/unsubscribe", {"consumer_id": 1, "topic_id": tid}), 404)
    assert_error(h.get("/message", consumer_id=1, topic_id=tid, wait_ms=0), 404)


# ---------------------------------------------------------------------------- bad input, 404, 413


BAD_CREATE = [
    ({"publisher_id": 1}, "topic_name"),
    ({"topic_name": "t"}, "publisher_id"),
    ({"publisher_id": "one", "topic_name": "t"}, "publisher_id"),
    ({"publisher_id": 1.5, "topic_name": "t"}, "publisher_id"),
    ({"publisher_id": 1, "topic_name": 123}, "topic_name"),
    ({"publisher_id": 1, "topic_name": None}, "topic_name"),
    ({"publisher_id": 1, "topic_name": ""}, "topic_name"),
    ({"publisher_id": 1, "topic_name": "has space"}, "topic_name"),
    ({"publisher_id": 1, "topic_name": "slash/name"}, "topic_name"),
    ({"publisher_id": 1, "topic_name": "."}, "topic_name"),
    ({"publisher_id": 1, "topic_name": ".."}, "topic_name"),
    ({"publisher_id": 1, "topic_name": "x" * 250}, "topic_name"),
    ({"publisher_id": 1, "topic_name": "t", "partitions": 0}, "partitions"),
    ({"publisher_id": 1, "topic_name": "t", "partitions": -1}, "partitions"),
    ({"publisher_id": 1, "topic_name": "t", "partitions": 8193}, "partitions"),
    ({"publisher_id": 1, "topic_name": "t", "partitions": "3"}, "partitions"),
    ({"publisher_id": 1, "topic_name": "t", "partitions": 1.5}, "partitions"),
    ({"publisher_id": 1, "topic_name": "t", "replication_factor": 0}, "replication_factor"),
    ({"publisher_id": 1, "topic_name": "t", "replication_factor": "1"}, "replication_factor"),
]


@pytest.mark.timeout(120)
def test_bad_input_is_400_naming_the_field(hb, topic):
    h = hb.http
    for body, field in BAD_CREATE:
        assert_error(h.post("/create_topic", body), 400, field)
    # None of them created a topic: a valid request for "t" creates it now.
    assert h.create_topic("t")["created"] is True

    tid = h.create_topic(topic)["topic_id"]
    h.subscribe(5, tid)
    bad_posts = [
        ("/publish_message", {"message_content": "x"}, "topic_id"),
        ("/publish_message", {"topic_id": str(tid), "message_content": "x"}, "topic_id"),
        ("/publish_message", {"topic_id": tid}, "message_content"),
        ("/publish_message", {"topic_id": tid, "message_content": 5}, "message_content"),
        ("/publish_message", {"topic_id": tid, "message_content": ["x"]}, "message_content"),
        ("/publish_message", {"topic_id": tid, "message_content": "x", "key": 7}, "key"),
        ("/subscribe", {"topic_id": tid}, "consumer_id"),
        ("/subscribe", {"consumer_id": 5}, "topic_id"),
        ("/subscribe", {"consumer_id": "5", "topic_id": tid}, "consumer_id"),
        ("/unsubscribe", {"consumer_id": 5}, "topic_id"),
        ("/unsubscribe", {"consumer_id": True, "topic_id": tid}, "consumer_id"),
        ("/ack", {"consumer_id": 5, "topic_id": tid}, "message_id"),
        ("/ack", {"consumer_id": 5, "topic_id": tid, "message_id": "1"}, "message_id"),
    ]
    for path, body, field in bad_posts:
        assert_error(h.post(path, body), 400, field)
    bad_gets = [
        ("/message_status", {}, "message_id"),
        ("/message_status", {"message_id": "abc"}, "message_id"),
        ("/message_status", {"message_id": "1.5"}, "message_id"),
        ("/message", {"topic_id": tid}, "consumer_id"),
        ("/message", {"consumer_id": 5}, "topic_id"),
        ("/message", {"consumer_id": "x", "topic_id": tid}, "consumer_id"),
        ("/message", {"consumer_id": 5, "topic_id": tid, "wait_ms": 30001}, "wait_ms"),
        ("/message", {"consumer_id": 5, "topic_id": tid, "wait_ms": -1}, "wait_ms"),
        ("/message", {"consumer_id": 5, "topic_id": tid, "wait_ms": "soon"}, "wait_ms"),
        ("/message", {"consumer_id": 5, "topic_id": tid, "max": 0}, "max"),
        ("/message", {"consumer_id": 5, "topic_id": tid, "max": 1001}, "max"),
        ("/stream", {"consumer_id": 5}, "topic_id"),
    ]
    for path, params, field in bad_gets:
        assert_error(h.get(path, **params), 400, field)

    # Malformed JSON, and JSON that is not an object.
    for raw in (b'{"publisher_id": 1, "topic_name": ', b"not json", b"", b"[1, 2]", b'"topic"', b"null"):
        for path in ("/create_topic", "/publish_message", "/subscribe", "/unsubscribe", "/ack"):
            assert_error(h.request("POST", path, raw=raw), 400)


def test_unknown_topic_message_subscription_is_404(hb, topic):
    h = hb.http
    created = h.create_topic(topic, partitions=2)
    tid = created["topic_id"]
    unknown = tid + 1000
    assert_error(h.post("/publish_message", {"topic_id": unknown, "message_content": "x"}), 404)
    assert_error(h.post("/subscribe", {"consumer_id": 1, "topic_id": unknown}), 404)
    assert_error(h.get("/message_status", message_id=message_id_of(unknown, 0, 0)), 404)
    # A known topic, but an offset at or past the partition's end, or a partition it lacks.
    m = h.publish(tid, "only", key="k")
    assert h.status(m["message_id"])["message_status"] == "pending"
    assert_error(h.get("/message_status", message_id=message_id_of(tid, m["partition"], m["offset"] + 1)), 404)
    assert_error(h.get("/message_status", message_id=message_id_of(tid, 1 - m["partition"], 0)), 404)
    assert_error(h.get("/message_status", message_id=message_id_of(tid, 5, 0)), 404)
    # Not subscribed.
    assert_error(h.get("/message", consumer_id=9, topic_id=tid, wait_ms=0), 404)
    assert_error(h.get("/message", consumer_id=9, topic_id=tid, wait_ms=0, max=10), 404)
    assert_error(h.post("/ack", {"consumer_id": 9, "topic_id": tid, "message_id": m["message_id"]}), 404)
    assert_error(h.post("/unsubscribe", {"consumer_id": 9, "topic_id": tid}), 404)
    assert_error(h.get("/stream", consumer_id=9, topic_id=tid), 404)
    assert_error(h.get("/message", consumer_id=9, topic_id=unknown, wait_ms=0), 404)
    # Unknown endpoints and wrong methods answer JSON errors too.
    assert_error(h.get("/no_such_endpoint"), 404)
    assert_error(h.request("PUT", "/ack", {"consumer_id": 9}), 405)
    assert_error(h.request("DELETE", "/publish_message"), 405)


def test_body_over_1mib_is_413(hb, topic):
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    h.subscribe(1, tid)

    def publish_body(content_len: int) -> bytes:
        head, tail = b'{"topic_id": %d, "message_content": "' % tid, b'"}'
        return head + b"a" * (content_len - len(head) - len(tail)) + tail

    big = publish_body(2 * MiB)
    assert len(big) == 2 * MiB
    assert_error(h.raw_post("/publish_message", big), 413)
    just_over = publish_body(MiB + 1)
    assert_error(h.raw_post("/publish_message", just_over), 413)
    assert_error(h.raw_post("/create_topic", b'{"publisher_id": 1, "topic_name": "' + b"b" * (2 * MiB) + b'"}'), 413)
    # Nothing was stored; a 900 KiB body is fine and reads back whole.
    assert h.next_message(1, tid, wait_ms=0) == {"status": "empty"}
    content = "z" * (900 * 1024)
    m = h.publish(tid, content)
    got = h.next_message(1, tid, wait_ms=5000)
    assert got["status"] == "ok" and got["message_id"] == m["message_id"], {k: v for k, v in got.items() if k != "message_content"}
    assert got["message_content"] == content


# ---------------------------------------------------------------------------- Kafka interoperation


def kcat(args: list[str], stdin: bytes | None = None, timeout: float = 40) -> subprocess.CompletedProcess:
    return subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)


@needs_kcat
def test_published_over_http_is_read_by_kcat(hb, topic):
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    sent = [("héllo wörld ✓ {\"json\": true}", "k1"), ("no key here", None), ("", "empty-value"), ("line3", "k1")]
    pubs = [h.publish(tid, content, key) for content, key in sent]
    assert [p["offset"] for p in pubs] == [0, 1, 2, 3], pubs
    p = kcat(["-b", hb.address, "-C", "-t", topic, "-o", "beginning", "-e", "-J", "-X", "socket.timeout.ms=10000"])
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0 and "ERROR" not in err, err[-3000:]
    recs = [json.loads(line) for line in p.stdout.decode().splitlines() if line.strip()]
    assert len(recs) == len(sent), recs
    for (content, key), pub, rec in zip(sent, pubs, recs):
        assert rec["partition"] == 0 and rec["offset"] == pub["offset"], (rec, pub)
        assert rec["key"] == key, (rec, key)
        # kcat prints an empty value as null
        assert (rec["payload"] or "") == content, (rec, content)
        assert abs(rec["ts"] - pub["created_at"]) <= 1000, (rec, pub)


@needs_kcat
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produced_by_kcat_is_read_over_http(hb, topic, codec):
    """Kafka producers' batches reach HTTP consumers whatever their codec: the HTTP
    reader decompresses what the log stores as sent."""
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    h.subscribe(3, tid)
    lines = [f"from-kcat-{i} ünïcode " + "x" * (i * 40) for i in range(5)]
    p = kcat(["-b", hb.address, "-P", "-t", topic, "-k", "kk", "-z", codec, *BOUNDED_KCAT],
             stdin=("\n".join(lines) + "\n").encode())
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0 and "ERROR" not in err and "Delivery failed" not in err, err[-3000:]
    got = []
    for i in range(len(lines)):
        m = h.next_message(3, tid, wait_ms=5000)
        assert m["status"] == "ok", f"message {i}: {m}"
        assert_message(m, tid)
        got.append(m)
    assert [m["message_content"] for m in got] == lines
    assert [m["key"] for m in got] == ["kk"] * len(lines)
    assert [(m["partition"], m["offset"]) for m in got] == [(0, i) for i in range(len(lines))]
    assert h.next_message(3, tid, wait_ms=0) == {"status": "empty"}


def test_message_status_counts_recipients(hb, topic):
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    for c in (11, 12, 13):
        h.subscribe(c, tid)
    time.sleep(0.02)
    m = h.publish(tid, "to three")
    st = h.status(m["message_id"])
    assert st["message_status"] == "pending" and st["num_recipients"] == 0, st

    # 11 reads and acks explicitly; 12 reads and then asks again (which commits what it read).
    assert h.next_message(11, tid)["message_id"] == m["message_id"]
    h.ack(11, tid, m["message_id"])
    assert h.next_message(12, tid)["message_id"] == m["message_id"]
    assert h.next_message(12, tid, wait_ms=0) == {"status": "empty"}
    st = wait_until(lambda: (lambda s: s if s["num_recipients"] == 2 else None)(h.status(m["message_id"])), 3,
                    what="num_recipients 2")
    assert st["message_status"] == "pending", st

    # 13 has read it but not committed yet: still 2.
    assert h.next_message(13, tid)["message_id"] == m["message_id"]
    st = h.status(m["message_id"])
    assert st["num_recipients"] == 2 and st["message_status"] == "pending", st
    h.ack(13, tid, m["message_id"])
    st = wait_until(lambda: (lambda s: s if s["num_recipients"] == 3 else None)(h.status(m["message_id"])), 3,
                    what="num_recipients 3")
    assert st["message_status"] == "delivered", st


def test_message_status_expired_after_delete_records(hb, topic):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    pubs = [h.publish(tid, f"m{i}") for i in range(3)]
    admin = AdminClient({"bootstrap.servers": hb.address, "socket.timeout.ms": 10000})
    (fut,) = admin.delete_records([TopicPartition(topic, 0, 2)], request_timeout=10).values()
    assert fut.result(timeout=15).low_watermark == 2
    for p in pubs[:2]:
        st = h.status(p["message_id"])
        assert st["message_status"] == "expired", st
    assert h.status(pubs[2]["message_id"])["message_status"] == "pending"
    assert_error(h.get("/message_status", message_id=message_id_of(tid, 0, 3)), 404)


# ---------------------------------------------------------------------------- long poll, stream


# README: a long poll wakes "at once" for the receiving broker's own partitions. The
# bound leaves room for a loaded 2-core machine; a wake that waited for a timer or a
# retry interval (hundreds of ms) exceeds it.
LOCAL_WAKE_BOUND_S = 0.25


def test_long_poll_wakes_on_publish(hb, topic):
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    h.subscribe(21, tid)

    t = time.monotonic()
    assert h.next_message(21, tid, wait_ms=1000) == {"status": "empty"}
    waited = time.monotonic() - t
    assert 0.95 <= waited < 2, f"an empty GET with wait_ms=1000 took {waited:.2f}s"

    # The wake is measured from the publish's answer, so that the bound is the README's
    # promise ("at once" for the receiving broker's own partitions) plus scheduling, not
    # the time the test chose to publish at. A GET may even return before the publish's
    # answer does (negative lag): the message is appended before the answer is sent.
    published: list[dict] = []
    answered: list[float] = []
    errors: list[BaseException] = []

    def publish_later(content: str):
        def run():
            try:
                time.sleep(0.5)
                published.append(Http(hb.http_port).publish(tid, content))
                answered.append(time.monotonic())
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        th = threading.Thread(target=run, daemon=True)
        th.start()
        return th

    th = publish_later("wake up")
    m = h.next_message(21, tid, wait_ms=10000)
    returned = time.monotonic()
    th.join(timeout=20)
    assert not errors, errors
    assert m["status"] == "ok" and m["message_content"] == "wake up", m
    assert published and m["message_id"] == published[0]["message_id"], (m, published)
    lag = returned - answered[0]
    print(f"LONG POLL: answered {lag * 1000:.0f} ms after the publish's answer")
    assert lag < LOCAL_WAKE_BOUND_S, f"GET /message?wait_ms=10000 woke {lag:.3f}s after the publish was answered"

    # With max too.
    published.clear()
    answered.clear()
    th = publish_later("batch wake")
    ms = h.messages(21, tid, max_=10, wait_ms=10000)
    returned = time.monotonic()
    th.join(timeout=20)
    assert not errors, errors
    assert [x["message_content"] for x in ms] == ["batch wake"], ms
    lag = returned - answered[0]
    assert lag < LOCAL_WAKE_BOUND_S, f"GET /message?max=10&wait_ms=10000 woke {lag:.3f}s after the publish"


class SseReader(threading.Thread):
    """Connects to GET /stream and reads `event: message` events until `want` arrived, the
    server ends the stream, or the socket times out (`timeout` s without a byte)."""

    def __init__(self, port: int, consumer_id: int, topic_id: int, want: int, timeout: float = 15.0,
                 last_event_id: int | None = None):
        super().__init__(daemon=True)
        self.want = want
        self.last_event_id = last_event_id
        self.ids: list[str | None] = []
        self.path = f"/stream?consumer_id={consumer_id}&topic_id={topic_id}"
        self.events: list[dict] = []
        self.other: list[str] = []
        self.error: BaseException | None = None
        self.status: int | None = None
        self.content_type = ""
        self.error_body = b""
        self.connected = threading.Event()
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def run(self) -> None:
        event, data, event_id = None, [], None
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = str(self.last_event_id)
        try:
            self.conn.request("GET", self.path, headers=headers)
            resp = self.conn.getresponse()
            self.status, self.content_type = resp.status, resp.getheader("Content-Type", "") or ""
            self.connected.set()
            if resp.status != 200:
                self.error_body = resp.read(4000)
                return
            while len(self.events) < self.want:
                raw = resp.readline()
                if not raw:
                    return
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if data:
                        if event in (None, "message"):
                            self.events.append(json.loads("\n".join(data)))
                            self.ids.append(event_id)
                        else:
                            self.other.append(event)
                    event, data, event_id = None, [], None
                elif line.startswith(":"):
                    continue
                elif line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("id:"):
                    event_id = line[3:].strip()
                elif line.startswith("data:"):
                    data.append(line[6:] if line.startswith("data: ") else line[5:])
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            self.connected.set()

    def close(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass


def test_stream_delivers_50_in_order(hb, topic):
    h = hb.http
    tid = h.create_topic(topic, partitions=2)["topic_id"]
    h.subscribe(31, tid)
    n = 50
    reader = SseReader(hb.http_port, 31, tid, want=n)
    reader.start()
    try:
        reader.connected.wait(5)  # headers in (a stream may also send them with its first event)
        pubs = [h.publish(tid, f"sse-{i:03d}") for i in range(n)]
        reader.join(timeout=30)
        assert reader.status == 200, (reader.status, reader.error_body, reader.error)
        assert reader.content_type.startswith("text/event-stream"), reader.content_type
        assert reader.error is None, repr(reader.error)
        got = reader.events
        assert len(got) == n, f"{len(got)} of {n} events arrived: {[e.get('message_content') for e in got]}"
        for e in got:
            assert_message(e, tid)
        assert sorted(e["message_id"] for e in got) == sorted(p["message_id"] for p in pubs)
        for part in (0, 1):
            mine = [e for e in got if e["partition"] == part]
            assert [e["offset"] for e in mine] == sorted(e["offset"] for e in mine), f"partition {part} out of order"
            contents = [e["message_content"] for e in mine]
            assert contents == sorted(contents), f"partition {part} out of order: {contents}"
        by_id = {p["message_id"]: p for p in pubs}
        for e in got:
            p = by_id[e["message_id"]]
            assert (e["partition"], e["offset"], e["created_at"], e["key"]) == (
                p["partition"], p["offset"], p["created_at"], None), (e, p)
        # Each event is committed once written: with the stream still open, the subscription's
        # position gets past all 50.
        last = {}
        for p in pubs:
            last[p["partition"]] = p
        for p in last.values():
            wait_until(lambda p=p: h.status(p["message_id"])["message_status"] == "delivered", 5,
                       what=f"message {p['message_id']} (the last on partition {p['partition']}) delivered "
                            f"while the stream is open")
    finally:
        reader.close()
    assert h.next_message(31, tid, wait_ms=0) == {"status": "empty"}


def test_stream_events_carry_ids_and_a_reconnect_resumes_after_last_event_id(hb, topic):
    """Each event's `id:` is its message id; a client reconnecting with `Last-Event-ID`
    (as EventSource does) continues after that message, whatever was committed before."""
    h = hb.http
    tid = h.create_topic(topic, partitions=1)["topic_id"]
    h.subscribe(36, tid)
    sent = [h.publish(tid, f"m{i}")["message_id"] for i in range(10)]
    first = SseReader(hb.http_port, 36, tid, want=3)
    first.start()
    first.join(20)
    first.close()
    assert [e["message_content"] for e in first.events] == ["m0", "m1", "m2"], first.events
    assert first.ids == [str(e["message_id"]) for e in first.events] == [str(m) for m in sent[:3]], first.ids
    # The client says it has seen up to m6 (say, on a stream served by another broker).
    resumed = SseReader(hb.http_port, 36, tid, want=3, last_event_id=sent[6])
    resumed.start()
    resumed.join(20)
    resumed.close()
    assert [e["message_content"] for e in resumed.events] == ["m7", "m8", "m9"], resumed.events
    bad = h.request("GET", f"/stream?consumer_id=36&topic_id={tid}", headers={"Last-Event-ID": "yesterday"})
    assert_error(bad, 400, "Last-Event-ID")


def test_stream_commits_what_it_wrote_before_the_client_left(hb, topic):
    """A client that closes the stream right after reading its last event: that event was
    written to the connection, so it is committed (not redelivered by GET /message)."""
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    h.subscribe(32, tid)
    lost = []
    for cycle in range(8):
        reader = SseReader(hb.http_port, 32, tid, want=3)
        reader.start()
        try:
            reader.connected.wait(5)
            pubs = [h.publish(tid, f"c{cycle}-{i}") for i in range(3)]
            reader.join(timeout=20)
            assert reader.status == 200 and reader.error is None, (reader.status, reader.error_body, reader.error)
            assert [e["message_content"] for e in reader.events] == [f"c{cycle}-{i}" for i in range(3)], reader.events
        finally:
            reader.close()  # right after the last event arrived
        try:
            wait_until(lambda: h.status(pubs[-1]["message_id"])["message_status"] == "delivered", 3,
                       what="the last event's message delivered after the client left")
        except AssertionError:
            m = h.next_message(32, tid, wait_ms=0)
            lost.append(f"cycle {cycle}: 'c{cycle}-2' (offset {pubs[-1]['offset']}) not "
                        f"delivered 3 s after the client left; GET /message then returned {m.get('message_content')!r}")
            if m["status"] == "ok":
                h.ack(32, tid, m["message_id"])
    assert not lost, ("the last event written before the client closed the stream was not committed in "
                      f"{len(lost)} of 8 cycles:\n" + "\n".join(lost))


@pytest.mark.timeout(60)
def test_stream_ends_with_an_error_event_when_its_topic_is_deleted(hb, topic):
    """A failure that cannot pass (the topic deleted under an open stream: 404) is sent as
    an `error` event before the stream ends, never a silent end."""
    from confluent_kafka.admin import AdminClient

    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    h.subscribe(33, tid)
    reader = SseReader(hb.http_port, 33, tid, want=1000, timeout=40)
    reader.start()
    try:
        reader.connected.wait(5)
        h.publish(tid, "before")
        wait_until(lambda: len(reader.events) == 1, 10, what="the first event")
        started = time.monotonic()
        admin = AdminClient({"bootstrap.servers": hb.broker.address})
        admin.delete_topics([topic])[topic].result(15)
        reader.join(timeout=10)
        print(f"\nthe stream ended {time.monotonic() - started:.2f} s after the delete; other events {reader.other}")
        # Well before its next look for appends (HTTP_STREAM_WAIT, 15 s): the deletion
        # itself ends the stream's wait.
        assert not reader.is_alive(), "the stream is still open 10 s after its topic was deleted"
        assert reader.error is None, repr(reader.error)
        assert reader.other == ["error"], f"the stream ended with events {reader.other} after the message events"
    finally:
        reader.close()


# ---------------------------------------------------------------------------- durability, groups


@pytest.mark.timeout(150)
def test_restart_keeps_subscription_position(hb, topic):
    h = hb.http
    created = h.create_topic(topic)
    tid = created["topic_id"]
    sub = h.subscribe(41, tid)
    pubs = [h.publish(tid, f"msg-{i + 1}") for i in range(5)]
    for i in range(3):
        m = h.next_message(41, tid)
        assert m["message_content"] == f"msg-{i + 1}", m
        h.ack(41, tid, m["message_id"])

    hb.restart()
    again = h.create_topic(topic)
    assert again["created"] is False and again["topic_id"] == tid, f"topic id changed across a restart: {created} {again}"
    assert h.subscribe(41, tid)["subscribe_at"] == sub["subscribe_at"], "the subscription was forgotten"
    m = h.next_message(41, tid)
    assert m["status"] == "ok" and m["message_content"] == "msg-4" and m["message_id"] == pubs[3]["message_id"], m

    # Returned but neither acked nor followed by another GET: a restart redelivers it.
    hb.restart()
    m = h.next_message(41, tid)
    assert m["status"] == "ok" and m["message_content"] == "msg-4", f"at-least-once: msg-4 must be redelivered: {m}"
    m = h.next_message(41, tid)
    assert m["message_content"] == "msg-5", m
    assert h.next_message(41, tid, wait_ms=0) == {"status": "empty"}


@pytest.mark.timeout(120)
def test_publish_is_durable_across_kill9(hb, topic):
    """A 200 from POST /publish_message means the record is fsynced: kill -9 loses none."""
    h = hb.http
    tid = h.create_topic(topic, partitions=2)["topic_id"]
    h.subscribe(61, tid)
    pubs = [h.publish(tid, f"durable-{i:02d}", key=None if i % 3 else f"k{i}") for i in range(20)]
    hb.broker.kill9()
    hb.broker.start()
    hb.wait_http()
    for p in pubs:
        st = h.status(p["message_id"])
        assert st["offset"] == p["offset"] and st["created_at"] == p["created_at"], (p, st)
    got = h.messages(61, tid, max_=100, wait_ms=2000)
    deadline = time.monotonic() + 10
    while len(got) < len(pubs) and time.monotonic() < deadline:
        got += h.messages(61, tid, max_=100, wait_ms=1000)
    assert sorted(m["message_content"] for m in got) == [f"durable-{i:02d}" for i in range(20)], got


def test_message_ids_above_2_pow_53(hb, topic):
    """Topics with id >= 16 have message ids above 2^53: they must round-trip exactly."""
    h = hb.http
    tid = 0
    for i in range(20):
        tid = h.create_topic(f"{topic}-{i}")["topic_id"]
        if tid >= 17:
            break
    assert tid >= 17, tid
    h.subscribe(71, tid)
    p = h.publish(tid, "big id", key="k")
    assert p["message_id"] > 2 ** 53 and p["message_id"] == message_id_of(tid, 0, 0), p
    r = h.post("/publish_message", {"topic_id": tid, "message_content": "2"})
    assert b'"message_id":%d' % message_id_of(tid, 0, 1) in r.raw.replace(b" ", b""), \
        f"message_id must be written as an exact JSON integer: {r}"
    st = h.status(p["message_id"])
    assert st["message_id"] == p["message_id"] and st["topic_id"] == tid, st
    # A neighbour id that differs only in the low bits (lost by a float64 round trip) names another message.
    assert h.status(p["message_id"] + 1)["offset"] == 1
    m = h.next_message(71, tid)
    assert m["message_id"] == p["message_id"], m
    h.ack(71, tid, p["message_id"])
    assert h.status(p["message_id"])["num_recipients"] == 1


def test_subscription_group_visible_to_kafka_tools(hb, topic):
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    h = hb.http
    tid = h.create_topic(topic, partitions=2)["topic_id"]
    pubs = [h.publish(tid, f"pre-{i}", key=f"key-{i}") for i in range(6)]
    ends = {0: 0, 1: 0}
    for p in pubs:
        ends[p["partition"]] = max(ends[p["partition"]], p["offset"] + 1)
    h.subscribe(77, tid)
    group = "http-77"
    admin = AdminClient({"bootstrap.servers": hb.address, "socket.timeout.ms": 10000})

    def listed() -> set[str]:
        res = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
        assert not res.errors, [str(e) for e in res.errors]
        return {g.group_id for g in res.valid}

    def tern_listed() -> set[str]:
        p = subprocess.run([str(tern_bin()), "group", "list", "--json", "-b", hb.address],
                           capture_output=True, timeout=30)
        assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
        return {g["group"] for g in json.loads(p.stdout)}

    def committed() -> dict[int, int]:
        try:
            res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                                    request_timeout=10)[group].result(timeout=15)
        except KafkaException as e:
            if e.args[0].code() == KafkaError.GROUP_ID_NOT_FOUND:
                return {}
            raise
        return {tp.partition: tp.offset for tp in res.topic_partitions if tp.topic == topic and tp.offset >= 0}

    assert group in listed(), sorted(listed())
    assert group in tern_listed(), sorted(tern_listed())
    assert committed() == ends, f"offsets at subscribe time should be the partitions' ends {ends}: {committed()}"

    # Reading and acking over HTTP moves the group's committed offset (OffsetFetch sees it).
    new = h.publish(tid, "after", key="key-0")
    m = h.next_message(77, tid)
    assert m["message_id"] == new["message_id"], m
    h.ack(77, tid, m["message_id"])
    want = dict(ends)
    want[new["partition"]] = new["offset"] + 1
    wait_until(lambda: committed() == want, 5, what=f"committed offsets {want}")

    h.ok(h.post("/unsubscribe", {"consumer_id": 77, "topic_id": tid}))
    wait_until(lambda: group not in listed(), 5, what=f"{group} deleted after its last unsubscribe")
    assert group not in tern_listed()


def test_unsubscribe_then_message_is_404(hb, topic):
    h = hb.http
    tid = h.create_topic(topic)["topic_id"]
    tid2 = h.create_topic(topic + "-2")["topic_id"]
    h.subscribe(51, tid)
    h.subscribe(51, tid2)
    m = h.publish(tid, "x")
    assert h.next_message(51, tid)["message_id"] == m["message_id"]
    un = h.ok(h.post("/unsubscribe", {"consumer_id": 51, "topic_id": tid}))
    assert un["status"] == "ok" and isinstance(un["unsubscribe_at"], int), un
    assert_error(h.get("/message", consumer_id=51, topic_id=tid, wait_ms=0), 404)
    assert_error(h.post("/ack", {"consumer_id": 51, "topic_id": tid, "message_id": m["message_id"]}), 404)
    assert_error(h.get("/stream", consumer_id=51, topic_id=tid), 404)
    assert_error(h.post("/unsubscribe", {"consumer_id": 51, "topic_id": tid}), 404)
    # The other topic of the same consumer (same group) is untouched.
    m2 = h.publish(tid2, "y")
    assert h.next_message(51, tid2)["message_id"] == m2["message_id"]
    # Subscribing again starts afresh at the end.
    h.subscribe(51, tid)
    assert h.next_message(51, tid, wait_ms=0) == {"status": "empty"}


# ---------------------------------------------------------------------------- schemathesis


def schemathesis_config(consumer_id: int, topic_id: int) -> str:
    """Bounds for the fuzzing of the served document (see test_schemathesis_conforms)."""
    return f"""\
[[operations]]
include-name = "POST /create_topic"
# A generated partition count up to 10000 would create huge topics: keep them at 1.
parameters = {{ "body.partitions" = 1 }}

[[operations]]
include-name = "GET /message"
# Reach a real subscription (random ids are just 404), and never long-poll (up to 30 s a request).
parameters = {{ "query.wait_ms" = 0, "query.consumer_id" = {consumer_id}, "query.topic_id" = {topic_id} }}

[[operations]]
include-name = "POST /ack"
parameters = {{ "body.consumer_id" = {consumer_id}, "body.topic_id" = {topic_id} }}
"""


@pytest.mark.timeout(240)
@pytest.mark.skipif(not SCHEMATHESIS.exists(), reason="schemathesis not installed in the venv")
def test_schemathesis_conforms(hb, tmp_path):
    """schemathesis fuzzes every operation but /stream (an endless response): no 5xx, every
    status documented, every body matching its schema."""
    h = hb.http
    # Something to find: topics (small ids are likely draws) with subscribers and messages.
    tids = []
    for name in ("st-a", "st-b"):
        tid = h.create_topic(name, partitions=2)["topic_id"]
        tids.append(tid)
        for c in (0, 1):
            h.subscribe(c, tid)
        for i in range(40):
            h.publish(tid, f"seed-{i}", key=None if i % 2 else "k")
    cfg = tmp_path / "schemathesis.toml"
    cfg.write_text(schemathesis_config(0, tids[0]))
    cmd = [str(SCHEMATHESIS), "--config-file", str(cfg), "run", f"{h.base}/openapi.json",
           "--checks", "not_a_server_error,status_code_conformance,response_schema_conformance,content_type_conformance",
           "--phases", "examples,coverage,fuzzing,stateful",
           "--max-examples", "100", "--seed", "1", "--generation-database", "none",
           "--exclude-path", "/stream", "--request-timeout", "15", "--suppress-health-check", "all",
           # One worker: hypothesis describing strategies from two threads trips CPython 3.11's
           # ast.parse ("AST constructor recursion depth mismatch").
           "--workers", "1", "--no-color"]
    t = time.monotonic()
    env = dict(os.environ, NO_COLOR="1", SCHEMATHESIS_TELEMETRY="false")
    p = subprocess.run(cmd, capture_output=True, timeout=200, cwd=tmp_path, env=env)
    out = p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")
    print(f"SCHEMATHESIS: rc={p.returncode} in {time.monotonic() - t:.1f}s\n{out[-4000:]}")
    assert p.returncode == 0, f"schemathesis failed (rc={p.returncode}):\n{out[-12000:]}"


# ---------------------------------------------------------------------------- queue mode


def test_queue_mode_acquires_acks_nacks_and_reports_delivery_state(hb, topic):
    """`"mode": "queue"`: the consumer id's share group. Each message is acquired by one
    call at a time (two callers with the same consumer id get distinct messages), accepted
    by /ack, released by /nack (delivered again, count 2) or rejected (archived), and
    message_status reports each one's delivery state and count."""
    h = hb.http
    tid = h.create_topic(topic, partitions=2)["topic_id"]
    published_before = h.publish(tid, "before")
    sub = h.ok(h.post("/subscribe", {"consumer_id": 7, "topic_id": tid, "mode": "queue"}))
    assert sub["mode"] == "queue" and sub["group"] == "http-queue-7", sub
    again = h.ok(h.post("/subscribe", {"consumer_id": 7, "topic_id": tid, "mode": "queue"}))
    assert "subscribe_at" not in again, f"subscribing again keeps the queue: {again}"
    sent = [h.publish(tid, f"q-{i}") for i in range(6)]

    def take(max_: int) -> list[dict]:
        doc = h.ok(h.get("/message", consumer_id=7, topic_id=tid, mode="queue", max=max_, wait_ms=2000))
        assert doc["status"] == "ok", doc
        return doc["messages"]

    first, second = take(3), take(3)
    ids = [m["message_id"] for m in first + second]
    assert len(ids) == len(set(ids)) == 6, f"each message acquired once: {ids}"
    assert {m["message_id"] for m in first + second} == {m["message_id"] for m in sent}
    assert published_before["message_id"] not in ids, "the queue starts at the subscription"
    assert all(m["delivery_count"] == 1 for m in first + second)
    assert take(3) == [], "everything is locked to the consumer"

    accepted, released, rejected = first[0], first[1], first[2]
    body = {"consumer_id": 7, "topic_id": tid}
    h.ok(h.post("/ack", {**body, "message_id": accepted["message_id"], "mode": "queue"}))
    h.ok(h.post("/nack", {**body, "message_id": released["message_id"]}))
    h.ok(h.post("/nack", {**body, "message_id": rejected["message_id"], "reject": True}))
    again = take(3)
    assert [(m["message_id"], m["delivery_count"]) for m in again] == [(released["message_id"], 2)], again

    def state(m):
        st = h.ok(h.get("/message_status", message_id=m["message_id"], mode="queue", consumer_id=7))
        return st["delivery_state"], st["delivery_count"]

    assert state(again[0]) == ("acquired", 2)
    assert state(rejected) in (("archived", 1), ("finished", None)), state(rejected)
    assert state(accepted) in (("acknowledged", 1), ("finished", None)), state(accepted)
    assert state(second[0]) == ("acquired", 1)
    # Acknowledging what this consumer was never given is refused.
    unseen = h.publish(tid, "not taken yet")
    r = h.post("/ack", {**body, "message_id": unseen["message_id"], "mode": "queue"})
    assert r.status == 400, r
    for m in second + again:
        h.ok(h.post("/ack", {**body, "message_id": m["message_id"], "mode": "queue"}))
    assert all(state(m)[0] in ("acknowledged", "finished") for m in sent if m["message_id"] != rejected["message_id"])
    bad = h.post("/subscribe", {"consumer_id": 7, "topic_id": tid, "mode": "fifo"})
    assert_error(bad, 400, "mode")
    h.ok(h.post("/unsubscribe", {**body, "mode": "queue"}))
    gone = h.get("/message", consumer_id=7, topic_id=tid, mode="queue", wait_ms=0)
    assert gone.status == 404, gone
