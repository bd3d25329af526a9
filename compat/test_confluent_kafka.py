"""confluent-kafka (librdkafka) Producer / Consumer / AdminClient against tern."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from ck import consume_all, produce_all

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
FIXED_TS = 1_700_000_000_123


def make_messages(n: int, tag: str) -> list[dict]:
    msgs = []
    for i in range(n):
        msgs.append({
            "key": f"key-{i % 5}".encode(),
            "value": f"{tag} message {i} ".encode() + bytes(range(i % 40)) + b"x" * (i % 97),
            "headers": [("h", f"v{i}".encode()), ("trace-id", f"t-{i}".encode()), ("h", b"dup")],
            # A few messages carry an explicit CreateTime that must survive the round trip.
            "timestamp": FIXED_TS + i if i % 10 == 3 else None,
        })
    return msgs


def roundtrip(addr, topic, producer_config, n=60, tag="ck"):
    msgs = make_messages(n, tag)
    before = int(time.time() * 1000)
    reports = produce_all(addr, topic, msgs, producer_config)
    after = int(time.time() * 1000)
    errs = [(i, e) for i, e, _, _ in reports if e is not None]
    assert not errs, f"delivery errors: {errs[:5]}"
    assert len(reports) == n
    # One partition (auto-created topic): delivery-report offsets are 0..n-1 in produce order.
    by_index = {i: (p, o) for i, _, p, o in reports}
    assert [by_index[i] for i in range(n)] == [(0, i) for i in range(n)], sorted(by_index.items())[:10]

    got, cerrs, wm = consume_all(addr, topic)
    assert not cerrs, f"consumer errors: {[str(e) for e in cerrs]}"
    assert wm == {0: (0, n)}, wm
    assert len(got) == n, f"read {len(got)} of {n}"
    for i, (m, sent) in enumerate(zip(got, msgs)):
        assert m.offset() == i
        assert m.key() == sent["key"], i
        assert m.value() == sent["value"], i
        assert m.headers() == sent["headers"], (i, m.headers())
        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_CREATE_TIME, (i, ts_type)
        if sent["timestamp"] is not None:
            assert ts == sent["timestamp"], (i, ts)
        else:
            assert before - 5000 <= ts <= after + 5000, (i, ts, before, after)


@pytest.mark.parametrize("codec", CODECS)
def test_default_producer_each_codec(broker, topic, codec):
    """Producer with the client's defaults (idempotence as librdkafka defaults) + codec."""
    roundtrip(broker.address, topic, {"compression.type": codec}, tag=f"default-{codec}")


@pytest.mark.parametrize("codec", CODECS)
def test_idempotent_producer_each_codec(broker, topic, codec):
    """enable.idempotence=True: InitProducerId, acks=all, sequence numbers per batch."""
    roundtrip(broker.address, topic, {"enable.idempotence": True, "compression.type": codec},
              tag=f"idem-{codec}")


def test_idempotent_producer_many_batches(broker, topic):
    """Thousands of small messages -> many batches, 5 in flight; no gaps, no duplicates."""
    n = 4000
    msgs = [{"key": f"k{i % 3}".encode(), "value": f"{i:06d}".encode()} for i in range(n)]
    reports = produce_all(broker.address, topic, msgs,
                          {"enable.idempotence": True, "linger.ms": 1, "batch.num.messages": 50})
    assert not [r for r in reports if r[1] is not None], [r for r in reports if r[1] is not None][:5]
    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert wm == {0: (0, n)}
    assert [m.value() for m in got] == [f"{i:06d}".encode() for i in range(n)]
    assert [m.offset() for m in got] == list(range(n))


def test_keyed_messages_multi_partition(broker, topic):
    admin = AdminClient({"bootstrap.servers": broker.address})
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)
    n = 200
    msgs = [{"key": f"user-{i % 17}".encode(), "value": f"{i}".encode(),
             "headers": [("i", str(i).encode())]} for i in range(n)]
    reports = produce_all(broker.address, topic, msgs)
    assert not [r for r in reports if r[1] is not None]
    where = {i: (p, o) for i, _, p, o in reports}
    assert {p for p, _ in where.values()} <= {0, 1, 2, 3}
    assert len({p for p, _ in where.values()}) > 1, "17 keys all hashed to one partition?"

    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert sum(h - lo for lo, h in wm.values()) == n, wm
    assert sorted(int(m.value()) for m in got) == list(range(n))
    key_partition = {}
    last_in_partition = {}
    for m in got:
        i = int(m.value())
        assert (m.partition(), m.offset()) == where[i], (i, m.partition(), m.offset(), where[i])
        assert m.headers() == [("i", str(i).encode())]
        assert key_partition.setdefault(m.key(), m.partition()) == m.partition(), "key split across partitions"
        assert last_in_partition.get(m.partition(), -1) < i, "per-partition order broken"
        last_in_partition[m.partition()] = i


