"""confluent-kafka helpers shared by test_confluent_kafka.py, test_crash.py and test_groups.py.

Consumers made here read with assign() (explicit partitions, no group membership) and never
commit unless a test does so itself. confluent-kafka's Python Consumer refuses to be created
without a group.id, so a unique one is set, with auto commit and offset store off. Group
members (subscribe()) live in group_worker.py and test_groups.py.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

BOUNDED_PRODUCER = {
    # Bounds librdkafka's retrying so a broken broker fails a test in seconds, not minutes.
    "message.timeout.ms": 20000,
    "socket.timeout.ms": 10000,
}


def produce_all(addr: str, topic: str, messages: list[dict], config: dict | None = None,
                flush_timeout: float = 30.0) -> list[tuple]:
    """Produces messages (dicts of key/value/headers/partition/timestamp) and waits for
    every delivery report. Returns [(index, error, partition, offset)] in delivery order."""
    conf = {"bootstrap.servers": addr, **BOUNDED_PRODUCER, **(config or {})}
    p = Producer(conf)
    reports: list[tuple] = []

    def cb_for(i):
        def cb(err, msg):
            reports.append((i, err, msg.partition(), msg.offset()))
        return cb

    deadline = time.monotonic() + flush_timeout
    for i, m in enumerate(messages):
        kwargs = {k: v for k, v in m.items() if v is not None}
        for _ in range(1000):  # bounded retry on a full local queue
            try:
                p.produce(topic, on_delivery=cb_for(i), **kwargs)
                break
            except BufferError:
                p.poll(0.05)
                if time.monotonic() > deadline:
                    raise
        p.poll(0)
    remaining = p.flush(max(1.0, deadline - time.monotonic()))
    assert remaining == 0, f"{remaining} messages still undelivered after {flush_timeout}s"
    return reports


def new_consumer(addr: str, extra: dict | None = None) -> Consumer:
    return Consumer({
        "bootstrap.servers": addr,
        "group.id": f"tern-compat-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "check.crcs": True,
        "socket.timeout.ms": 10000,
        **(extra or {}),
    })


def consume_all(addr: str, topic: str, partitions: list[int] | None = None,
                timeout: float = 30.0, consumer_config: dict | None = None):
    """Reads every partition of `topic` from the beginning up to its high watermark.

    Returns (messages, errors, watermarks): messages are confluent_kafka.Message objects
    in the order received (per-partition order is what Kafka guarantees), errors are
    every KafkaError the consumer reported, watermarks {partition: (low, high)}.
    """
    c = new_consumer(addr, consumer_config)
    try:
        if partitions is None:
            md = c.list_topics(topic, timeout=10)
            t = md.topics.get(topic)
            assert t is not None and t.error is None, f"metadata for {topic}: {t and t.error}"
            partitions = sorted(t.partitions)
        watermarks = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in partitions}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        next_offset = {p: None for p in partitions}
        messages, errors = [], []

        def done():
            return all(
                watermarks[p][1] <= watermarks[p][0]
                or (next_offset[p] is not None and next_offset[p] >= watermarks[p][1])
                for p in partitions)

        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(msg.error())
                continue
            messages.append(msg)
            next_offset[msg.partition()] = msg.offset() + 1
        return messages, errors, watermarks
    finally:
        c.close()
