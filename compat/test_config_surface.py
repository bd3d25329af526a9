"""Kafka's whole config surface, driven by Kafka's own lists (data/kafka-4.1-configs.json:
every topic config of Kafka 4.1's LogConfig and every dynamic broker config of its
DynamicBrokerConfig, with types, defaults, broker synonyms, a value Kafka accepts and
values Kafka refuses).

Every name round-trips through CreateTopics, IncrementalAlterConfigs, AlterConfigs and
DescribeConfigs with a real client (confluent-kafka); the cluster-wide default resource
"" and DescribeConfigs v3's types and documentation go through raw requests
(raw_configs.py). Every refused value gets Kafka's error: INVALID_CONFIG for topics,
INVALID_REQUEST for brokers (Kafka's ConfigAdminManager rewraps broker failures).
"""

from __future__ import annotations

import json
import pathlib
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigResource, ConfigSource, NewTopic, ResourceType

import raw_configs as raw
from test_configs import admin_for, describe, incremental, legacy_alter

TABLE = json.loads((pathlib.Path(__file__).parent / "data" / "kafka-4.1-configs.json").read_text())
TOPIC_CONFIGS = {c["name"]: c for c in TABLE["topic_configs"]}
BROKER_CONFIGS = {c["name"]: c for c in TABLE["dynamic_broker_configs"]}
INVALID_REQUEST, INVALID_CONFIG = 42, 40
TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "SHORT": 4, "LONG": 5, "DOUBLE": 6, "LIST": 7, "CLASS": 8,
         "PASSWORD": 9}
# Where tern's built-in default differs from Kafka's, on purpose (README's config table).
TERN_DEFAULTS = {"flush.ms": "1000"}
# A listener name for the configs Kafka lets change only under a listener prefix.
LISTENER = "listener.name.plaintext."


def test_the_table_is_kafka_4_1s():
    assert TABLE["kafka_version"] == "4.1"
    assert len(TOPIC_CONFIGS) == 33, sorted(TOPIC_CONFIGS)
    assert len(BROKER_CONFIGS) == 93, len(BROKER_CONFIGS)
    assert "message.format.version" not in TOPIC_CONFIGS  # removed in 4.0


def broker_name(config: dict) -> str:
    return LISTENER + config["name"] if config["listener_prefix_only"] else config["name"]


def creation_error(admin, topic: str, configs: dict) -> KafkaError | None:
    futures = admin.create_topics([NewTopic(topic, 1, 1, config=configs)], operation_timeout=10)
    try:
        futures[topic].result(timeout=15)
        return None
    except KafkaException as e:
        return e.args[0]


def test_every_topic_config_is_accepted_at_creation_and_described_with_type_documentation_and_synonyms(broker, topic):
    admin = admin_for(broker)
    # All at once, but min.compaction.lag.ms, whose example is above max.compaction.lag.ms's.
    configs = {n: c["valid_example"] for n, c in TOPIC_CONFIGS.items() if n != "min.compaction.lag.ms"}
    assert creation_error(admin, topic, configs) is None
    described = describe(admin, ResourceType.TOPIC, topic)
    for name, value in configs.items():
        assert (described[name].value, ConfigSource(described[name].source)) == (
            value, ConfigSource.DYNAMIC_TOPIC_CONFIG), name
    # DescribeConfigs v3: Kafka's type, a documentation, and the broker synonym's default.
    plain = f"{topic}-plain"
    assert creation_error(admin, plain, {}) is None
    v3 = raw.describe(broker.address, raw.TOPIC, plain, documentation=True)
    assert v3.error_code == 0
    for name, config in TOPIC_CONFIGS.items():
        entry = v3.configs[name]
        assert entry.config_type == TYPES[config["type"]], name
        assert entry.documentation, name
        assert entry.source == 5 and not entry.read_only, (name, entry)
        assert entry.value == TERN_DEFAULTS.get(name, config["default"]), (name, entry.value)
        if config["broker_synonym"]:
            assert entry.synonyms[-1][0] == config["broker_synonym"], (name, entry.synonyms)
    # Each refused value is refused at creation too.
    for i, (name, config) in enumerate(sorted(TOPIC_CONFIGS.items())):
        for bad in config["invalid_examples"][:1]:
            err = creation_error(admin, f"{topic}-bad{i}", {name: bad})
            assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (name, bad, err)


