"""kafka-python (pure Python client) KafkaProducer / KafkaConsumer / KafkaAdminClient
against tern. Consumers have no group_id: assign() + seek_to_beginning()."""

from __future__ import annotations

import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource
from kafka.codec import has_lz4, has_snappy, has_zstd
from kafka.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
HAS = {None: True, "gzip": True, "snappy": has_snappy(), "lz4": has_lz4(), "zstd": has_zstd()}
FIXED_TS = 1_700_000_000_456
CREATE_TIME = 0


def producer(addr: str, **config) -> KafkaProducer:
    # Client defaults (kafka-python 3.x: enable_idempotence=True, acks=all), bounded timeouts.
    return KafkaProducer(bootstrap_servers=addr, request_timeout_ms=10000, max_block_ms=20000,
                         delivery_timeout_ms=30000, **config)


def consume_all(addr: str, topic: str, timeout: float = 30.0, partitions=None):
    """assign() every partition, seek_to_beginning(), poll up to the end offsets."""
    c = KafkaConsumer(bootstrap_servers=addr, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=10000,
                      consumer_timeout_ms=1000, check_crcs=True)
    try:
        if partitions is None:
            deadline = time.monotonic() + 10
            parts = None
            while time.monotonic() < deadline:
                parts = c.partitions_for_topic(topic)
                if parts:
                    break
                time.sleep(0.2)
            assert parts, f"no partitions known for {topic}"
            partitions = sorted(parts)
        tps = [TopicPartition(topic, p) for p in partitions]
        c.assign(tps)
        c.seek_to_beginning()
        begin = c.beginning_offsets(tps, timeout_ms=10000)
        end = c.end_offsets(tps, timeout_ms=10000)
        records = []
        pos = {tp: begin[tp] for tp in tps}
        deadline = time.monotonic() + timeout
        while any(pos[tp] < end[tp] for tp in tps) and time.monotonic() < deadline:
            batch = c.poll(timeout_ms=500)
            for tp, recs in batch.items():
                for r in recs:
                    records.append(r)
                    pos[tp] = r.offset + 1
        return records, {tp.partition: (begin[tp], end[tp]) for tp in tps}
    finally:
        c.close(autocommit=False)


def make_messages(n, tag):
    return [dict(
        key=f"key-{i % 5}".encode(),
        value=f"{tag} message {i} ".encode() + b"p" * (i % 113),
        headers=[("h", f"v{i}".encode()), ("trace-id", f"t-{i}".encode())],
        timestamp_ms=FIXED_TS + i if i % 10 == 3 else None,
    ) for i in range(n)]


def roundtrip(addr, topic, n=60, tag="kp", **producer_config):
    msgs = make_messages(n, tag)
    p = producer(addr, **producer_config)
    before = int(time.time() * 1000)
    try:
        futures = [p.send(topic, **{k: v for k, v in m.items() if v is not None}) for m in msgs]
        p.flush(timeout=30)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)
    after = int(time.time() * 1000)
    assert [(m.partition, m.offset) for m in metas] == [(0, i) for i in range(n)]

    records, wm = consume_all(addr, topic)
    assert wm == {0: (0, n)}, wm
    assert len(records) == n, f"read {len(records)} of {n}"
    for i, (r, m) in enumerate(zip(records, msgs)):
        assert r.offset == i
        assert r.key == m["key"], i
        assert r.value == m["value"], i
        assert list(r.headers) == m["headers"], (i, r.headers)
        assert r.timestamp_type == CREATE_TIME, (i, r.timestamp_type)
        if m["timestamp_ms"] is not None:
            assert r.timestamp == m["timestamp_ms"], (i, r.timestamp)
        else:
            assert before - 5000 <= r.timestamp <= after + 5000, (i, r.timestamp)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c or "none")
def test_default_producer_each_codec(broker, topic, codec):
    if not HAS[codec]:
        pytest.fail(f"kafka-python has no {codec} codec installed (see compat/requirements.txt)")
    roundtrip(broker.address, topic, compression_type=codec, tag=f"default-{codec}")


@pytest.mark.parametrize("codec", [None, "zstd"], ids=lambda c: c or "none")
def test_non_idempotent_acks1_producer(broker, topic, codec):
    """The pre-3.0 defaults: no idempotence, acks=1."""
    roundtrip(broker.address, topic, enable_idempotence=False, acks=1, compression_type=codec,
              tag=f"acks1-{codec}")


def test_many_batches_in_order(broker, topic):
    n = 3000
    p = producer(broker.address, linger_ms=2, batch_size=2048)
    try:
        futures = [p.send(topic, key=b"k", value=f"{i:06d}".encode()) for i in range(n)]
        p.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futures]
    finally:
        p.close(timeout=10)
    assert offsets == list(range(n))
    records, wm = consume_all(broker.address, topic)
    assert wm == {0: (0, n)}
    assert [r.value for r in records] == [f"{i:06d}".encode() for i in range(n)]


