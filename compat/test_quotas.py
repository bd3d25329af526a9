"""Client quotas (KIP-13, KIP-55, KIP-219, KIP-546) with real clients.

`tern quota set|list|remove` drives AlterClientQuotas and DescribeClientQuotas. A
confluent-kafka producer and a kafka-python consumer, each over a 1 MiB/s quota set on
its client id, are held to it: the broker answers with throttle_time_ms and mutes the
connection for that long, so even a client that ignored the throttle time could not go
faster. The rates are measured in steady state, after the window's first burst, over
a broker with 2 one-second samples per rate (`--quota-window-num 2`): Kafka's default
of 11 lets a fresh client burst 10 s' worth of its quota, which a 10 s measurement
could not tell from a broken quota.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Producer

from tern_harness import tern_bin, wait_until

QUOTA = 1_048_576  # bytes per second
MEASURE_FROM_S = 3.0  # after the first window's burst
MEASURE_UNTIL_S = 13.0


def tern(broker, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(tern_bin()), "quota", *args, "-b", broker.address],
                            capture_output=True, text=True, timeout=30)
    if ok:
        assert result.returncode == 0, result.stderr
    return result


def listed(broker, *entity: str) -> dict[tuple[str, str], float]:
    out = tern(broker, "list", *entity, "--json").stdout
    return {(row["entity"], row["key"]): row["value"] for row in json.loads(out)}


def test_quotas_set_list_and_remove_through_the_cli(broker):
    tern(broker, "set", "--client-id", "app", "--producer-byte-rate", "1048576",
         "--consumer-byte-rate", "2097152")
    tern(broker, "set", "--user", "<default>", "--request-percentage", "12.5")
    tern(broker, "set", "--user", "alice", "--client-id", "<default>", "--controller-mutation-rate", "10")
    tern(broker, "set", "--ip", "127.0.0.9", "--connection-creation-rate", "100")
    assert listed(broker) == {
        ("client-id=app", "producer_byte_rate"): 1048576.0,
        ("client-id=app", "consumer_byte_rate"): 2097152.0,
        ("user=<default>", "request_percentage"): 12.5,
        ("user=alice,client-id=<default>", "controller_mutation_rate"): 10.0,
        ("ip=127.0.0.9", "connection_creation_rate"): 100.0,
    }
    # A filter names one entity exactly (the default one by <default>).
    assert listed(broker, "--user", "<default>") == {("user=<default>", "request_percentage"): 12.5}
    assert set(listed(broker, "--client-id", "app")) == {("client-id=app", "producer_byte_rate"),
                                                          ("client-id=app", "consumer_byte_rate")}
    # Kafka's refusals, in Kafka's words.
    refused = tern(broker, "set", "--client-id", "app", "--request-percentage", "0", ok=False)
    assert refused.returncode != 0 and "Quota request_percentage must be greater than 0" in refused.stderr
    refused = tern(broker, "set", "--ip", "not-an-ip", "--connection-creation-rate", "1", ok=False)
    assert "not-an-ip is not a valid IP or resolvable host." in refused.stderr
    refused = tern(broker, "set", "--client-id", "app", "--connection-creation-rate", "1", ok=False)
    assert "Invalid configuration key connection_creation_rate" in refused.stderr
    # Removing one key keeps the others; removing all removes the entity.
    tern(broker, "remove", "--client-id", "app", "--key", "producer_byte_rate")
    assert listed(broker, "--client-id", "app") == {("client-id=app", "consumer_byte_rate"): 2097152.0}
    tern(broker, "remove", "--client-id", "app")
    assert listed(broker, "--client-id", "app") == {}
    assert ("user=<default>", "request_percentage") in listed(broker)


def steady_rate(times_and_bytes: list[tuple[float, int]], start: float) -> float:
    """Bytes per second between MEASURE_FROM_S and MEASURE_UNTIL_S after start."""
    inside = [n for t, n in times_and_bytes if MEASURE_FROM_S <= t - start < MEASURE_UNTIL_S]
    return sum(inside) / (MEASURE_UNTIL_S - MEASURE_FROM_S)


@pytest.mark.broker_args("--quota-window-num", "2")
def test_a_producer_is_held_to_its_byte_rate_and_sees_the_throttle(broker):
    client_id = f"quota-producer-{uuid.uuid4().hex[:6]}"
    tern(broker, "set", "--client-id", client_id, "--producer-byte-rate", str(QUOTA))
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    throttles: list[int] = []

    def on_stats(raw: str):
        for b in json.loads(raw).get("brokers", {}).values():
            throttles.append(b.get("throttle", {}).get("max", 0))

    producer = Producer({"bootstrap.servers": broker.address, "client.id": client_id,
                         "linger.ms": 5, "statistics.interval.ms": 500, "stats_cb": on_stats,
                         "queue.buffering.max.kbytes": 4096, "message.timeout.ms": 60_000})
    delivered: list[tuple[float, int]] = []

    def on_delivery(err, msg):
        if err is None:
            delivered.append((time.monotonic(), len(msg.value())))

    value = b"q" * 1024
    start = time.monotonic()
    while time.monotonic() - start < MEASURE_UNTIL_S + 0.5:
        try:
            producer.produce(topic, value, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.01)
        producer.poll(0)
    producer.flush(30)
    rate = steady_rate(delivered, start)
    assert 0.9 * QUOTA <= rate <= 1.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA}"
    assert max(throttles, default=0) > 0, "librdkafka's statistics show no throttle"


@pytest.mark.broker_args("--quota-window-num", "2")
def test_a_consumer_is_held_to_its_byte_rate_and_stays_in_its_group(broker):
    from kafka import KafkaConsumer

    topic = f"quota-{uuid.uuid4().hex[:8]}"
    # 20 MiB written by an unthrottled producer: more than the test can read at 1 MiB/s.
    producer = Producer({"bootstrap.servers": broker.address, "linger.ms": 20})
    for _ in range(20 * 1024):
        while True:
            try:
                producer.produce(topic, b"c" * 1024)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    client_id = f"quota-consumer-{uuid.uuid4().hex[:6]}"
    tern(broker, "set", "--client-id", client_id, "--consumer-byte-rate", str(QUOTA))
    revoked: list[int] = []
    assigned: list[int] = []

    from kafka import ConsumerRebalanceListener

    class Rebalances(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked_partitions):
            if revoked_partitions:
                revoked.append(len(revoked_partitions))

        def on_partitions_assigned(self, assigned_partitions):
            assigned.append(len(assigned_partitions))

    consumer = KafkaConsumer(bootstrap_servers=broker.address, client_id=client_id,
                             group_id=f"quota-group-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest",
                             session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
                             enable_auto_commit=False)
    consumer.subscribe([topic], listener=Rebalances())
    try:
        wait_until(lambda: consumer.poll(timeout_ms=200) is not None and consumer.assignment(), 30,
                   what="the consumer's assignment")
        received: list[tuple[float, int]] = []
        start = time.monotonic()
        while time.monotonic() - start < MEASURE_UNTIL_S:
            for records in consumer.poll(timeout_ms=200).values():
                now = time.monotonic()
                received.extend((now, len(r.value)) for r in records)
        rate = steady_rate(received, start)
        metrics = consumer.metrics().get("consumer-metrics", {})
        assert 0.9 * QUOTA <= rate <= 1.1 * QUOTA, f"{rate:.0f} B/s against a quota of {QUOTA}"
        assert metrics.get("throttle-time-max", 0) > 0, metrics
        assert revoked == [] and assigned == [1], f"rebalanced: revoked {revoked}, assigned {assigned}"
    finally:
        consumer.close()


def test_controller_mutations_are_held_to_their_rate_and_a_strict_request_is_refused(broker):
    """KIP-599: 1 partition/s allows a burst of 11; a CreateTopics v6+ past it is refused
    with THROTTLING_QUOTA_EXCEEDED, and accepted again once the bucket has refilled."""
    from kafka.admin import KafkaAdminClient, NewTopic

    client_id = f"quota-admin-{uuid.uuid4().hex[:6]}"
    tern(broker, "set", "--client-id", client_id, "--controller-mutation-rate", "1")
    first = KafkaAdminClient(bootstrap_servers=broker.address, client_id=client_id)
    prefix = uuid.uuid4().hex[:6]
    try:
        for i in range(3):  # 15 partitions: the last one takes the bucket to -4
            response = first.create_topics([NewTopic(f"{prefix}-{i}", 5, 1)])
            assert [t["error_code"] for t in response["topics"]] == [0], response
    finally:
        first.close()
    # A second admin client of the same client id has no throttle of its own to wait
    # out: the broker refuses its strict request instead.
    second = KafkaAdminClient(bootstrap_servers=broker.address, client_id=client_id)
    try:
        response = second.create_topics([NewTopic(f"{prefix}-late", 1, 1)], raise_errors=False)
        codes = [(t["error_code"], t["error_message"]) for t in response["topics"]]
        assert codes == [(89, "The throttling quota has been exceeded.")], response
        time.sleep(4.5)
        response = second.create_topics([NewTopic(f"{prefix}-late", 1, 1)], raise_errors=False)
        assert [t["error_code"] for t in response["topics"]] == [0], response
    finally:
        second.close()


def test_request_time_over_request_percentage_comes_back_as_a_throttle_time(broker):
    """request_percentage counts handler time; past it, every response that has a
    throttle_time_ms carries one (here DescribeClientQuotas', from raw requests)."""
    import struct

    import raw_configs as raw

    tern(broker, "set", "--client-id", "tern-compat-raw", "--request-percentage", "0.001")

    def throttle_of_one_request() -> int:
        body = struct.pack(">ib", 0, 0)  # no filter components, not strict
        return raw._call(broker.address, 48, 0, body).take(">i")

    throttles = [throttle_of_one_request() for _ in range(500)]
    # 0.001% of a second over the 10 s window floor is 100 µs of handler time: a few
    # dozen requests spend it; the throttle never exceeds one quota window (1 s).
    assert max(throttles) > 0, throttles
    assert max(throttles) <= 1000, max(throttles)
