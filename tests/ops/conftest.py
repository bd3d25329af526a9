"""Fixtures for the ops suite (run: .venv/bin/python -m pytest tests/ops -q).

One tern broker (compat/tern_harness.py) in cluster mode — a one-broker cluster on a
real etcd, so the cluster metrics (etcd session, controller elections) exist — with an
explicit metrics port, one real Prometheus scraping it every second, and one round of
known traffic, shared by the whole session:

- ORDERS (3 partitions): N_FIRST messages of PAYLOAD bytes with kcat, read back by a plain
  consumer and by consumer group GROUP (kcat -G, which commits on close), then N_LATER more
  messages, so the group's lag is exactly N_LATER.
- SEGMENTS (internal.segment.bytes=1024): N_SEGMENTS one-message batches, so it rolls segments.
- COMPACTED (cleanup.policy=compact, compression.type=gzip, internal.segment.bytes=1024):
  N_SEGMENTS uncompressed keyed one-message batches, recompressed to gzip on the way in;
  the cleaner (backing off 200 ms here) runs at least one pass over it.
- MINISR (min.insync.replicas=2, more than the one replica there is): one acks=all produce,
  refused with NOT_ENOUGH_REPLICAS (19), and the partition counts as under min ISR.
- TXN: one committed and one aborted transaction (transactional id "ops-txn"), for the
  transaction metrics.
- SHARE: five records through share group SHARE_GROUP (confluent-kafka's ShareConsumer):
  accepted, rejected and released; the released one released again at the delivery limit
  (2, archived); three more acquired by a second consumer whose 1 s locks run out, then
  accepted by the first (the share-group metrics and lag).
- QUOTA: client id QUOTA_CLIENT gets a producer_byte_rate of 1 KiB/s (`tern quota set`);
  one kcat produce of 20 KiB with that client id goes over it and is throttled (the
  client quota metrics).
- A fetch far past the end of ORDERS partition 0: OFFSET_OUT_OF_RANGE (1).
- RAW_CONNECTIONS plain TCP connections held open until the connection gauge shows them.
- HTTP API: topic HTTP_TOPIC created over HTTP, one subscriber, HTTP_MESSAGES published and
  read back, and one bad request (400).
- ARCHIVED (archive.enable=true, internal.segment.bytes=1024, retention.ms=1 h): N_EXPIRED records
  stamped two hours ago, sealed by two fresh incompressible sentinels: the exporter writes
  them to the Parquet archive (<data dir>/archive), then retention deletes them.
- ARCHIVE_BLOCKED (the same, with archive.on.failure=delete): a regular file stands where
  its archive folder would be, so every export fails (tern_archive_failures_total) and
  retention deletes the expired segments unarchived (tern_archive_skipped_segments_total).
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from opslib import (REPO, Prometheus, free_port, http_get, parse_exposition, run, serve_env_vars,  # noqa: F401
                    tern_bin, tern_harness)

ORDERS = "ops-orders"
SEGMENTS = "ops-segments"
MINISR = "ops-minisr"
COMPACTED = "ops-compacted"
GROUP = "ops-group"
ORDERS_PARTITIONS = 3
OFFSETS_PARTITIONS = 5
N_FIRST = 600
N_LATER = 37
N_SEGMENTS = 40
PAYLOAD = 100
RAW_CONNECTIONS = 3
HTTP_TOPIC = "ops-http"
HTTP_MESSAGES = 5
ARCHIVED = "ops-archived"
ARCHIVE_BLOCKED = "ops-archive-blocked"
TXN = "ops-txn"
SHARE = "ops-share"
QUOTA = "ops-quota"
QUOTA_CLIENT = "ops-quota-client"
SHARE_GROUP = "ops-share-group"
N_EXPIRED = 20

BROKER_ARGS = (*tern_harness.GROUP_ARGS, "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
               "--transaction-state-log-num-partitions", str(OFFSETS_PARTITIONS),
               "--log-cleaner-backoff-ms", "200",
               "--archive-interval-ms", "200", "--log-retention-check-interval-ms", "200",
               # Share groups: records' locks run out and the delivery limit is reached
               # within the traffic's few seconds.
               "--group-share-auto-offset-reset", "earliest", "--group-share-record-lock-duration-ms", "1000",
               "--group-share-delivery-count-limit", "2")
# Requests whose non-waiting time exceeds 1 ms count as slow (tern_slow_requests_total),
# so that series exists under the test's traffic. Only where the broker has the option.
SLOW_REQUEST_ARGS = ("--slow-request-ms", "1")


def broker_args() -> list[str]:
    args = list(BROKER_ARGS)
    if "TERN_SLOW_REQUEST_MS" in serve_env_vars():
        args += SLOW_REQUEST_ARGS
    return args


def payloads(n: int, start: int = 0) -> bytes:
    """n lines "k<i%10>:<PAYLOAD bytes>" for kcat -K: (key, value of exactly PAYLOAD bytes)."""
    return b"".join(f"k{i % 10}:".encode() + f"m{i:06d}".ljust(PAYLOAD, "x").encode() + b"\n"
                    for i in range(start, start + n))


@pytest.fixture(scope="session")
def etcd(tmp_path_factory):
    work = tmp_path_factory.mktemp("etcd")
    e = tern_harness.Etcd(work / "data", work / "logs")
    e.start()
    yield e
    e.stop()


@pytest.fixture(scope="session")
def broker(tmp_path_factory, etcd):
    work = tmp_path_factory.mktemp("broker")
    metrics_port, http_port = free_port(), free_port()
    b = tern_harness.Broker(data_dir=work / "data", log_dir=work / "logs",
                            extra_args=[*broker_args(), "--metrics", f"127.0.0.1:{metrics_port}",
                                        "--http", f"127.0.0.1:{http_port}", "--etcd", etcd.endpoint])
    b.http_url = f"http://127.0.0.1:{http_port}"
    b.metrics_port = metrics_port
    b.metrics_url = f"http://127.0.0.1:{metrics_port}"
    try:
        b.start()
    except tern_harness.BrokerError as e:
        pytest.fail(str(e), pytrace=False)
    deadline = time.monotonic() + 30
    while True:
        try:
            if http_get(b.metrics_url + "/ready", timeout=1)[0] == 200:
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            b.kill9()
            pytest.fail("/ready did not answer 200 within 30 s\n" + b.log_tail(), pytrace=False)
        time.sleep(0.1)
    yield b
    # Broker.stop fails on a panic in any of its logs, a broker that exited by itself, or
    # a SIGTERM that did not end it with status 0.
    stop_error = None
    try:
        b.stop()
    except tern_harness.BrokerError as e:
        stop_error = str(e)
    if stop_error:
        pytest.fail(stop_error, pytrace=False)


@pytest.fixture(scope="session")
def prometheus(broker, tmp_path_factory):
    p = Prometheus(tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{broker.metrics_port}"])
    try:
        p.start()
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        p.wait_value('up{job="tern"}', lambda v: v == 1, timeout=20, what="Prometheus scraping the broker")
        yield p
    finally:
        p.stop()


def kcat(args: list[str], timeout: float = 30, input: bytes | None = None):
    return run(["kcat", *args], timeout=timeout, input=input)


def broker_metrics(broker) -> list[tuple[str, dict, float]]:
    status, text = http_get(broker.metrics_url + "/metrics")
    assert status == 200, text
    return parse_exposition(text)


def metric_sum(samples, name: str, **labels) -> float:
    return sum(v for n, l, v in samples if n == name and all(l.get(k) == str(x) for k, x in labels.items()))


def share_traffic(bootstrap: str) -> dict:
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(SHARE, 1, 1)])[SHARE].result(20)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(SHARE, value=f"share-{i}".encode())
    assert producer.flush(20) == 0

    def consumer():
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": SHARE_GROUP,
                           "share.acknowledgement.mode": "explicit", "log_level": 3})
        c.subscribe([SHARE])
        return c

    def take(c, until, decide):
        seen, deadline = [], time.monotonic() + 20
        while time.monotonic() < deadline and not until(seen):
            for m in c.poll(0.5):
                if not m.error():
                    c.acknowledge(m, decide(m))
                    seen.append((m.offset(), m.delivery_count()))
        c.commit_sync(20)
        return seen

    first = consumer()
    kinds = {1: AcknowledgeType.REJECT, 2: AcknowledgeType.RELEASE}
    taken = take(first, lambda seen: len(seen) >= 5, lambda m: kinds.get(m.offset(), AcknowledgeType.ACCEPT))
    assert sorted(o for o, _ in taken) == list(range(5)), taken
    again = take(first, lambda seen: any(o == 2 for o, _ in seen), lambda m: AcknowledgeType.RELEASE)
    assert (2, 2) in again, again
    for i in range(5, 8):
        producer.produce(SHARE, value=f"share-{i}".encode())
    assert producer.flush(20) == 0
    holder = consumer()
    held, deadline = [], time.monotonic() + 20
    while not held and time.monotonic() < deadline:
        held = [m.offset() for m in holder.poll(0.5) if not m.error()]
    assert held, "the second consumer acquired nothing"
    time.sleep(1.5)  # its locks run out
    later = take(first, lambda seen: set(held) <= {o for o, _ in seen}, lambda m: AcknowledgeType.ACCEPT)
    first.close()
    holder.close()
    return {"taken": taken, "again": again, "held": held, "later": later}


@pytest.fixture(scope="session")
def traffic(broker, prometheus):
    """Runs the traffic described in the module docstring once; returns what it measured."""
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker.address
    admin = AdminClient({"bootstrap.servers": b})
    futures = admin.create_topics([
        NewTopic(ORDERS, ORDERS_PARTITIONS, 1),
        NewTopic(SEGMENTS, 1, 1, config={"internal.segment.bytes": "1024"}),
        NewTopic(MINISR, 1, 1, config={"min.insync.replicas": "2"}),
        NewTopic(TXN, 1, 1),
        NewTopic(COMPACTED, 1, 1, config={"cleanup.policy": "compact", "internal.segment.bytes": "1024",
                                          "min.cleanable.dirty.ratio": "0.01", "compression.type": "gzip"}),
    ], operation_timeout=10, request_timeout=15)
    for name, f in futures.items():
        f.result(timeout=20)

    facts = {}
    # ORDERS: produce N_FIRST (acks=all), then read everything twice.
    r = kcat(["-b", b, "-P", "-t", ORDERS, "-K", ":", "-X", "acks=all"], input=payloads(N_FIRST))
    assert r.returncode == 0, r.stderr.decode()
    facts["bytes_in_first"] = tern_harness.wait_until(
        lambda: metric_sum(broker_metrics(broker), "tern_topic_bytes_in_total", topic=ORDERS) or None,
        timeout=10, what="bytes in after the first produce")
    r = kcat(["-b", b, "-C", "-t", ORDERS, "-e", "-q", "-f", "%s\n"])
    assert r.returncode == 0, r.stderr.decode()
    assert len(r.stdout.splitlines()) == N_FIRST, "plain consumer read back a different count"
    r = kcat(["-b", b, "-G", GROUP, ORDERS, "-e", "-q", "-c", str(N_FIRST), "-f", "%s\n",
              "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000"], timeout=60)
    assert r.returncode == 0, r.stderr.decode()
    assert len(r.stdout.splitlines()) == N_FIRST, "group consumer read back a different count"
    # The group has committed N_FIRST; N_LATER more are its lag.
    r = kcat(["-b", b, "-P", "-t", ORDERS, "-K", ":", "-X", "acks=all"], input=payloads(N_LATER, N_FIRST))
    assert r.returncode == 0, r.stderr.decode()

    # SEGMENTS: one message per batch so the 1 KiB segments roll.
    r = kcat(["-b", b, "-P", "-t", SEGMENTS, "-K", ":", "-X", "batch.num.messages=1", "-X", "linger.ms=0",
              "-X", "max.in.flight=1"], input=payloads(N_SEGMENTS))
    assert r.returncode == 0, r.stderr.decode()

    # COMPACTED: keyed, uncompressed batches of one message each: recompressed to the
    # topic's gzip on the way in, and the 1 KiB segments roll, so the cleaner has passes.
    r = kcat(["-b", b, "-P", "-t", COMPACTED, "-K", ":", "-X", "batch.num.messages=1", "-X", "linger.ms=0",
              "-X", "max.in.flight=1", "-X", "compression.codec=none"], input=payloads(N_SEGMENTS))
    assert r.returncode == 0, r.stderr.decode()
    facts["cleaner_passes"] = tern_harness.wait_until(
        lambda: metric_sum(broker_metrics(broker), "tern_log_cleaner_passes_total") or None,
        timeout=20, what="a log cleaner pass over the compacted topic")

    # MINISR: acks=all is refused (NOT_ENOUGH_REPLICAS); no retries, so one error.
    r = kcat(["-b", b, "-P", "-t", MINISR, "-X", "acks=all", "-X", "retries=0", "-X", "message.timeout.ms=5000"],
             input=b"refused\n")
    facts["minisr_kcat_rc"] = r.returncode

    # TXN: one committed and one aborted transaction (the transaction metrics).
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b, "transactional.id": "ops-txn", "message.timeout.ms": 20000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(TXN, value=b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(TXN, value=b"aborted")
    p.flush(10)
    p.abort_transaction(30)
    facts["txn_markers"] = tern_harness.wait_until(
        lambda: metric_sum(broker_metrics(broker), "tern_txn_aborts_total") or None,
        timeout=10, what="the aborted transaction's markers")

    # SHARE: a share group (KIP-932) accepts, rejects and releases records; a released
    # record comes back and, released again at the delivery limit (2), is archived; a
    # second consumer's lock runs out (1 s) and its records go to the first.
    facts["share"] = share_traffic(b)

    # QUOTA: 20 KiB in one request over a 1 KiB/s producer quota (10 KiB allowed at once).
    r = run([str(tern_bin()), "quota", "set", "-b", b, "--client-id", QUOTA_CLIENT,
             "--producer-byte-rate", "1024"], timeout=30)
    assert r.returncode == 0, r.stderr
    r = kcat(["-b", b, "-P", "-t", QUOTA, "-X", f"client.id={QUOTA_CLIENT}", "-X", "linger.ms=100"],
             input=b"".join(b"q" * 1000 + b"\n" for _ in range(20)))
    assert r.returncode == 0, r.stderr.decode()
    facts["quota_throttled"] = tern_harness.wait_until(
        lambda: metric_sum(broker_metrics(broker), "tern_quota_throttled_total") or None,
        timeout=10, what="a throttled produce over the ops client quota")

    # A fetch past the end: OFFSET_OUT_OF_RANGE, then the consumer resets and reaches the end.
    kcat(["-b", b, "-C", "-t", ORDERS, "-p", "0", "-o", "1000000", "-e", "-q", "-X", "auto.offset.reset=earliest"],
         timeout=20)

    # Raw connections: the gauge must count them while open and drop them after.
    socks = [socket.create_connection(("127.0.0.1", broker.port), timeout=5) for _ in range(RAW_CONNECTIONS)]
    try:
        facts["connections_peak"] = prometheus.wait_value(
            "tern_connections", lambda v: v is not None and v >= RAW_CONNECTIONS, timeout=15,
            what=f"tern_connections while {RAW_CONNECTIONS} connections are open")
    finally:
        for s in socks:
            s.close()
    facts["kcat_runs"] = 7

    # HTTP API: create, subscribe, publish, read back, one 400.
    def post(path: str, body: dict) -> tuple[int, dict]:
        req = urllib.request.Request(broker.http_url + path, data=json.dumps(body).encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    status, created = post("/create_topic", {"publisher_id": 1, "topic_name": HTTP_TOPIC})
    assert status == 200, created
    topic_id = created["topic_id"]
    assert post("/subscribe", {"consumer_id": 1, "topic_id": topic_id})[0] == 200
    for i in range(HTTP_MESSAGES):
        assert post("/publish_message", {"topic_id": topic_id, "message_content": f"m{i}"})[0] == 200
    status, text = http_get(f"{broker.http_url}/message?consumer_id=1&topic_id={topic_id}&max=100")
    assert status == 200 and len(json.loads(text)["messages"]) == HTTP_MESSAGES, text
    assert post("/publish_message", {"topic_id": topic_id})[0] == 400

    # ARCHIVED and ARCHIVE_BLOCKED: expired records, archived or (blocked) deleted unarchived.
    (broker.data_dir / "archive").mkdir(parents=True, exist_ok=True)
    (broker.data_dir / "archive" / f"topic={ARCHIVE_BLOCKED}").write_bytes(b"not a folder")
    archived = {"archive.enable": "true", "internal.segment.bytes": "1024", "retention.ms": "3600000"}
    futures = admin.create_topics([
        NewTopic(ARCHIVED, 1, 1, config=archived),
        NewTopic(ARCHIVE_BLOCKED, 1, 1, config={**archived, "archive.on.failure": "delete"}),
    ], operation_timeout=10, request_timeout=15)
    for name, f in futures.items():
        f.result(timeout=20)
    for topic in (ARCHIVED, ARCHIVE_BLOCKED):
        produce_expired(b, topic)
    facts["archived_records"] = tern_harness.wait_until(
        lambda: metric_sum(broker_metrics(broker), "tern_archive_records_total", topic=ARCHIVED) or None,
        timeout=20, what="the exporter to archive the expired records")
    facts["skipped_segments"] = tern_harness.wait_until(
        lambda: metric_sum(broker_metrics(broker), "tern_archive_skipped_segments_total",
                           topic=ARCHIVE_BLOCKED) or None,
        timeout=20, what="retention to delete the blocked topic's segments unarchived")
    return facts


def produce_expired(bootstrap: str, topic: str) -> None:
    """N_EXPIRED small records stamped two hours ago, then two fresh sentinels of 900
    random bytes (a batch bigger than segment.bytes is refused; these fit one segment
    alone, never beside anything), so the old records are in sealed, expired segments."""
    import os

    from confluent_kafka import Producer

    errors = []
    report = lambda err, _msg: err and errors.append(err)  # noqa: E731
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 512})
    old = int(time.time() * 1000) - 2 * 3600 * 1000
    for i in range(N_EXPIRED):
        p.produce(topic, value=f"expired-{i}".encode(), timestamp=old + i, on_delivery=report)
    p.flush(15)
    for _ in range(2):
        p.produce(topic, value=os.urandom(900), on_delivery=report)
        p.flush(15)
    assert not errors, errors