def test_null_key_empty_value_and_large_message(broker, topic):
    big = bytes(i % 251 for i in range(600_000))
    msgs = [{"key": None, "value": b"no key"}, {"key": b"k", "value": b""},
            {"key": b"k", "value": None}, {"key": b"big", "value": big}]
    reports = produce_all(broker.address, topic, msgs, {"compression.type": "none"})
    assert not [r for r in reports if r[1] is not None], reports
    got, cerrs, _ = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert [(m.key(), m.value()) for m in got] == [(None, b"no key"), (b"k", b""), (b"k", None), (b"big", big)]


# ---------------------------------------------------------------------------- admin

def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address, "socket.timeout.ms": 10000})


def topic_names(admin: AdminClient) -> set[str]:
    # list_topics() with no topic = Metadata for all topics (never auto-creates).
    return set(admin.list_topics(timeout=10).topics)


def describe_topic_configs(admin: AdminClient, topic: str) -> dict:
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)


def test_admin_create_describe_alter_partitions_delete(broker, topic):
    admin = admin_for(broker)
    fs = admin.create_topics(
        [NewTopic(topic, num_partitions=3, replication_factor=1,
                  config={"retention.ms": "3600000", "cleanup.policy": "delete"})],
        operation_timeout=10, request_timeout=15)
    fs[topic].result(timeout=15)

    md = admin.list_topics(timeout=10)
    assert topic in md.topics, sorted(md.topics)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    for p in md.topics[topic].partitions.values():
        assert p.leader == 1 and p.replicas == [1] and p.isrs == [1], p

    # Creating it again is an error: TOPIC_ALREADY_EXISTS.
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)],
                            operation_timeout=10)[topic].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS, ei.value

    configs = describe_topic_configs(admin, topic)
    assert configs, "describe_configs returned no entries"
    assert "retention.ms" in configs, sorted(configs)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "delete"

    # IncrementalAlterConfigs SET, then describe again.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=10)[res].result(timeout=15)
    assert describe_topic_configs(admin, topic)["retention.ms"].value == "7200000"

    # CreatePartitions 3 -> 5.
    admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=10)[topic].result(timeout=15)
    assert sorted(admin.list_topics(timeout=10).topics[topic].partitions) == [0, 1, 2, 3, 4]

    # DeleteTopics, then it is gone from the full topic list.
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=15)
    assert topic not in topic_names(admin)


def test_admin_describe_configs_default_topic(broker, topic):
    """An auto-created topic describes with its (default) retention.ms."""
    produce_all(broker.address, topic, [{"value": b"x"}])
    configs = describe_topic_configs(admin_for(broker), topic)
    assert configs
    assert "retention.ms" in configs, sorted(configs)
    assert int(configs["retention.ms"].value) != 0


def test_admin_delete_unknown_topic_fails(broker):
    admin = admin_for(broker)
    with pytest.raises(KafkaException) as ei:
        admin.delete_topics(["no-such-topic-xyz"], operation_timeout=10)["no-such-topic-xyz"].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART, ei.value


def test_admin_describe_cluster(broker):
    admin = admin_for(broker)  # keep a reference: the handle must outlive the future
    res = admin.describe_cluster(request_timeout=10).result(timeout=15)
    assert [(n.id, n.host, n.port) for n in res.nodes] == [(1, "127.0.0.1", broker.port)]
    assert res.controller is not None and res.controller.id == 1
    assert res.cluster_id