def test_every_topic_config_round_trips_through_both_alters_and_bad_values_get_kafkas_error(broker, topic):
    admin = admin_for(broker)
    assert creation_error(admin, topic, {}) is None
    for name, config in TOPIC_CONFIGS.items():
        good = config["valid_example"]
        assert incremental(admin, ResourceType.TOPIC, topic, [(name, AlterConfigOpType.SET, good)]) is None, name
        entry = describe(admin, ResourceType.TOPIC, topic)[name]
        assert (entry.value, ConfigSource(entry.source)) == (good, ConfigSource.DYNAMIC_TOPIC_CONFIG), name
        for bad in config["invalid_examples"]:
            err = incremental(admin, ResourceType.TOPIC, topic, [(name, AlterConfigOpType.SET, bad)])
            assert err is not None and err.code() == KafkaError.INVALID_CONFIG, (name, bad, err)
            assert f"Invalid value {bad} for configuration {name}" in err.str(), err.str()
        assert describe(admin, ResourceType.TOPIC, topic)[name].value == good, name
        assert incremental(admin, ResourceType.TOPIC, topic, [(name, AlterConfigOpType.DELETE, None)]) is None
        entry = describe(admin, ResourceType.TOPIC, topic)[name]
        assert ConfigSource(entry.source) == ConfigSource.DEFAULT_CONFIG, (name, entry)
        # The legacy AlterConfigs replaces the whole set.
        assert legacy_alter(admin, ResourceType.TOPIC, topic, {name: good}) is None, name
        assert describe(admin, ResourceType.TOPIC, topic)[name].value == good, name
        assert legacy_alter(admin, ResourceType.TOPIC, topic, {}) is None
    # Kafka's cross-checks and unknown names.
    err = incremental(admin, ResourceType.TOPIC, topic, [("min.compaction.lag.ms", AlterConfigOpType.SET, "10"),
                                                         ("max.compaction.lag.ms", AlterConfigOpType.SET, "5")])
    assert err.code() == KafkaError.INVALID_CONFIG and "conflict topic config setting" in err.str(), err.str()
    err = incremental(admin, ResourceType.TOPIC, topic, [("remote.storage.enable", AlterConfigOpType.SET, "true")])
    assert err.code() == KafkaError.INVALID_CONFIG and "Tiered Storage functionality is disabled" in err.str()
    for unknown in ("message.format.version", "no.such.config"):
        err = incremental(admin, ResourceType.TOPIC, topic, [(unknown, AlterConfigOpType.SET, "1")])
        assert err.code() == KafkaError.INVALID_CONFIG, err
        assert err.str() == f"Unknown topic config name: {unknown}", err.str()


def test_every_dynamic_broker_config_round_trips_at_its_levels_and_bad_values_get_kafkas_error(broker):
    admin = admin_for(broker)
    for config in BROKER_CONFIGS.values():
        name, good = broker_name(config), config["valid_example"]
        sensitive = config["type"] == "PASSWORD"
        # Refused values first: thread counts are checked against the one in force (the default).
        for bad in config["invalid_examples"]:
            err = incremental(admin, ResourceType.BROKER, "1", [(name, AlterConfigOpType.SET, bad)])
            assert err is not None and err.code() == KafkaError.INVALID_REQUEST, (name, bad, err)
        err = incremental(admin, ResourceType.BROKER, "1", [(name, AlterConfigOpType.SET, good)])
        assert err is None, (name, err)
        entry = describe(admin, ResourceType.BROKER, "1")[name]
        assert not entry.is_read_only and ConfigSource(entry.source) == ConfigSource.DYNAMIC_BROKER_CONFIG, name
        assert (entry.value, entry.is_sensitive) == ((None, True) if sensitive else (good, False)), (name, entry)
        assert incremental(admin, ResourceType.BROKER, "1", [(name, AlterConfigOpType.DELETE, None)]) is None
        # The cluster-wide default: only for the configs Kafka does not keep per broker.
        code, message = raw.incremental_alter(broker.address, raw.BROKER, "", [(name, raw.SET, good)])
        if config["scope"] == "per-broker-only":
            assert code == INVALID_REQUEST, (name, code)
            assert "Cannot update these configs at default cluster level, broker id must be specified" in message
        else:
            assert (code, message) == (0, None), (name, message)
            default = raw.describe(broker.address, raw.BROKER, "", [name]).configs[name]
            assert (default.value, default.source) == (good, 3), (name, default)
            assert raw.incremental_alter(broker.address, raw.BROKER, "", [(name, raw.DELETE, None)]) == (0, None)
        if config["listener_prefix_only"]:
            err = incremental(admin, ResourceType.BROKER, "1", [(config["name"], AlterConfigOpType.SET, good)])
            assert err.code() == KafkaError.INVALID_REQUEST and "only per-listener" in err.str(), err.str()
    # The legacy AlterConfigs sets a whole level, every config at once.
    everything = {broker_name(c): c["valid_example"] for c in BROKER_CONFIGS.values()}
    assert legacy_alter(admin, ResourceType.BROKER, "1", everything) is None
    described = describe(admin, ResourceType.BROKER, "1")
    assert {n for n in everything if ConfigSource(described[n].source) == ConfigSource.DYNAMIC_BROKER_CONFIG} \
        == set(everything)
    assert legacy_alter(admin, ResourceType.BROKER, "1", {}) is None
    described = describe(admin, ResourceType.BROKER, "1")
    assert not [n for n in everything if n in described
                and ConfigSource(described[n].source) == ConfigSource.DYNAMIC_BROKER_CONFIG]
    # The issue's own example: a Kerberos setting Kafka keeps per broker.
    assert incremental(admin, ResourceType.BROKER, "1", [("sasl.kerberos.min.time.before.relogin",
                                                           AlterConfigOpType.SET, "58000")]) is None


