"""Transactions on a three-broker etcd cluster, with confluent-kafka (librdkafka).

A transaction spans partitions led by every broker (its markers go out by
WriteTxnMarkers) and the offsets of a group coordinated by any of them; it stays
all-or-nothing when the transaction coordinator or a data leader is killed -9 in the
middle: the new coordinator reloads `__transaction_state` and completes what was
prepared, and a new data leader has the transaction's data (written acks=all) to mark.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)

from test_cluster import Cluster, java_hash
from tern_harness import wait_until

TXN_PARTITIONS = 6
PARTITIONS = 6


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, extra_args=["--transaction-state-log-num-partitions", str(TXN_PARTITIONS),
                                      "--offsets-topic-num-partitions", "6",
                                      "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "500"])
    try:
        c.start()
        yield c
    finally:
        c.stop()


def txn_producer(cluster: Cluster, txn_id: str) -> Producer:
    p = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": txn_id,
                  "message.timeout.ms": 30000, "socket.timeout.ms": 10000, "linger.ms": 5})
    p.init_transactions(60)
    return p


def read_committed(cluster: Cluster, topic: str, timeout: float = 30.0) -> list[str]:
    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"rc-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.partition.eof": True,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        at_end, got = set(), []
        deadline = time.monotonic() + timeout
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise KafkaException(m.error())
            at_end.discard(m.partition())
            got.append(m.value().decode())
        assert len(at_end) == PARTITIONS, f"not at the end of every partition: {sorted(at_end)}"
        return sorted(got)
    finally:
        c.close()


def coordinator_of(cluster: Cluster, txn_id: str) -> int:
    """The broker leading the transactional id's __transaction_state partition."""
    index = java_hash(txn_id) % TXN_PARTITIONS
    return cluster.leaders("__transaction_state")[index]


def commit_with_retries(p: Producer, deadline_s: float = 60) -> None:
    """commit_transaction, retried while librdkafka says the error is retriable."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            p.commit_transaction(max(1.0, deadline - time.monotonic()))
            return
        except KafkaException as e:
            if not e.args[0].retriable() or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_transaction_across_every_broker_commits_or_aborts_as_a_whole(cluster, topic):
    cluster.create_topic(topic, PARTITIONS)
    assert len(set(cluster.leaders(topic).values())) == 3, "partitions led by every broker"
    p = txn_producer(cluster, f"{topic}-id")
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, value=f"c-{i}", partition=i % PARTITIONS)
    p.commit_transaction(60)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=f"a-{i}", partition=i % PARTITIONS)
    p.flush(20)
    p.abort_transaction(60)
    assert read_committed(cluster, topic) == sorted(f"c-{i}" for i in range(60))


def test_kill9_of_the_transaction_coordinator_at_commit_loses_nothing(cluster, topic):
    cluster.create_topic(topic, PARTITIONS)
    txn_id = f"{topic}-id"
    p = txn_producer(cluster, txn_id)
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, value=f"c-{i}", partition=i % PARTITIONS)
    p.flush(20)
    coordinator = coordinator_of(cluster, txn_id)
    victim = cluster.brokers[coordinator]
    victim.kill9()
    commit_with_retries(p)
    assert coordinator_of(cluster, txn_id) != coordinator
    assert read_committed(cluster, topic) == sorted(f"c-{i}" for i in range(60))
    # The producer goes on with the new coordinator.
    p.begin_transaction()
    p.produce(topic, value="after", partition=0)
    commit_with_retries(p)
    assert "after" in read_committed(cluster, topic)


def test_kill9_of_a_data_leader_in_a_transaction_loses_nothing(cluster, topic):
    cluster.create_topic(topic, PARTITIONS)
    txn_id = f"{topic}-id"
    p = txn_producer(cluster, txn_id)
    coordinator = coordinator_of(cluster, txn_id)
    leaders = cluster.leaders(topic)
    victim = next(b for b in cluster.brokers.values() if b.node_id != coordinator and b.node_id in leaders.values())
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, value=f"c-{i}", partition=i % PARTITIONS)
    p.flush(20)
    victim.kill9()
    wait_until(lambda: victim.node_id not in cluster.leaders(topic).values(), 15,
               what="the victim's partitions to move")
    commit_with_retries(p)
    assert read_committed(cluster, topic) == sorted(f"c-{i}" for i in range(60))