def test_admin_delete_records_and_list_offsets(broker, topic):
    n = 20
    produce_all(broker.address, topic, [{"value": f"{i}".encode()} for i in range(n)])
    admin = admin_for(broker)
    tp = TopicPartition(topic, 0)

    def offset(spec):
        return admin.list_offsets({tp: spec}, request_timeout=10)[tp].result(timeout=15).offset

    assert offset(OffsetSpec.earliest()) == 0
    assert offset(OffsetSpec.latest()) == n

    deleted = admin.delete_records([TopicPartition(topic, 0, 7)], request_timeout=10)
    (fut,) = deleted.values()
    assert fut.result(timeout=15).low_watermark == 7
    assert offset(OffsetSpec.earliest()) == 7

    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert wm == {0: (7, n)}
    assert [m.offset() for m in got] == list(range(7, n))
    assert [m.value() for m in got] == [f"{i}".encode() for i in range(7, n)]


# ---------------------------------------------------------------------------- more Kafka semantics

def test_offsets_for_times_and_max_timestamp(broker, topic):
    """ListOffsets by timestamp (consumer offsets_for_times, admin OffsetSpec.for_timestamp)
    and OffsetSpec.max_timestamp (ListOffsets v7, timestamp -3)."""
    # Recent, so that no retention pass (7 days) deletes them between produce and lookup.
    base = int(time.time() * 1000) - 200_000
    # Timestamps go up by 1 s each, except the max is in the middle (offset 6).
    tss = [base + i * 1000 for i in range(10)]
    tss[6] = base + 100_000
    reports = produce_all(broker.address, topic, [{"value": b"%d" % i, "timestamp": ts} for i, ts in enumerate(tss)])
    assert [r[3] for r in reports] == list(range(10))

    from ck import new_consumer
    c = new_consumer(broker.address)
    try:
        res = c.offsets_for_times([TopicPartition(topic, 0, base + 2500)], timeout=10)
        assert res[0].error is None and res[0].offset == 3, res
        res = c.offsets_for_times([TopicPartition(topic, 0, base + 200_000)], timeout=10)
        assert res[0].offset == -1, f"no record at/after that time: expected offset -1 (end), got {res}"
    finally:
        c.close()

    admin = admin_for(broker)
    tp = TopicPartition(topic, 0)
    r = admin.list_offsets({tp: OffsetSpec.for_timestamp(base + 4000)}, request_timeout=10)[tp].result(timeout=15)
    assert r.offset == 4, r
    r = admin.list_offsets({tp: OffsetSpec.max_timestamp()}, request_timeout=10)[tp].result(timeout=15)
    assert (r.offset, r.timestamp) == (6, base + 100_000), (r.offset, r.timestamp)


def test_message_larger_than_max_message_bytes_is_rejected(broker, topic):
    """A 2 MB record batch is over the default max.message.bytes (1048588): the broker must
    answer MESSAGE_TOO_LARGE rather than store it."""
    produce_all(broker.address, topic, [{"value": b"small"}])
    cfg = describe_topic_configs(admin_for(broker), topic)
    limit = int(cfg["max.message.bytes"].value) if "max.message.bytes" in cfg else 1048588
    big = bytes((i * 7919) % 256 for i in range(limit + 1_000_000))
    reports = produce_all(broker.address, topic, [{"value": big}],
                          {"message.max.bytes": 10_000_000, "compression.type": "none",
                           "message.send.max.retries": 0})
    (_, err, _, _), = reports
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, f"expected MSG_SIZE_TOO_LARGE, got {err}"
    got, cerrs, wm = consume_all(broker.address, topic)
    assert wm == {0: (0, 1)}, wm
    assert [m.value() for m in got] == [b"small"]


def test_delete_then_recreate_topic_starts_empty(broker, topic):
    produce_all(broker.address, topic, [{"value": b"old-%d" % i} for i in range(5)])
    admin = admin_for(broker)
    admin.delete_topics([topic], operation_timeout=10)[topic].result(timeout=15)
    assert topic not in topic_names(admin)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)
    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert wm == {0: (0, 0), 1: (0, 0)}, f"recreated topic still has old data: {wm}"
    reports = produce_all(broker.address, topic, [{"value": b"new", "partition": 0}])
    assert reports[0][1] is None and reports[0][3] == 0
    got, _, _ = consume_all(broker.address, topic)
    assert [m.value() for m in got] == [b"new"]


def test_describe_broker_configs(broker):
    admin = admin_for(broker)
    res = ConfigResource(ResourceType.BROKER, "1")
    configs = admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)
    assert configs, "broker 1 has no configs"


