"""Broker configs (DescribeConfigs / AlterConfigs / IncrementalAlterConfigs on BROKER
resources, KIP-226) and the protection of __consumer_offsets, with confluent-kafka
(librdkafka) and, for the cluster-wide default resource "" that librdkafka cannot name,
raw requests (raw_configs.py).

Kafka's precedence for a broker-level value: dynamic per-broker (source 2), dynamic
cluster default (3), static (4), default (5); a topic override (1) beats them all.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

import raw_configs as raw
from ck import produce_all
from tern_harness import wait_until

OFFSETS = "__consumer_offsets"
INVALID_REQUEST, INVALID_CONFIG = 42, 40
STATIC_RETENTION = "86400000"
BUILTIN_RETENTION = "604800000"


def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address, "socket.timeout.ms": 10000})


def describe(admin: AdminClient, rtype, name: str) -> dict:
    res = ConfigResource(rtype, name)
    return admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)


def incremental(admin: AdminClient, rtype, name: str, ops: list[tuple[str, AlterConfigOpType, str | None]]):
    """Returns None on success, else the KafkaError."""
    entries = [ConfigEntry(n, v, incremental_operation=op) for n, op, v in ops]
    res = ConfigResource(rtype, name, incremental_configs=entries)
    try:
        admin.incremental_alter_configs([res], request_timeout=10)[res].result(timeout=15)
        return None
    except KafkaException as e:
        return e.args[0]


def legacy_alter(admin: AdminClient, rtype, name: str, configs: dict[str, str]):
    res = ConfigResource(rtype, name, set_config=configs)
    try:
        admin.alter_configs([res], request_timeout=10)[res].result(timeout=15)
        return None
    except KafkaException as e:
        return e.args[0]


def create_topic(admin: AdminClient, name: str, config: dict | None = None) -> None:
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config or {})],
                        operation_timeout=10)[name].result(timeout=15)


def value_and_source(configs: dict, name: str) -> tuple[str, ConfigSource]:
    return configs[name].value, ConfigSource(configs[name].source)


@pytest.mark.broker_args("--log-retention-ms", STATIC_RETENTION)
def test_describe_broker_lists_every_config_with_its_source_and_read_only_flag(broker):
    admin = admin_for(broker)
    configs = describe(admin, ResourceType.BROKER, "1")
    # Read-only settings, at their built-in value or as the operator set them.
    assert configs["num.partitions"].is_read_only
    assert value_and_source(configs, "num.partitions") == ("1", ConfigSource.DEFAULT_CONFIG)
    # Per-broker dynamic in Kafka 4.1 (tern keeps it, and runs with its --listeners).
    assert not configs["listeners"].is_read_only
    assert value_and_source(configs, "listeners") == (f"PLAINTEXT://{broker.address}",
                                                      ConfigSource.STATIC_BROKER_CONFIG)
    assert configs["broker.id"].value == "1"
    for name in ("offsets.topic.num.partitions", "group.min.session.timeout.ms", "socket.request.max.bytes",
                 "auto.create.topics.enable", "log.dirs", "advertised.listeners"):
        assert name in configs and configs[name].is_read_only, name
    # Dynamic ones: the topic defaults and the flush interval.
    for name in ("log.retention.ms", "log.retention.bytes", "log.segment.bytes", "log.roll.ms",
                 "message.max.bytes", "min.insync.replicas", "log.cleanup.policy", "log.flush.interval.ms"):
        assert name in configs and not configs[name].is_read_only, name
    assert value_and_source(configs, "log.retention.ms") == (STATIC_RETENTION, ConfigSource.STATIC_BROKER_CONFIG)
    assert value_and_source(configs, "log.segment.bytes") == ("1073741824", ConfigSource.DEFAULT_CONFIG)
    # Kafka's other dynamic configs are described too, even those tern only stores.
    assert value_and_source(configs, "log.cleaner.threads") == ("1", ConfigSource.DEFAULT_CONFIG)
    assert not configs["log.cleaner.threads"].is_read_only
    # Synonyms, in Kafka's order.
    described = raw.describe(broker.address, raw.BROKER, "1", ["log.retention.ms"])
    assert described.error_code == 0
    assert described.configs["log.retention.ms"].synonyms == [
        ("log.retention.ms", STATIC_RETENTION, 4), ("log.retention.ms", BUILTIN_RETENTION, 5)]
    # The default resource lists only dynamic defaults that are set: none yet.
    described = raw.describe(broker.address, raw.BROKER, "")
    assert (described.error_code, described.configs) == (0, {})
    # Another broker's id is Kafka's INVALID_REQUEST.
    assert raw.describe(broker.address, raw.BROKER, "7").error_code == INVALID_REQUEST


@pytest.mark.broker_args("--log-retention-ms", STATIC_RETENTION)
def test_dynamic_retention_overrides_static_applies_to_topics_without_override_and_survives_restart(broker, topic):
    admin = admin_for(broker)
    plain, pinned = f"{topic}-plain", f"{topic}-over"
    create_topic(admin, plain)
    create_topic(admin, pinned, {"retention.ms": "1234567"})
    assert value_and_source(describe(admin, ResourceType.TOPIC, plain), "retention.ms") == (
        STATIC_RETENTION, ConfigSource.STATIC_BROKER_CONFIG)

    # Cluster-wide default (resource ""): beats the static flag.
    assert raw.incremental_alter(broker.address, raw.BROKER, "", [("log.retention.ms", raw.SET, "3600000")]) == (0, None)
    assert value_and_source(describe(admin, ResourceType.TOPIC, plain), "retention.ms") == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert value_and_source(describe(admin, ResourceType.TOPIC, pinned), "retention.ms") == (
        "1234567", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    described = raw.describe(broker.address, raw.BROKER, "")
    assert {n: (e.value, e.source) for n, e in described.configs.items()} == {"log.retention.ms": ("3600000", 3)}

    # Per broker: beats the default.
    assert incremental(admin, ResourceType.BROKER, "1", [("log.retention.ms", AlterConfigOpType.SET, "7200000")]) is None
    assert value_and_source(describe(admin, ResourceType.TOPIC, plain), "retention.ms") == (
        "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    synonyms = raw.describe(broker.address, raw.TOPIC, plain, ["retention.ms"]).configs["retention.ms"].synonyms
    assert synonyms == [("log.retention.ms", "7200000", 2), ("log.retention.ms", "3600000", 3),
                        ("log.retention.ms", STATIC_RETENTION, 4), ("log.retention.ms", BUILTIN_RETENTION, 5)]
    # A topic created now resolves the same way.
    later = f"{topic}-later"
    create_topic(admin, later)
    assert describe(admin, ResourceType.TOPIC, later)["retention.ms"].value == "7200000"

    # validate_only changes nothing.
    assert raw.incremental_alter(broker.address, raw.BROKER, "1", [("log.retention.ms", raw.SET, "1")],
                                 validate_only=True) == (0, None)
    assert describe(admin, ResourceType.TOPIC, plain)["retention.ms"].value == "7200000"

    # Persisted in the metadata store: a restart keeps both levels.
    broker.restart()
    admin = admin_for(broker)
    assert value_and_source(describe(admin, ResourceType.TOPIC, plain), "retention.ms") == (
        "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert value_and_source(describe(admin, ResourceType.BROKER, "1"), "log.retention.ms") == (
        "7200000", ConfigSource.DYNAMIC_BROKER_CONFIG)

    # DELETE falls back level by level.
    assert incremental(admin, ResourceType.BROKER, "1", [("log.retention.ms", AlterConfigOpType.DELETE, None)]) is None
    assert value_and_source(describe(admin, ResourceType.TOPIC, plain), "retention.ms") == (
        "3600000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert raw.incremental_alter(broker.address, raw.BROKER, "", [("log.retention.ms", raw.DELETE, None)]) == (0, None)
    assert value_and_source(describe(admin, ResourceType.TOPIC, plain), "retention.ms") == (
        STATIC_RETENTION, ConfigSource.STATIC_BROKER_CONFIG)


def segment_files(broker, topic: str) -> int:
    return len(list((broker.data_dir / f"{topic}-0").glob("*.log")))


def test_dynamic_segment_bytes_rolls_the_segments_of_an_existing_topic_without_restart(broker, topic):
    admin = admin_for(broker)
    create_topic(admin, topic)
    small_batches = {"batch.size": 16384, "linger.ms": 0}
    msgs = [{"value": b"x" * 1000} for _ in range(60)]
    assert all(e is None for _, e, _, _ in produce_all(broker.address, topic, msgs, small_batches))
    assert segment_files(broker, topic) == 1
    # Kafka 4.1's smallest segment.bytes.
    assert incremental(admin, ResourceType.BROKER, "1", [("log.segment.bytes", AlterConfigOpType.SET, "1048576")]) is None
    assert value_and_source(describe(admin, ResourceType.TOPIC, topic), "segment.bytes") == (
        "1048576", ConfigSource.DYNAMIC_BROKER_CONFIG)
    more = [{"value": b"x" * 1000} for _ in range(3200)]
    assert all(e is None for _, e, _, _ in produce_all(broker.address, topic, more, small_batches))
    # 3.2 MB more in 1 MiB segments: the active segment rolled at least three times.
    assert segment_files(broker, topic) >= 4, sorted((broker.data_dir / f"{topic}-0").iterdir())


def test_read_only_unknown_and_invalid_broker_configs_are_refused_with_invalid_request(broker):
    admin = admin_for(broker)
    for name, value in [("num.partitions", "3"), ("no.such.config", "2"), ("log.retention.ms", "soon"),
                        ("sasl.kerberos.min.time.before.relogin", "soon"), ("log.cleanup.policy", "shred")]:
        err = incremental(admin, ResourceType.BROKER, "1", [(name, AlterConfigOpType.SET, value)])
        assert err is not None and err.code() == KafkaError.INVALID_REQUEST, (name, err)
    err = incremental(admin, ResourceType.BROKER, "1", [("num.partitions", AlterConfigOpType.SET, "3")])
    assert "Cannot update these configs dynamically" in err.str(), err.str()
    err = legacy_alter(admin, ResourceType.BROKER, "1", {"num.partitions": "3"})
    assert err is not None and err.code() == KafkaError.INVALID_REQUEST, err
    # Each broker alters only its own configs.
    code, message = raw.incremental_alter(broker.address, raw.BROKER, "2", [("log.retention.ms", raw.SET, "1000")])
    assert code == INVALID_REQUEST and "Unexpected broker id" in message, message
    configs = describe(admin, ResourceType.BROKER, "1")
    assert value_and_source(configs, "num.partitions") == ("1", ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs, "log.retention.ms") == (BUILTIN_RETENTION, ConfigSource.DEFAULT_CONFIG)

    # The legacy AlterConfigs replaces the whole level.
    assert legacy_alter(admin, ResourceType.BROKER, "1", {"log.retention.ms": "5000"}) is None
    assert value_and_source(describe(admin, ResourceType.BROKER, "1"), "log.retention.ms") == (
        "5000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert legacy_alter(admin, ResourceType.BROKER, "1", {"log.roll.ms": "3600000"}) is None
    configs = describe(admin, ResourceType.BROKER, "1")
    assert value_and_source(configs, "log.retention.ms") == (BUILTIN_RETENTION, ConfigSource.DEFAULT_CONFIG)
    assert value_and_source(configs, "log.roll.ms") == ("3600000", ConfigSource.DYNAMIC_BROKER_CONFIG)


def test_the_offsets_topic_describes_its_real_settings_and_refuses_what_would_break_it(broker, topic):
    admin = admin_for(broker)
    configs = describe(admin, ResourceType.TOPIC, OFFSETS)
    assert value_and_source(configs, "cleanup.policy") == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert configs["retention.ms"].value == "-1"
    assert configs["retention.bytes"].value == "-1"
    assert configs["compression.type"].value == "producer"
    for ops in ([("cleanup.policy", AlterConfigOpType.SET, "delete")],
                [("cleanup.policy", AlterConfigOpType.DELETE, None)],
                [("retention.ms", AlterConfigOpType.SET, "1000")],
                [("retention.bytes", AlterConfigOpType.SET, "1048576")]):
        err = incremental(admin, ResourceType.TOPIC, OFFSETS, ops)
        assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (ops, err)
        assert "committed offsets" in err.str(), err.str()
    err = legacy_alter(admin, ResourceType.TOPIC, OFFSETS, {"retention.ms": "1000"})
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err
    assert describe(admin, ResourceType.TOPIC, OFFSETS)["cleanup.policy"].value == "compact"
    # DeleteRecords on it: Kafka's INVALID_TOPIC_EXCEPTION.
    tp = TopicPartition(OFFSETS, 0, 0)
    with pytest.raises(KafkaException) as info:
        admin.delete_records([tp], request_timeout=10)[tp].result(timeout=15)
    assert info.value.args[0].code() == KafkaError.TOPIC_EXCEPTION, info.value
    # A user topic may turn compaction on; a policy Kafka does not know is refused.
    create_topic(admin, topic)
    assert incremental(admin, ResourceType.TOPIC, topic, [("cleanup.policy", AlterConfigOpType.SET, "compact")]) is None
    assert value_and_source(describe(admin, ResourceType.TOPIC, topic), "cleanup.policy") == (
        "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    err = incremental(admin, ResourceType.TOPIC, topic, [("cleanup.policy", AlterConfigOpType.SET, "shred")])
    assert err is not None and err.code() == KafkaError.INVALID_CONFIG, err


def offsets_partition_of(group: str, partitions: int = 50) -> int:
    """Kafka's placement of a group on __consumer_offsets: abs(hashCode) % partitions."""
    h = 0
    for ch in group:  # ASCII group ids: one UTF-16 unit each
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def committed(address: str, group: str, partitions: list[TopicPartition]) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": address, "group.id": group, "enable.auto.commit": False})
    try:
        return {tp.partition: tp.offset for tp in c.committed(partitions, timeout=15)}
    finally:
        c.close()


