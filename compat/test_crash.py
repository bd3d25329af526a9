"""Durability: kill -9 mid-stream and clean SIGTERM restarts, with confluent-kafka; and
kill -9 while a consumer group commits offsets (committed offsets are durable).

An acked message (acks=1: the leader appended it) must be readable after the broker is
killed with SIGKILL and restarted on the same data dir: SIGKILL does not lose the page
cache, so only data the broker had not yet written (or had not finished writing) may be
missing, and the broker must never ack that. The log must come back without gaps or
corrupt batches.
"""

from __future__ import annotations

import re
import threading
import time

import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from ck import consume_all, produce_all
from tern_harness import GROUP_ARGS, Broker, free_port, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import powerloss  # noqa: E402

VALUE_RE = re.compile(rb"^msg-(\d{8})-[a-z]+$")
WORDS = [b"alpha", b"bravo", b"charlie", b"delta", b"echo", b"foxtrot", b"golf"]


def value_for(i: int) -> bytes:
    return b"msg-%08d-" % i + WORDS[i % len(WORDS)]


def key_for(i: int) -> bytes:
    return b"k%d" % (i % 7)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("segment_bytes", [None, 16384], ids=["default-segments", "16KiB-segments"])
def test_kill9_mid_stream_keeps_every_acked_message(broker, topic, segment_bytes):
    if segment_bytes:
        # Small segments: the crash lands after many segment rolls; recovery must rebuild
        # every segment's index, not just the active one.
        admin = AdminClient({"bootstrap.servers": broker.address})  # must outlive its futures
        admin.create_topics(
            [NewTopic(topic, num_partitions=1, replication_factor=1,
                      config={"internal.segment.bytes": str(segment_bytes)})],
            operation_timeout=10)[topic].result(timeout=15)
    acked: dict[bytes, int] = {}       # value -> offset the broker acked it at
    failed: list[tuple[bytes, str]] = []
    p = Producer({
        "bootstrap.servers": broker.address,
        "acks": 1,
        "enable.idempotence": False,
        "linger.ms": 2,
        "message.timeout.ms": 45000,
        "socket.timeout.ms": 5000,
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 500,
        "retry.backoff.ms": 100,
        # Batches must fit in a segment (a bigger one is rejected, RECORD_LIST_TOO_LARGE).
        **({"batch.size": segment_bytes // 2} if segment_bytes else {}),
    })

    lock = threading.Lock()

    def on_delivery(err, msg):
        with lock:
            if err is None:
                acked[msg.value()] = msg.offset()
            else:
                failed.append((msg.value(), str(err)))

    stop = threading.Event()
    produced = [0]
    thread_error: list[BaseException] = []

    def produce_loop():
        i = 0
        t_end = time.monotonic() + 60
        try:
            while not stop.is_set() and i < 300_000 and time.monotonic() < t_end:
                if len(p) > 2000:          # at most ~2000 unacked messages outstanding
                    p.poll(0.01)
                    continue
                try:
                    p.produce(topic, key=key_for(i), value=value_for(i), on_delivery=on_delivery)
                except BufferError:
                    p.poll(0.05)
                    continue
                i += 1
                p.poll(0)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test thread
            thread_error.append(e)
        finally:
            produced[0] = i

    t = threading.Thread(target=produce_loop, name="crash-producer", daemon=True)
    t.start()
    try:
        wait_until(lambda: len(acked) >= 3000 or not t.is_alive(), timeout=60, interval=0.01, what="3000 acks")
        assert len(acked) >= 3000, f"only {len(acked)} acks before the producer stopped; failed={failed[:3]}"
        broker.kill9()                     # mid-stream: the producer is still sending
        with lock:
            acked_before_kill = dict(acked)
        time.sleep(0.5)                    # the producer keeps queueing against a dead broker
    finally:
        stop.set()
        t.join(timeout=15)
    assert not t.is_alive(), "producer thread did not stop"
    assert not thread_error, thread_error

    broker.start()                         # same data dir, same port
    remaining = p.flush(60)                # retries of unacked messages go to the new broker
    assert remaining == 0, f"{remaining} messages neither acked nor failed 60 s after restart"

    got, errors, wm = consume_all(broker.address, topic, timeout=60)
    assert not errors, f"consumer errors after crash recovery: {[str(e) for e in errors][:10]}"
    low, high = wm[0]
    assert low == 0, wm
    offsets = [m.offset() for m in got]
    assert offsets == list(range(low, high)), (
        f"offsets not contiguous: read {len(offsets)} records, high watermark {high}; "
        f"first gap near {next((a for a, b in zip(offsets, offsets[1:]) if b != a + 1), None)}")

    at_offset = {}
    for m in got:
        mo = VALUE_RE.match(m.value() or b"")
        assert mo, f"corrupt value at offset {m.offset()}: {m.value()[:80]!r}"
        i = int(mo.group(1))
        assert m.value() == value_for(i) and m.key() == key_for(i), f"corrupt record at offset {m.offset()}"
        at_offset[m.offset()] = m.value()

    lost = {v: o for v, o in acked_before_kill.items() if at_offset.get(o) != v}
    assert not lost, (
        f"{len(lost)} of {len(acked_before_kill)} messages acked before kill -9 are gone or moved; "
        f"e.g. {sorted(lost.items(), key=lambda kv: kv[1])[:5]} "
        f"(high watermark after restart: {high})")
    lost_after = {v: o for v, o in acked.items() if at_offset.get(o) != v}
    assert not lost_after, f"{len(lost_after)} acked messages not at their acked offset: {list(lost_after.items())[:5]}"
    print(f"failures: {sorted(set(e for _, e in failed))[:5]}")
    print(f"produced={produced[0]} acked_before_kill={len(acked_before_kill)} acked_total={len(acked)} "
          f"failed={len(failed)} log_end={high} duplicates={len(got) - len({m.value() for m in got})}")

    # Fetching from the middle of the recovered log starts exactly there (index rebuilt).
    from ck import new_consumer
    from confluent_kafka import TopicPartition
    mid = high // 2
    c = new_consumer(broker.address)
    try:
        c.assign([TopicPartition(topic, 0, mid)])
        first, deadline = None, time.monotonic() + 15
        while first is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                first = m
    finally:
        c.close()
    assert first is not None and first.offset() == mid and first.value() == at_offset[mid], (
        mid, first and first.offset())

    # The recovered log takes new writes after its end, without overwriting.
    reports = produce_all(broker.address, topic, [{"value": b"after-crash-%d" % i} for i in range(50)],
                          {"acks": "all"})
    assert [r[1] for r in reports] == [None] * 50, reports[:3]
    assert sorted(r[3] for r in reports) == list(range(high, high + 50))


@pytest.mark.timeout(120)
def test_sigterm_restart_keeps_data_topics_and_configs(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1,
                                  config={"retention.ms": "5400000"})],
                        operation_timeout=10)[topic].result(timeout=15)
    n = 600
    msgs = [{"key": key_for(i), "value": value_for(i), "headers": [("i", b"%d" % i)]} for i in range(n)]
    reports = produce_all(broker.address, topic, msgs, {"acks": "all", "compression.type": "zstd"})
    assert not [r for r in reports if r[1] is not None]
    where = {i: (part, off) for i, _, part, off in reports}
    del admin

    code = broker.stop()
    assert code == 0, f"tern exited with {code} on SIGTERM (expected a clean exit 0)"
    broker.start()

    admin = AdminClient({"bootstrap.servers": broker.address})
    md = admin.list_topics(timeout=10)
    assert topic in md.topics and sorted(md.topics[topic].partitions) == [0, 1, 2], md.topics.get(topic)
    res = ConfigResource(ResourceType.TOPIC, topic)
    cfg = admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)
    assert cfg["retention.ms"].value == "5400000", "topic config lost across restart"

    got, errors, wm = consume_all(broker.address, topic)
    assert not errors, [str(e) for e in errors]
    assert sum(h - lo for lo, h in wm.values()) == n, wm
    for m in got:
        i = int(m.headers()[0][1])
        assert m.value() == value_for(i) and m.key() == key_for(i)
        assert (m.partition(), m.offset()) == where[i]

    # Offsets continue where they were, per partition.
    more = produce_all(broker.address, topic, [{"key": key_for(i), "value": b"more"} for i in range(30)])
    for _, err, part, off in more:
        assert err is None
        assert off >= wm[part][1], f"new record on partition {part} got offset {off} < old end {wm[part][1]}"