# ---------------------------------------------------------------------------- admin

def admin_for(broker) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=broker.address, request_timeout_ms=10000)


def test_admin_create_describe_partitions_delete(broker, topic):
    admin = admin_for(broker)
    try:
        admin.create_topics({topic: {"num_partitions": 2, "replication_factor": 1,
                                     "configs": {"retention.ms": "3600000"}}},
                            timeout_ms=10000, wait_for_metadata=True)
        assert topic in admin.list_topics()
        (desc,) = admin.describe_topics([topic])
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1], desc

        with pytest.raises(TopicAlreadyExistsError):
            admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}}, timeout_ms=10000)

        configs = admin.describe_configs([ConfigResource("TOPIC", topic)], config_filter="all")
        topic_configs = configs["topic"][topic]
        assert topic_configs, configs
        assert topic_configs["retention.ms"]["value"] == "3600000", topic_configs.get("retention.ms")

        admin.create_partitions({topic: 4}, timeout_ms=10000)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            (desc,) = admin.describe_topics([topic])
            if len(desc["partitions"]) == 4:
                break
            time.sleep(0.2)
        assert sorted(p["partition_index"] for p in desc["partitions"]) == [0, 1, 2, 3], desc

        admin.delete_topics([topic], timeout_ms=10000)
        assert topic not in admin.list_topics()

        with pytest.raises(UnknownTopicOrPartitionError):
            admin.delete_topics([topic], timeout_ms=10000)
    finally:
        admin.close()


def test_admin_created_topic_usable_by_producer_and_consumer(broker, topic):
    admin = admin_for(broker)
    try:
        admin.create_topics({topic: {"num_partitions": 3, "replication_factor": 1}},
                            timeout_ms=10000, wait_for_metadata=True)
    finally:
        admin.close()
    p = producer(broker.address)
    try:
        futures = [p.send(topic, key=f"k{i % 11}".encode(), value=str(i).encode()) for i in range(90)]
        p.flush(timeout=30)
        where = {i: (f.get(timeout=30).partition, f.get(timeout=30).offset) for i, f in enumerate(futures)}
    finally:
        p.close(timeout=10)
    records, wm = consume_all(broker.address, topic)
    assert sum(h - lo for lo, h in wm.values()) == 90, wm
    assert sorted(int(r.value) for r in records) == list(range(90))
    for r in records:
        assert (r.partition, r.offset) == where[int(r.value)]


def test_admin_alter_and_filtered_describe_configs(broker, topic):
    from kafka.admin import AlterConfigOp
    admin = admin_for(broker)
    try:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                            timeout_ms=10000, wait_for_metadata=True)

        def describe(keys=None):
            return admin.describe_configs([ConfigResource("TOPIC", topic, configs=keys)],
                                          config_filter="all")["topic"][topic]

        everything = describe()
        assert "retention.ms" in everything and len(everything) > 1, everything
        default_retention = everything["retention.ms"]["value"]
        # Asking for one key returns just that key (DescribeConfigs configuration_keys).
        assert set(describe(["retention.ms"])) == {"retention.ms"}

        # IncrementalAlterConfigs SET, then DELETE reverts to the default.
        admin.alter_configs([ConfigResource("TOPIC", topic, configs={"retention.ms": "7777777"})],
                            incremental=True)
        assert describe(["retention.ms"])["retention.ms"]["value"] == "7777777"
        admin.alter_configs([ConfigResource("TOPIC", topic,
                                            configs={"retention.ms": (AlterConfigOp.DELETE, None)})],
                            incremental=True)
        assert describe(["retention.ms"])["retention.ms"]["value"] == default_retention

        # Legacy AlterConfigs (non-incremental) sets the value too.
        admin.alter_configs([ConfigResource("TOPIC", topic, configs={"retention.ms": "8888888"})],
                            incremental=False)
        assert describe(["retention.ms"])["retention.ms"]["value"] == "8888888"
    finally:
        admin.close()


def test_offsets_for_times(broker, topic):
    # Recent, so that no retention pass (7 days) deletes them between produce and lookup.
    base = int(time.time() * 1000) - 200_000
    p = producer(broker.address)
    try:
        futures = [p.send(topic, value=b"%d" % i, timestamp_ms=base + i * 1000) for i in range(10)]
        p.flush(timeout=30)
        assert [f.get(timeout=30).offset for f in futures] == list(range(10))
    finally:
        p.close(timeout=10)
    c = KafkaConsumer(bootstrap_servers=broker.address, group_id=None, enable_auto_commit=False,
                      request_timeout_ms=10000)
    try:
        tp = TopicPartition(topic, 0)
        res = c.offsets_for_times({tp: base + 2500}, timeout_ms=10000)
        assert res[tp] is not None and res[tp].offset == 3 and res[tp].timestamp == base + 3000, res
        res = c.offsets_for_times({tp: base + 999_999}, timeout_ms=10000)
        assert res[tp] is None, res
    finally:
        c.close(autocommit=False)
