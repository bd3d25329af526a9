"""Transactions on one broker (embedded store) with real clients: confluent-kafka
(librdkafka), kafkajs, aiokafka and kafka-python.

What a user of exactly-once needs: a committed transaction's records reach read_committed
consumers and an aborted one's never do (read_uncommitted consumers see both, as in
Kafka); a restarted producer fences the old one and its open transaction is aborted;
offsets sent in a transaction count only when it commits; a transaction open across
segment rolls and a broker kill -9 still commits; a transaction past its timeout is
aborted by the broker and stops holding back read_committed consumers.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.broker_args(
    "--transaction-state-log-num-partitions", "3",
    "--offsets-topic-num-partitions", "3",
    "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "200",
    *("--group-initial-rebalance-delay-ms", "300", "--group-min-session-timeout-ms", "1000"),
)


def create(addr: str, *topics, partitions: int = 2, config: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": addr})
    futures = admin.create_topics([NewTopic(t, partitions, 1, config=config or {}) for t in topics],
                                  operation_timeout=10, request_timeout=15)
    for f in futures.values():
        f.result(timeout=20)


def txn_producer(addr: str, txn_id: str, **extra) -> Producer:
    p = Producer({"bootstrap.servers": addr, "transactional.id": txn_id,
                  "message.timeout.ms": 20000, "socket.timeout.ms": 10000, **extra})
    p.init_transactions(30)
    return p


def read(addr: str, topics: list[str], level: str, timeout: float = 20.0) -> list[tuple[str, int, int, str]]:
    """Every record a consumer at isolation `level` sees, from the beginning to the end of
    what it may read (each partition's EOF), as (topic, partition, offset, value)."""
    c = Consumer({"bootstrap.servers": addr, "group.id": f"read-{uuid.uuid4().hex[:8]}",
                  "isolation.level": level, "enable.auto.commit": False,
                  "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        assignment = []
        for t in topics:
            md = c.list_topics(t, timeout=10).topics[t]
            assignment += [TopicPartition(t, p, OFFSET_BEGINNING) for p in md.partitions]
        c.assign(assignment)
        at_end, got = set(), []
        deadline = time.monotonic() + timeout
        while len(at_end) < len(assignment) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add((m.topic(), m.partition()))
                    continue
                raise KafkaException(m.error())
            at_end.discard((m.topic(), m.partition()))
            got.append((m.topic(), m.partition(), m.offset(), m.value().decode()))
        assert len(at_end) == len(assignment), f"not at the end of every partition: {at_end}"
        return got
    finally:
        c.close()


def values(records) -> list[str]:
    return sorted(r[3] for r in records)


def test_committed_records_reach_read_committed_consumers_and_aborted_ones_never(broker, topic):
    a, b = f"{topic}-a", f"{topic}-b"
    create(broker.address, a, b)
    p = txn_producer(broker.address, f"{topic}-id")
    p.begin_transaction()
    for i in range(20):
        p.produce(a, value=f"c1-{i}", partition=i % 2)
        p.produce(b, value=f"c1-{i}", partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(a, value=f"ab-{i}", partition=i % 2)
    p.flush(10)  # on the broker before the abort: librdkafka would purge them unsent
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(b, value=f"c2-{i}", partition=i % 2)
    p.commit_transaction(30)

    committed = read(broker.address, [a, b], "read_committed")
    expected = sorted([f"c1-{i}" for i in range(20)] * 2 + [f"c2-{i}" for i in range(5)])
    assert values(committed) == expected
    # Per partition in offset order, as the producer sent them.
    for t, part in [(a, 0), (a, 1), (b, 0), (b, 1)]:
        offsets = [r[2] for r in committed if r[:2] == (t, part)]
        assert offsets == sorted(offsets)
    uncommitted = read(broker.address, [a, b], "read_uncommitted")
    assert values(uncommitted) == sorted(expected + [f"ab-{i}" for i in range(10)])


def test_a_restarted_producer_fences_the_old_one_and_its_open_transaction_is_aborted(broker, topic):
    create(broker.address, topic)
    txn_id = f"{topic}-id"
    old = txn_producer(broker.address, txn_id)
    old.begin_transaction()
    for i in range(10):
        old.produce(topic, value=f"zombie-{i}")
    old.flush(10)
    new = txn_producer(broker.address, txn_id)  # fences `old`, aborts its transaction
    new.begin_transaction()
    new.produce(topic, value="fresh")
    new.commit_transaction(30)
    with pytest.raises(KafkaException) as fenced:
        old.produce(topic, value="zombie-late")
        old.commit_transaction(10)
    assert fenced.value.args[0].fatal() or fenced.value.args[0].txn_requires_abort(), fenced.value
    assert values(read(broker.address, [topic], "read_committed")) == ["fresh"]
    assert sorted(values(read(broker.address, [topic], "read_uncommitted"))) == sorted(
        ["fresh"] + [f"zombie-{i}" for i in range(10)])


def test_offsets_sent_in_a_transaction_count_only_when_it_commits(broker, topic):
    source, sink, group = f"{topic}-in", f"{topic}-out", f"{topic}-g"
    create(broker.address, source, sink, partitions=1)
    plain = Producer({"bootstrap.servers": broker.address})
    for i in range(30):
        plain.produce(source, value=f"in-{i}")
    plain.flush(10)

    consumer = Consumer({"bootstrap.servers": broker.address, "group.id": group,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([source])
    p = txn_producer(broker.address, f"{topic}-copier")

    def copy(n: int, commit: bool) -> None:
        taken = []
        deadline = time.monotonic() + 30
        while len(taken) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                taken.append(m)
        assert len(taken) == n
        p.begin_transaction()
        for m in taken:
            p.produce(sink, value=m.value().decode().replace("in", "out"))
        p.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                      consumer.consumer_group_metadata(), 30)
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(10)
            p.abort_transaction(30)

    copy(10, commit=True)
    copy(10, commit=False)
    committed = consumer.committed([TopicPartition(source, 0)], timeout=10)
    assert committed[0].offset == 10, "the aborted transaction's offsets do not count"
    consumer.close()
    assert values(read(broker.address, [sink], "read_committed")) == sorted(f"out-{i}" for i in range(10))


def test_an_open_transaction_survives_segment_rolls_and_a_broker_kill_then_commits(broker, topic):
    create(broker.address, topic, partitions=1, config={"internal.segment.bytes": "2048"})
    p = txn_producer(broker.address, f"{topic}-id", **{"batch.size": 300, "linger.ms": 0})
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, value=f"open-{i:03d}-" + "x" * 100)
    p.flush(10)
    broker.kill9()
    broker.start()
    p.commit_transaction(60)
    got = read(broker.address, [topic], "read_committed")
    assert values(got) == sorted(f"open-{i:03d}-" + "x" * 100 for i in range(60))


def test_a_transaction_past_its_timeout_is_aborted_and_stops_holding_back_consumers(broker, topic):
    create(broker.address, topic, partitions=1)
    stuck = txn_producer(broker.address, f"{topic}-id", **{"transaction.timeout.ms": 2000, "socket.timeout.ms": 2000, "message.timeout.ms": 2000})
    stuck.begin_transaction()
    for i in range(5):
        stuck.produce(topic, value=f"stuck-{i}")
    stuck.flush(10)
    plain = Producer({"bootstrap.servers": broker.address})
    plain.produce(topic, value="after")
    plain.flush(10)
    # Held back while the transaction is open: ListOffsets at read_committed answers the
    # last stable offset, the open transaction's first offset; read_uncommitted the HW.
    for level, end in (("read_committed", 0), ("read_uncommitted", 6)):
        c = Consumer({"bootstrap.servers": broker.address, "group.id": f"lso-{uuid.uuid4().hex[:6]}",
                      "isolation.level": level})
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, end), level
        c.close()
    deadline = time.monotonic() + 15
    got = []
    while time.monotonic() < deadline:
        got = read(broker.address, [topic], "read_committed", timeout=5)
        if got:
            break
        time.sleep(0.5)
    assert values(got) == ["after"], "the broker aborted the timed-out transaction"


def test_kafkajs_transactions(broker, topic):
    node, here = shutil.which("node"), Path(__file__).resolve().parent / "kafkajs"
    if node is None or not (here / "node_modules" / "kafkajs").is_dir():
        pytest.skip("kafkajs not installed")
    create(broker.address, topic)
    args = {"broker": broker.address, "topic": topic, "id": f"{topic}-js", "commit": 12, "abort": 7}
    out = subprocess.run([node, str(here / "run.js"), "txn", json.dumps(args)], cwd=here,
                         capture_output=True, timeout=90)
    lines = [x for x in out.stdout.decode().splitlines() if x.strip()]
    assert out.returncode == 0 and lines, out.stderr.decode()[-3000:]
    result = json.loads(lines[-1])
    committed = sorted([f"c1-{i}" for i in range(12)] + [f"c2-{i}" for i in range(12)])
    assert sorted(result["committed"]) == committed
    assert sorted(result["uncommitted"]) == sorted(committed + [f"a-{i}" for i in range(7)])


def test_aiokafka_transactions(broker, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    create(broker.address, topic)

    async def run() -> tuple[list[str], list[str]]:
        p = AIOKafkaProducer(bootstrap_servers=broker.address, transactional_id=f"{topic}-aio")
        await p.start()
        try:
            async with p.transaction():
                for i in range(8):
                    await p.send(topic, f"c-{i}".encode(), partition=i % 2)
            await p.begin_transaction()
            for i in range(4):
                await p.send_and_wait(topic, f"a-{i}".encode(), partition=i % 2)
            await p.abort_transaction()
        finally:
            await p.stop()

        async def consume(level: str, want: int) -> list[str]:
            c = AIOKafkaConsumer(topic, bootstrap_servers=broker.address, isolation_level=level,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 group_id=f"aio-{level}-{uuid.uuid4().hex[:6]}")
            await c.start()
            got: list[str] = []
            try:
                deadline = time.monotonic() + 20
                while len(got) < want and time.monotonic() < deadline:
                    batch = await c.getmany(timeout_ms=500)
                    got += [m.value.decode() for ms in batch.values() for m in ms]
                batch = await c.getmany(timeout_ms=1000)  # nothing more
                got += [m.value.decode() for ms in batch.values() for m in ms]
            finally:
                await c.stop()
            return sorted(got)

        return await consume("read_committed", 8), await consume("read_uncommitted", 12)

    committed, uncommitted = asyncio.run(run())
    assert committed == sorted(f"c-{i}" for i in range(8))
    assert uncommitted == sorted([f"c-{i}" for i in range(8)] + [f"a-{i}" for i in range(4)])


def test_kafka_python_transactions(broker, topic):
    from kafka import KafkaConsumer, KafkaProducer

    create(broker.address, topic, partitions=1)
    p = KafkaProducer(bootstrap_servers=broker.address, transactional_id=f"{topic}-kp")
    p.init_transactions()
    p.begin_transaction()
    for i in range(6):
        p.send(topic, f"c-{i}".encode())
    p.commit_transaction()
    p.begin_transaction()
    for i in range(3):
        p.send(topic, f"a-{i}".encode())
    p.flush()
    p.abort_transaction()
    p.close()
    c = KafkaConsumer(topic, bootstrap_servers=broker.address, isolation_level="read_committed",
                      auto_offset_reset="earliest", consumer_timeout_ms=3000, enable_auto_commit=False)
    got = sorted(m.value.decode() for m in c)
    c.close()
    assert got == sorted(f"c-{i}" for i in range(6))


def cli(broker, *args: str) -> object:
    out = subprocess.run([str(broker.binary), "txn", "-b", broker.address, "--json", *args],
                         capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr.decode()
    return json.loads(out.stdout)


def test_tern_txn_lists_describes_and_aborts_an_open_transaction(broker, topic):
    create(broker.address, topic, partitions=1)
    txn_id = f"{topic}-id"
    p = txn_producer(broker.address, txn_id)
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, value=f"open-{i}")
    p.flush(10)
    listed = cli(broker, "list")
    assert {"transactional_id": txn_id, "producer_id": listed[0]["producer_id"], "state": "Ongoing"} in listed
    described = cli(broker, "describe", "--transactional-id", txn_id)
    assert described["state"] == "Ongoing" and described["partitions"] == [f"{topic}-0"]
    producers = cli(broker, "producers", "--topic", topic, "--partition", "0")
    assert [(x["producer_id"], x["current_transaction_start_offset"]) for x in producers] == [
        (described["producer_id"], 0)]
    # The coordinator knows it as open on this partition: not hanging, however old.
    assert cli(broker, "find-hanging", "--max-transaction-timeout-ms", "0") == []
    plain = Producer({"bootstrap.servers": broker.address})
    plain.produce(topic, value="after")
    plain.flush(10)
    assert read(broker.address, [topic], "read_committed") == []
    aborted = cli(broker, "abort", "--topic", topic, "--partition", "0", "--start-offset", "0")
    assert aborted["aborted"] is True
    assert values(read(broker.address, [topic], "read_committed")) == ["after"]
    after = cli(broker, "producers", "--topic", topic, "--partition", "0")
    assert all(x["current_transaction_start_offset"] == -1 for x in after)


ABANDONED_RUN = r'''
import sys, time
from confluent_kafka import Producer, TopicPartition, Consumer
addr, topic, group, txn_id = sys.argv[1:5]
c = Consumer({"bootstrap.servers": addr, "group.id": group, "enable.auto.commit": False})
p = Producer({"bootstrap.servers": addr, "transactional.id": txn_id, "transaction.timeout.ms": 3000})
p.init_transactions(30)
p.begin_transaction()
p.produce(topic, value=b"never committed", partition=0)
p.send_offsets_to_transaction([TopicPartition(topic, 0, 5)], c.consumer_group_metadata(), 30)
p.flush(10)
print("open", flush=True)
time.sleep(60)
'''


def test_an_application_with_a_new_transactional_id_each_start_is_not_blocked_by_its_last_run(broker, topic):
    """An application killed -9 in a transaction that holds offsets of its group, then
    started again under a new transactional id: its offsets are unstable only until the
    old transaction times out (the coordinator aborts it), never for good; the aborted
    transaction's offset does not count."""
    group = f"{topic}-g"
    create(broker.address, topic, partitions=1)
    first = Consumer({"bootstrap.servers": broker.address, "group.id": group, "enable.auto.commit": False})
    first.commit(offsets=[TopicPartition(topic, 0, 3)], asynchronous=False)
    first.close()
    run = subprocess.Popen([sys.executable, "-c", ABANDONED_RUN, broker.address, topic, group, f"{topic}-run-1"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert run.stdout.readline().strip() == b"open", run.stderr.read().decode()[-2000:]
    finally:
        run.kill()
        run.wait(10)
    started = time.monotonic()
    p = txn_producer(broker.address, f"{topic}-run-2")
    stable = Consumer({"bootstrap.servers": broker.address, "group.id": group, "enable.auto.commit": False,
                       "isolation.level": "read_committed"})
    try:
        deadline = started + 3.0 + 10
        offset = None
        while time.monotonic() < deadline:
            try:
                offset = stable.committed([TopicPartition(topic, 0)], timeout=2)[0].offset
                break
            except KafkaException as e:
                assert e.args[0].code() in (KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError._TIMED_OUT), e
        assert offset == 3, "the stable offset, once the old transaction was aborted"
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], stable.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        assert stable.committed([TopicPartition(topic, 0)], timeout=10)[0].offset == 7
    finally:
        stable.close()