def low_watermark(address: str, topic: str, partition: int) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": address, "group.id": "tern-watermarks"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


@pytest.mark.broker_args("--log-retention-check-interval-ms", "200", "--log-retention-bytes", "1")
def test_retention_never_ages_out_committed_offsets(broker, topic):
    """A tiny broker-wide retention (static size, dynamic time) empties a user topic but
    deletes nothing of __consumer_offsets, even in many small segments: the first commit
    is still there after a restart."""
    admin = admin_for(broker)
    admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)],
                        operation_timeout=10)[topic].result(timeout=15)
    assert all(e is None for _, e, _, _ in produce_all(broker.address, topic, [{"value": b"v", "partition": 0}] * 5))
    # Small offsets segments, so that retention would have whole segments to delete.
    assert incremental(admin, ResourceType.TOPIC, OFFSETS, [("internal.segment.bytes", AlterConfigOpType.SET, "1024")]) is None
    group = f"{topic}-g"
    c = Consumer({"bootstrap.servers": broker.address, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
        for i in range(40):
            c.commit(offsets=[TopicPartition(topic, 1, 100 + i)], asynchronous=False)
    finally:
        c.close()
    offsets_partition = offsets_partition_of(group)
    assert low_watermark(broker.address, OFFSETS, offsets_partition)[1] >= 41
    assert len(list((broker.data_dir / f"{OFFSETS}-{offsets_partition}").glob("*.log"))) >= 4
    # Everything becomes too old for the cluster-wide default.
    assert raw.incremental_alter(broker.address, raw.BROKER, "", [("log.retention.ms", raw.SET, "1")]) == (0, None)
    wait_until(lambda: low_watermark(broker.address, topic, 0) == (5, 5), 10, what="retention of the user topic")
    # Two more retention rounds, each seen deleting a fresh record of partition 2: a round
    # goes over every partition, so the offsets partition has been through a whole one.
    for _ in range(2):
        ((_, err, _, offset),) = produce_all(broker.address, topic, [{"value": b"w", "partition": 2}])
        assert err is None, err
        wait_until(lambda: low_watermark(broker.address, topic, 2)[0] > offset, 10,
                   interval=0.05, what=f"retention deleting offset {offset} of partition 2")
    assert low_watermark(broker.address, OFFSETS, offsets_partition)[0] == 0
    parts = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    assert committed(broker.address, group, parts) == {0: 5, 1: 139}
    broker.restart()
    assert committed(broker.address, group, parts) == {0: 5, 1: 139}
    assert low_watermark(broker.address, OFFSETS, offsets_partition)[0] == 0


def test_kafka_python_sees_dynamic_configs_as_dynamic_and_alters_them(broker, topic):
    """kafka-python's admin client checks names against DescribeConfigs' read-only flags
    (config_filter='dynamic') before altering, and reads sources and synonyms back."""
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource

    kp = KafkaAdminClient(bootstrap_servers=broker.address, request_timeout_ms=10000)
    try:
        dynamic = kp.describe_configs([KpResource("BROKER", "1")], config_filter="dynamic")["broker"]["1"]
        assert {"log.retention.ms", "log.segment.bytes", "message.max.bytes"} <= set(dynamic), sorted(dynamic)
        assert "num.partitions" not in dynamic and "broker.id" not in dynamic, sorted(dynamic)
        result = kp.alter_configs([KpResource("BROKER", "1", configs={"log.retention.ms": "3600000"})])
        assert result == {"broker": {"1": "OK"}}, result
        described = kp.describe_configs([KpResource("BROKER", "1", configs=["log.retention.ms"])],
                                        include_synonyms=True, config_filter="all")["broker"]["1"]
        entry = described["log.retention.ms"]
        assert (entry["value"], entry["config_source"]) == ("3600000", "DYNAMIC_BROKER_CONFIG"), entry
        assert [s["source"] for s in entry["synonyms"]] == ["DYNAMIC_BROKER_CONFIG", "DEFAULT_CONFIG"], entry
        # A read-only config: the client refuses it itself, and the broker too.
        with pytest.raises(ValueError):
            kp.alter_configs([KpResource("BROKER", "1", configs={"num.partitions": "3"})])
        result = kp.alter_configs([KpResource("BROKER", "1", configs={"num.partitions": "3"})],
                                  raise_on_unknown=False)
        assert "InvalidRequest" in result["broker"]["1"], result
    finally:
        kp.close()
    create_topic(admin_for(broker), topic)
    assert value_and_source(describe(admin_for(broker), ResourceType.TOPIC, topic), "retention.ms") == (
        "3600000", ConfigSource.DYNAMIC_BROKER_CONFIG)