def produce_one(address: str, topic: str, timestamp_ms: int) -> KafkaError | None:
    errors = []
    p = Producer({"bootstrap.servers": address, "message.timeout.ms": 10000, "retries": 0})
    p.produce(topic, value=b"v", timestamp=timestamp_ms, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(15) == 0
    return errors[0]


def test_message_timestamp_bounds_are_enforced_as_kafka_4_enforces_them(broker, topic):
    """message.timestamp.after.max.ms is one hour by default since Kafka 4.0 (KIP-1030);
    before.max.ms is unbounded unless set. CreateTime only."""
    admin = admin_for(broker)
    assert creation_error(admin, topic, {}) is None
    now = int(time.time() * 1000)
    assert produce_one(broker.address, topic, now - 30 * 86_400_000) is None
    err = produce_one(broker.address, topic, now + 2 * 3_600_000)
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP, err
    assert incremental(admin, ResourceType.TOPIC, topic, [("message.timestamp.before.max.ms",
                                                           AlterConfigOpType.SET, "3600000")]) is None
    err = produce_one(broker.address, topic, now - 2 * 3_600_000)
    assert err is not None and err.code() == KafkaError.INVALID_TIMESTAMP, err
    assert produce_one(broker.address, topic, now) is None
    # LogAppendTime topics stamp the broker's clock: nothing to refuse.
    assert incremental(admin, ResourceType.TOPIC, topic, [("message.timestamp.type",
                                                           AlterConfigOpType.SET, "LogAppendTime")]) is None
    assert produce_one(broker.address, topic, now + 2 * 3_600_000) is None


def api_versions_answered(address: str) -> tuple[bool, object]:
    """Opens a connection and asks ApiVersions v0: (answered, the open socket)."""
    import socket
    import struct
    host, port = address.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=5)
    client = b"tern-limit"
    frame = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    try:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        return len(sock.recv(4, socket.MSG_WAITALL)) == 4, sock
    except OSError:
        return False, sock


def test_max_connections_per_ip_is_applied_at_run_time(broker):
    from tern_harness import wait_until

    def open_while_holding(n: int) -> bool:
        """Whether the (n+1)th connection is served while n are held open."""
        held = [api_versions_answered(broker.address) for _ in range(n)]
        try:
            assert all(ok for ok, _ in held)
            ok, extra = api_versions_answered(broker.address)
            extra.close()
            return ok
        finally:
            for _, sock in held:
                sock.close()

    def alter(broker_id: str, value):
        """Sets (or deletes, for None) the limit; the request's own connection may be
        refused until the broker has seen the last probe's connections close."""
        op = (raw.SET, value) if value is not None else (raw.DELETE, None)
        wait_until(lambda: raw.incremental_alter(broker.address, raw.BROKER, broker_id,
                                                 [("max.connections.per.ip", *op)]) == (0, None),
                   10, what=f"max.connections.per.ip={value} on {broker_id!r}")

    assert open_while_holding(2)
    alter("1", "2")
    wait_until(lambda: not open_while_holding(2), 10, what="the third connection refused")
    # The cluster-wide default applies where this broker sets nothing.
    alter("1", None)
    wait_until(lambda: open_while_holding(2), 10, what="the flag's limit back")
    alter("", "3")
    wait_until(lambda: not open_while_holding(3), 10, what="the cluster default in force")
    # Closed connections give their places back once the broker has seen them close.
    wait_until(lambda: open_while_holding(2), 10, what="two connections and a third")