@pytest.mark.timeout(120)
def test_kill9_when_idle_then_restart_twice(broker, topic):
    """Recovery is repeatable: kill -9, restart, kill -9 again, restart; all data intact."""
    n = 300
    produce_all(broker.address, topic, [{"value": value_for(i)} for i in range(n)], {"acks": "all"})
    broker.kill9()
    broker.start()
    produce_all(broker.address, topic, [{"value": value_for(i)} for i in range(n, 2 * n)], {"acks": "all"})
    broker.kill9()
    broker.start()
    got, errors, wm = consume_all(broker.address, topic)
    assert not errors, [str(e) for e in errors]
    assert wm == {0: (0, 2 * n)}
    assert [m.value() for m in got] == [value_for(i) for i in range(2 * n)]


@pytest.mark.timeout(120)
def test_idempotent_producer_continues_across_sigterm_restart(broker, topic):
    """One idempotent producer (same producer id and sequence numbers) before and after a
    clean broker restart: every message delivered once, in order, and no fatal error."""
    p = Producer({"bootstrap.servers": broker.address, "enable.idempotence": True,
                  "message.timeout.ms": 30000, "reconnect.backoff.max.ms": 500})
    errors = []
    offsets = {}

    def cb(err, msg):
        if err is None:
            offsets[msg.value()] = msg.offset()
        else:
            errors.append(err)

    for i in range(200):
        p.produce(topic, value=value_for(i), on_delivery=cb)
    assert p.flush(30) == 0
    code = broker.stop()
    assert code == 0, f"tern exited with {code} on SIGTERM"
    broker.start()
    for i in range(200, 400):
        p.produce(topic, value=value_for(i), on_delivery=cb)
        p.poll(0)
    assert p.flush(45) == 0, "messages still pending 45 s after restart"
    assert not errors, [str(e) for e in errors][:5]
    assert [offsets[value_for(i)] for i in range(400)] == list(range(400))
    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert wm == {0: (0, 400)}
    assert [m.value() for m in got] == [value_for(i) for i in range(400)]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("segment_bytes", [None, 16384], ids=["default-segments", "16KiB-segments"])