def test_one_producer_many_topics(broker, topic):
    topics = [f"{topic}-{j}" for j in range(3)]
    msgs_by_topic = {t: [] for t in topics}
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.address, "linger.ms": 20, "message.timeout.ms": 20000})
    errors = []
    for i in range(90):
        t = topics[i % 3]
        v = f"{t}:{i}".encode()
        msgs_by_topic[t].append(v)
        p.produce(t, value=v, on_delivery=lambda err, msg: err and errors.append(err))
    assert p.flush(30) == 0
    assert not errors, errors
    for t in topics:
        got, cerrs, _ = consume_all(broker.address, t)
        assert not cerrs
        assert [m.value() for m in got] == msgs_by_topic[t]


def test_consumer_sees_records_produced_after_it_started(broker, topic):
    """Live tail: a consumer waiting at the log end receives new records (Fetch max wait)."""
    import threading
    from ck import new_consumer
    produce_all(broker.address, topic, [{"value": b"first"}])
    c = new_consumer(broker.address)
    try:
        c.assign([TopicPartition(topic, 0, 1)])
        t = threading.Timer(1.0, lambda: produce_all(broker.address, topic,
                                                      [{"value": b"live-%d" % i} for i in range(5)]))
        t.start()
        got, deadline = [], time.monotonic() + 15
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
        t.join(20)
    finally:
        c.close()
    assert got == [b"live-%d" % i for i in range(5)]


def test_out_of_range_offset_resets_to_earliest(broker, topic):
    produce_all(broker.address, topic, [{"value": b"%d" % i} for i in range(20)])
    admin = admin_for(broker)
    (fut,) = admin.delete_records([TopicPartition(topic, 0, 10)], request_timeout=10).values()
    assert fut.result(timeout=15).low_watermark == 10
    from ck import new_consumer
    c = new_consumer(broker.address, {"auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 3)])  # below the log start offset: OFFSET_OUT_OF_RANGE
        first, deadline = None, time.monotonic() + 15
        while first is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                first = m
    finally:
        c.close()
    assert first is not None, "no record after the out-of-range reset"
    assert (first.offset(), first.value()) == (10, b"10")


def test_consumer_metadata_does_not_auto_create(broker):
    """Metadata with allow_auto_topic_creation=false (every consumer) must not create topics."""
    from ck import new_consumer
    c = new_consumer(broker.address)
    try:
        md = c.list_topics("ghost-topic", timeout=10)
        t = md.topics.get("ghost-topic")
        assert t is not None and t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART, t and t.error
    finally:
        c.close()
    assert "ghost-topic" not in topic_names(admin_for(broker))


@pytest.mark.timeout(45)
def test_subscribe_with_consumer_group(broker, topic):
    produce_all(broker.address, topic, [{"value": b"g%d" % i} for i in range(5)])
    from ck import new_consumer
    c = new_consumer(broker.address, {"session.timeout.ms": 6000})
    got = []
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 12
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                got.append(m.value())
    finally:
        c.close()
    assert got == [b"g%d" % i for i in range(5)]


def test_acks0_producer(broker, topic):
    """acks=0: the broker must not answer Produce (a stray response desyncs the client)."""
    n = 300
    reports = produce_all(broker.address, topic, [{"value": b"%d" % i} for i in range(n)],
                          {"acks": 0, "linger.ms": 5})
    assert [r[1] for r in reports] == [None] * n

    def all_there():
        got, cerrs, wm = consume_all(broker.address, topic, timeout=10)
        return not cerrs and [m.value() for m in got] == [b"%d" % i for i in range(n)]
    from tern_harness import wait_until
    wait_until(all_there, timeout=20, interval=0.5, what=f"all {n} acks=0 records readable")


def test_ten_thousand_records_in_few_batches(broker, topic):
    n = 10_000
    reports = produce_all(broker.address, topic, [{"value": b"r%05d" % i} for i in range(n)],
                          {"compression.type": "zstd", "linger.ms": 100, "batch.num.messages": 10000,
                           "batch.size": 4_000_000})
    assert not [r for r in reports if r[1] is not None]
    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert wm == {0: (0, n)}
    assert [m.value() for m in got] == [b"r%05d" % i for i in range(n)]


def test_null_header_value(broker, topic):
    produce_all(broker.address, topic, [{"value": b"v", "headers": [("nullh", None), ("e", b"")]}])
    got, cerrs, _ = consume_all(broker.address, topic)
    assert not cerrs
    assert got[0].headers() == [("nullh", None), ("e", b"")]


def test_log_append_time_topic(broker, topic):
    """message.timestamp.type=LogAppendTime: the broker stamps records with its own clock."""
    admin = admin_for(broker)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                  config={"message.timestamp.type": "LogAppendTime"})],
                        operation_timeout=10)[topic].result(timeout=15)
    before = int(time.time() * 1000)
    produce_all(broker.address, topic, [{"value": b"x", "timestamp": FIXED_TS}])
    after = int(time.time() * 1000)
    got, cerrs, _ = consume_all(broker.address, topic)
    assert not cerrs
    from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
    ts_type, ts = got[0].timestamp()
    assert ts_type == TIMESTAMP_LOG_APPEND_TIME, f"timestamp type {ts_type}, ts {ts}"
    assert before - 5000 <= ts <= after + 5000, ts


