"""kcat (librdkafka 2.0.2) against tern: the user story.

    kcat -b ADDR -P -t orders -k key1 -H h=v      # produce lines from stdin
    kcat -b ADDR -C -t orders -o beginning -e -J  # read them all back as JSON
    kcat -b ADDR -L                               # list brokers and topics
    kcat -b ADDR -G group orders -e -J            # balanced consumer (consumer group)
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from tern_harness import GROUP_ARGS

KCAT = shutil.which("kcat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat not installed (apt-get install kcat)")

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
# Bounds librdkafka's own retrying so a broken broker fails fast instead of after 5 min.
BOUNDED = ["-X", "message.timeout.ms=20000", "-X", "socket.timeout.ms=10000"]


def kcat(args: list[str], stdin: bytes | None = None, timeout: float = 40) -> subprocess.CompletedProcess:
    p = subprocess.run([KCAT, *args], input=stdin, capture_output=True, timeout=timeout)
    return p


def produce(addr: str, topic: str, lines: list[str], key: str | None = None,
            headers: list[str] = (), codec: str | None = None, extra: list[str] = ()) -> None:
    args = ["-b", addr, "-P", "-t", topic]
    if key is not None:
        args += ["-k", key]
    for h in headers:
        args += ["-H", h]
    if codec is not None:
        args += ["-z", codec]
    args += [*BOUNDED, *extra]
    p = kcat(args, stdin=("\n".join(lines) + "\n").encode())
    assert p.returncode == 0, f"kcat -P failed (rc={p.returncode}): {p.stderr.decode(errors='replace')[-3000:]}"
    # kcat prints delivery failures to stderr but may still exit 0 in some versions.
    err = p.stderr.decode(errors="replace")
    assert "Delivery failed" not in err and "ERROR" not in err, err[-3000:]


def consume_json(addr: str, topic: str, extra: list[str] = (), timeout: float = 40) -> list[dict]:
    p = kcat(["-b", addr, "-C", "-t", topic, "-o", "beginning", "-e", "-J",
              "-X", "socket.timeout.ms=10000", *extra], timeout=timeout)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0, f"kcat -C failed (rc={p.returncode}): {err[-3000:]}"
    assert "ERROR" not in err, err[-3000:]
    out = []
    for line in p.stdout.decode().splitlines():
        line = line.strip()
        if line:
            out.append(json.loads(line))
    return out


def headers_of(rec: dict) -> list[tuple[str, str]]:
    h = rec.get("headers")
    if h is None:
        return []
    if isinstance(h, dict):
        return list(h.items())
    assert len(h) % 2 == 0, h
    return list(zip(h[0::2], h[1::2]))


def produce_story(addr: str, topic: str, codec: str | None):
    """Three kcat -P invocations with different keys/headers; returns the expected records."""
    expected = []
    batches = [
        ("key1", ["h=v"], [f"order-{i} {codec}" for i in range(5)]),
        ("key2", ["h=v2", "source=kcat"], [f"order-{i} {codec}" for i in range(5, 12)]),
        ("key1", ["h=v3"], [f"order-{i} {codec} " + "y" * 300 for i in range(12, 20)]),
    ]
    for key, headers, lines in batches:
        produce(addr, topic, lines, key=key, headers=headers, codec=codec)
        hdrs = [tuple(h.split("=", 1)) for h in headers]
        expected += [(key, line, hdrs) for line in lines]
    return expected


def check_story(records: list[dict], expected, topic: str, before_ms: int, after_ms: int):
    assert len(records) == len(expected), (
        f"expected {len(expected)} records, kcat read {len(records)}: {records[:3]}...")
    for i, (rec, (key, value, hdrs)) in enumerate(zip(records, expected)):
        assert rec["topic"] == topic
        assert rec["partition"] == 0
        assert rec["offset"] == i, f"record {i} has offset {rec['offset']}"
        assert rec["key"] == key, (i, rec)
        assert rec["payload"] == value, (i, rec)
        assert headers_of(rec) == hdrs, (i, rec)
        assert rec["tstype"] == "create", (i, rec)
        # CreateTime set by librdkafka at produce time.
        assert before_ms - 5000 <= rec["ts"] <= after_ms + 5000, (i, rec["ts"], before_ms, after_ms)


def test_produce_consume_user_story(broker):
    addr, topic = broker.address, "orders"
    before = int(time.time() * 1000)
    expected = produce_story(addr, topic, codec=None)
    after = int(time.time() * 1000)
    records = consume_json(addr, topic)
    check_story(records, expected, topic, before, after)


@pytest.mark.parametrize("codec", CODECS)
def test_produce_consume_each_codec(broker, codec):
    addr, topic = broker.address, "orders"
    before = int(time.time() * 1000)
    expected = produce_story(addr, topic, codec=codec)
    after = int(time.time() * 1000)
    check_story(consume_json(addr, topic), expected, topic, before, after)


def test_mixed_codecs_one_topic(broker):
    """Batches with every codec interleaved in one partition read back in order."""
    addr, topic = broker.address, "orders-mixed"
    expected = []
    for round_ in range(2):
        for codec in CODECS:
            lines = [f"{codec}-{round_}-{i}" for i in range(4)]
            produce(addr, topic, lines, key=f"k-{codec}", headers=[f"codec={codec}"], codec=codec)
            expected += [(f"k-{codec}", line, [("codec", codec)]) for line in lines]
    records = consume_json(addr, topic)
    got = [(r["key"], r["payload"], headers_of(r)) for r in records]
    assert got == expected
    assert [r["offset"] for r in records] == list(range(len(expected)))


def test_per_line_keys_and_many_messages(broker):
    """-K: takes the key from each line; 3000 messages need several fetches to read."""
    addr, topic = broker.address, "orders-bulk"
    n = 3000
    lines = [f"k{i % 13}:value-{i:05d}-" + "z" * 200 for i in range(n)]
    produce(addr, topic, lines, extra=["-K", ":"], codec="lz4")
    records = consume_json(addr, topic, timeout=60)
    assert len(records) == n
    for i, r in enumerate(records):
        assert r["offset"] == i
        assert r["key"] == f"k{i % 13}"
        assert r["payload"] == f"value-{i:05d}-" + "z" * 200


def test_consume_from_offset_and_count(broker):
    """-o N -c M reads exactly M records starting at offset N."""
    addr, topic = broker.address, "orders-offset"
    produce(addr, topic, [f"m{i}" for i in range(30)], key="k")
    p = kcat(["-b", addr, "-C", "-t", topic, "-o", "10", "-c", "5", "-J", "-e",
              "-X", "socket.timeout.ms=10000"])
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    recs = [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]
    assert [r["offset"] for r in recs] == [10, 11, 12, 13, 14]
    assert [r["payload"] for r in recs] == [f"m{i}" for i in range(10, 15)]


def test_metadata_list(broker):
    addr = broker.address
    produce(addr, "orders", ["one"], key="key1", headers=["h=v"])
    p = kcat(["-b", addr, "-L", "-J"])
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    md = json.loads(p.stdout)
    brokers = {b["id"]: b["name"] for b in md["brokers"]}
    assert brokers == {1: f"127.0.0.1:{broker.port}"}, md["brokers"]
    topics = {t["topic"]: t for t in md["topics"]}
    assert "orders" in topics, list(topics)
    t = topics["orders"]
    assert t.get("error") in (None, ""), t
    assert [p["partition"] for p in t["partitions"]] == [0]
    assert t["partitions"][0]["leader"] == 1
    # Plain-text listing names the topic too.
    p = kcat(["-b", addr, "-L", "-t", "orders"])
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    text = p.stdout.decode()
    assert 'topic "orders" with 1 partitions' in text, text
    assert "broker 1 at 127.0.0.1:%d" % broker.port in text, text


@pytest.mark.broker_args(*GROUP_ARGS)
@pytest.mark.timeout(120)
def test_balanced_consumer_group_reads_all_then_resumes(broker, topic):
    """kcat -G GROUP TOPIC (librdkafka KafkaConsumer, group protocol): reads every record of a
    3-partition topic and exits at the end (-e); offsets are committed on exit, so a second
    run in the same group reads nothing, and a third reads only the records added since."""
    from confluent_kafka.admin import AdminClient, NewTopic
    addr = broker.address
    admin = AdminClient({"bootstrap.servers": addr})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)
    n = 60
    produce(addr, topic, [f"k{i % 7}:v-{i:03d}" for i in range(n)], extra=["-K", ":"])
    group = f"kcat-{topic}"[:200]

    def group_read():
        p = kcat(["-b", addr, "-G", group, "-e", "-J",
                  "-X", "auto.offset.reset=earliest", "-X", "session.timeout.ms=6000",
                  "-X", "socket.timeout.ms=10000", topic], timeout=60)
        err = p.stderr.decode(errors="replace")
        assert p.returncode == 0, f"kcat -G failed (rc={p.returncode}): {err[-3000:]}"
        assert "ERROR" not in err, err[-3000:]
        return [json.loads(x) for x in p.stdout.decode().splitlines() if x.strip()]

    first = group_read()
    assert sorted(r["payload"] for r in first) == [f"v-{i:03d}" for i in range(n)], \
        f"kcat -G read {len(first)} of {n} records"
    by_part: dict[int, list[int]] = {}
    for r in first:
        assert r["topic"] == topic and r["key"] == f"k{int(r['payload'][2:]) % 7}", r
        by_part.setdefault(r["partition"], []).append(r["offset"])
    for part, offs in by_part.items():
        assert offs == list(range(len(offs))), f"partition {part}: offsets {offs}"

    again = group_read()
    assert again == [], f"second kcat -G run in the same group re-read {len(again)} records: {again[:3]}"

    produce(addr, topic, [f"k{i % 7}:w-{i:03d}" for i in range(5)], extra=["-K", ":"])
    third = group_read()
    assert sorted(r["payload"] for r in third) == [f"w-{i:03d}" for i in range(5)], third