def test_kill9_idempotent_producer_no_duplicates(broker, topic, segment_bytes):
    """enable.idempotence=True (acks=all): after kill -9 mid-stream and restart, retried
    batches that had already been written must be deduplicated (the broker must rebuild
    producer state from the log), order preserved, every acked message kept."""
    if segment_bytes:
        admin = AdminClient({"bootstrap.servers": broker.address})  # must outlive its futures
        admin.create_topics(
            [NewTopic(topic, num_partitions=1, replication_factor=1,
                      config={"internal.segment.bytes": str(segment_bytes)})],
            operation_timeout=10)[topic].result(timeout=15)
    acked: dict[bytes, int] = {}
    failed: list[str] = []
    lock = threading.Lock()
    p = Producer({"bootstrap.servers": broker.address, "enable.idempotence": True, "linger.ms": 2,
                  "message.timeout.ms": 45000, "socket.timeout.ms": 5000,
                  "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                  **({"batch.size": segment_bytes // 2} if segment_bytes else {})})

    def on_delivery(err, msg):
        with lock:
            if err is None:
                acked[msg.value()] = msg.offset()
            else:
                failed.append(str(err))

    stop = threading.Event()
    produced = [0]

    def produce_loop():
        i, t_end = 0, time.monotonic() + 60
        while not stop.is_set() and i < 300_000 and time.monotonic() < t_end:
            if len(p) > 2000:
                p.poll(0.01)
                continue
            try:
                p.produce(topic, value=value_for(i), on_delivery=on_delivery)
            except BufferError:
                p.poll(0.05)
                continue
            i += 1
            p.poll(0)
        produced[0] = i

    t = threading.Thread(target=produce_loop, name="idem-crash-producer", daemon=True)
    t.start()
    try:
        wait_until(lambda: len(acked) >= 3000 or not t.is_alive(), timeout=60, interval=0.01, what="3000 acks")
        assert len(acked) >= 3000, f"only {len(acked)} acks; failed={failed[:3]}"
        broker.kill9()
        with lock:
            acked_before_kill = dict(acked)
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=15)
    assert not t.is_alive()
    broker.start()
    remaining = p.flush(60)
    assert remaining == 0, f"{remaining} messages pending 60 s after restart"
    assert not failed, f"{len(failed)} delivery failures after restart, e.g. {failed[:3]}"

    got, errors, wm = consume_all(broker.address, topic, timeout=60)
    assert not errors, [str(e) for e in errors][:10]
    values = [m.value() for m in got]
    assert [m.offset() for m in got] == list(range(wm[0][0], wm[0][1]))
    dups = len(values) - len(set(values))
    assert dups == 0, f"{dups} duplicated records: retried batches were not deduplicated after recovery"
    nums = [int(VALUE_RE.match(v).group(1)) for v in values]
    assert nums == list(range(len(nums))), "idempotent producer's records out of order or missing in the middle"
    at_offset = {m.offset(): m.value() for m in got}
    lost = {v: o for v, o in acked_before_kill.items() if at_offset.get(o) != v}
    assert not lost, f"{len(lost)} acked messages lost: {sorted(lost.items(), key=lambda kv: kv[1])[:5]}"
    print(f"idempotent: produced={produced[0]} acked_before_kill={len(acked_before_kill)} "
          f"acked_total={len(acked)} log_end={wm[0][1]}")


@pytest.mark.broker_args(*GROUP_ARGS)
@pytest.mark.timeout(240)
def test_kill9_while_committing_keeps_last_acknowledged_commit(broker, topic):
    """A group member commits increasing offsets synchronously (OffsetCommit, one at a time)
    while the broker is killed with SIGKILL. After restart the committed offset (OffsetFetch)
    must be the last commit the broker acknowledged, or the one in flight at the kill; never
    older (an acknowledged commit lost) and never anything else. Two rounds: the second
    replays a __consumer_offsets log that already went through one crash."""
    import uuid
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient
    from confluent_kafka import ConsumerGroupTopicPartitions

    n = 5000
    produce_all(broker.address, topic, [{"value": b"c%05d" % i} for i in range(n)], {"acks": "all", "linger.ms": 5})
    group = f"commit-crash-{uuid.uuid4().hex[:8]}"
    tp0 = TopicPartition(topic, 0)

    def member():
        c = Consumer({"bootstrap.servers": broker.address, "group.id": group, "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                      "heartbeat.interval.ms": 1000, "socket.timeout.ms": 3000,
                      "partition.assignment.strategy": "range"})
        c.subscribe([topic])
        deadline = time.monotonic() + 30
        while not c.assignment() and time.monotonic() < deadline:
            c.poll(0.2)
        assert c.assignment(), "the member got no assignment within 30 s"
        return c

    def committed_now() -> tuple[int, int]:
        """(via a fresh consumer's committed(), via AdminClient list_consumer_group_offsets)"""
        probe = Consumer({"bootstrap.servers": broker.address, "group.id": group,
                          "enable.auto.commit": False, "socket.timeout.ms": 10000})
        try:
            (tp,) = probe.committed([tp0], timeout=15)
        finally:
            probe.close()
        admin = AdminClient({"bootstrap.servers": broker.address, "socket.timeout.ms": 10000})
        res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [tp0])],
                                                request_timeout=10)[group].result(timeout=15)
        (atp,) = res.topic_partitions
        return tp.offset, atp.offset

    expected_start = 0
    for round_ in range(2):
        c = member()
        (tp,) = c.committed([tp0], timeout=15)
        assert max(tp.offset, 0) == expected_start, f"round {round_}: member starts from committed {tp.offset}"
        acked: list[int] = []
        in_flight: list[int | None] = [None]
        failure: list[str] = []
        stop = threading.Event()

        def commit_loop():
            off = expected_start + 1
            t_end = time.monotonic() + 90
            while not stop.is_set() and off <= n and time.monotonic() < t_end:
                in_flight[0] = off
                try:
                    (res,) = c.commit(offsets=[TopicPartition(topic, 0, off)], asynchronous=False)
                except KafkaException as e:
                    failure.append(str(e))
                    return
                if res.error is not None:
                    failure.append(str(res.error))
                    return
                acked.append(off)
                in_flight[0] = None
                off += 1

        t = threading.Thread(target=commit_loop, name="commit-loop", daemon=True)
        t0 = time.monotonic()
        t.start()
        try:
            wait_until(lambda: len(acked) >= 200 or not t.is_alive(), timeout=60, interval=0.005,
                       what="200 acknowledged commits")
            assert len(acked) >= 200, f"round {round_}: only {len(acked)} commits acknowledged; {failure[:2]}"
            rate = len(acked) / (time.monotonic() - t0)
            broker.kill9()                      # lands while a commit is in flight
            stop.set()
            time.sleep(0.5)
            broker.start()
            t.join(timeout=60)
        finally:
            stop.set()
        assert not t.is_alive(), "the commit loop is stuck 60 s after the broker restart"
        last_acked = acked[-1]
        pending = in_flight[0]
        got_consumer, got_admin = committed_now()
        print(f"round {round_}: {len(acked)} commits acked ({rate:.0f}/s), last acked {last_acked}, "
              f"in flight at kill {pending}, failure {failure[:1]}; committed after restart: "
              f"consumer.committed()={got_consumer} admin={got_admin}")
        allowed = {last_acked} | ({pending} if pending is not None else set())
        assert got_consumer in allowed, (
            f"round {round_}: after kill -9 + restart the committed offset is {got_consumer}; the last "
            f"acknowledged commit was {last_acked} (in flight: {pending})"
            + (" -- an acknowledged commit was lost" if got_consumer < last_acked else ""))
        assert got_admin == got_consumer, (got_admin, got_consumer)
        c.close()
        expected_start = got_consumer