def _create_error(admin, new_topic, **kwargs):
    with pytest.raises(KafkaException) as ei:
        admin.create_topics([new_topic], operation_timeout=10, **kwargs)[new_topic.topic].result(timeout=15)
    return ei.value.args[0].code()


def test_admin_error_paths(broker, topic):
    admin = admin_for(broker)
    # validate_only creates nothing.
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)],
                        operation_timeout=10, validate_only=True)[topic].result(timeout=15)
    assert topic not in topic_names(admin), "validate_only=True created the topic"
    # One broker: replication factor 3 is impossible.
    assert _create_error(admin, NewTopic(topic, num_partitions=1, replication_factor=3)) == \
        KafkaError.INVALID_REPLICATION_FACTOR
    # Illegal topic name.
    bad = NewTopic("bad/name", num_partitions=1, replication_factor=1)
    assert _create_error(admin, bad) == KafkaError.TOPIC_EXCEPTION
    # Bad config value.
    assert _create_error(admin, NewTopic(topic, num_partitions=1, replication_factor=1,
                                         config={"retention.ms": "not-a-number"})) == KafkaError.INVALID_CONFIG
    assert topic not in topic_names(admin), "a failed create left the topic behind"
    # Partition count can only grow.
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)
    with pytest.raises(KafkaException) as ei:
        admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=10)[topic].result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.INVALID_PARTITIONS, ei.value
    assert sorted(admin.list_topics(timeout=10).topics[topic].partitions) == [0, 1, 2]


def test_batch_larger_than_segment_is_rejected_with_record_list_too_large(broker, topic):
    """A batch bigger than the topic's segment.bytes cannot be appended: Kafka answers
    RECORD_LIST_TOO_LARGE (18) (UnifiedLog.append: RecordBatchTooLargeException)."""
    admin = admin_for(broker)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                  config={"internal.segment.bytes": "16384"})],
                        operation_timeout=10)[topic].result(timeout=15)
    reports = produce_all(broker.address, topic, [{"value": b"z" * 40_000}],
                          {"compression.type": "none", "message.send.max.retries": 0})
    (_, err, _, _), = reports
    assert err is not None and err.code() == KafkaError.RECORD_LIST_TOO_LARGE, \
        f"expected RECORD_LIST_TOO_LARGE, got {err}"
    # Batches that fit are fine, and roll segments.
    ok = produce_all(broker.address, topic, [{"value": b"%05d" % i + b"y" * 1000} for i in range(100)],
                     {"batch.size": 8000})
    assert [r[1] for r in ok] == [None] * 100
    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs and wm == {0: (0, 100)}
    assert [m.value()[:5] for m in got] == [b"%05d" % i for i in range(100)]


def test_record_larger_than_max_partition_fetch_bytes_is_still_returned(broker, topic):
    """KIP-74: the first batch is returned even when it exceeds the fetch size limits,
    so a consumer with default max.partition.fetch.bytes (1 MiB) can read a 2 MB record."""
    admin = admin_for(broker)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1,
                                  config={"max.message.bytes": "5000000"})],
                        operation_timeout=10)[topic].result(timeout=15)
    big = bytes((i * 31) % 256 for i in range(2_000_000))
    reports = produce_all(broker.address, topic, [{"value": b"before"}, {"value": big}, {"value": b"after"}],
                          {"message.max.bytes": 5_000_000, "compression.type": "none", "linger.ms": 0})
    assert [r[1] for r in reports] == [None] * 3, reports
    got, cerrs, wm = consume_all(broker.address, topic)
    assert not cerrs, [str(e) for e in cerrs]
    assert [m.value() for m in got] == [b"before", big, b"after"]