@pytest.mark.timeout(180)
def test_flush_messages_1_keeps_every_acknowledged_write_through_a_power_loss(tmp_path, topic):
    """`flush.messages=1` fsyncs each write before acknowledging it; the default leaves it in
    the page cache until the flush interval. The broker runs under tools/powerloss_shim.c;
    after kill -9 its data directory is cut back to what it had asked the kernel to make
    durable (tools/powerloss.py), as a power loss would leave it: all of the first topic
    survives, not all of the second."""
    data, shadow = tmp_path / "data", tmp_path / "shadow"
    broker = Broker(data_dir=data, log_dir=tmp_path / "logs", port=free_port(),
                    extra_args=["--log-flush-interval-ms", "600000"],
                    extra_env=powerloss.environment(data, shadow, base={}))
    broker.start()
    try:
        durable, lazy = f"{topic}-fsynced", f"{topic}-default"
        admin = AdminClient({"bootstrap.servers": broker.address})
        futures = admin.create_topics(
            [NewTopic(durable, num_partitions=1, replication_factor=1, config={"flush.messages": "1"}),
             NewTopic(lazy, num_partitions=1, replication_factor=1)], operation_timeout=10)
        for f in futures.values():
            f.result(timeout=15)
        n = 200
        for name, acks in ((durable, "all"), (durable, "1"), (lazy, "all")):
            results = produce_all(broker.address, name, [{"value": value_for(i)} for i in range(n)],
                                  {"acks": acks, "linger.ms": 0})
            assert all(err is None for _, err, _, _ in results), results[:3]
        broker.kill9()
        lost = powerloss.apply(data, shadow)
        assert lost["bytes_dropped"] > 0, f"the power loss took nothing: {lost}"
        broker.extra_env = {}
        broker.start()
        got, errors, wm = consume_all(broker.address, durable)
        assert not errors, [str(e) for e in errors]
        assert [m.value() for m in got] == [value_for(i) for i in range(n)] * 2, \
            f"an fsynced, acknowledged write was lost (the power loss took {lost})"
        left, errors, _ = consume_all(broker.address, lazy)
        assert not errors, [str(e) for e in errors]
        assert len(left) < n, f"the power loss dropped nothing of the default topic: {lost}"
        print(f"power loss: {lost['bytes_dropped']} bytes dropped, {len(lost['removed'])} paths removed, "
              f"{len(lost['rewritten'])} files cut, {len(lost['restored'])} restored; "
              f"{n - len(left)} of {n} records of the default topic lost, none of the flush.messages=1 topic")
    finally:
        broker.stop()
