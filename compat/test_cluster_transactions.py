"""Transactions on a three-broker etcd cluster, with confluent-kafka (librdkafka).

A transaction spans partitions led by every broker (its markers go out by
WriteTxnMarkers) and the offsets of a group coordinated by any of them; it stays
all-or-nothing when the transaction coordinator or a data leader is killed -9 in the
middle: the new coordinator reloads `__transaction_state` and completes what was
prepared, and a new data leader has the transaction's data (written acks=all) to mark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid

import pytest
from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,
                             TopicPartition)

from test_cluster import FAILOVER_BOUND_S, Cluster, offsets_partition_of
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


def txn_partition_of(txn_id: str) -> int:
    """The id's __transaction_state partition: abs(hashCode) % partitions, as Kafka and
    tern place it (a negative hash taken modulo without abs lands elsewhere)."""
    return offsets_partition_of(txn_id, TXN_PARTITIONS)


def coordinator_of(cluster: Cluster, txn_id: str) -> int:
    """The broker leading the transactional id's __transaction_state partition."""
    index = txn_partition_of(txn_id)
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


def txn_state(via, txn_id: str) -> str | None:
    """The transaction's state as `tern txn describe` tells it, through broker `via`."""
    out = subprocess.run([str(via.binary), "txn", "-b", via.address, "--json", "describe", "--transactional-id", txn_id],
                         capture_output=True, timeout=15)
    if out.returncode != 0:
        print("tern txn describe:", out.stderr.decode()[-500:])
        return None
    found = json.loads(out.stdout)
    found = found[0] if isinstance(found, list) and found else found
    return found.get("state") if isinstance(found, dict) else None


def stable_everywhere(cluster: Cluster, topic: str) -> bool:
    """Every partition's last stable offset has reached its high watermark."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "lso-probe",
                  "isolation.level": "read_committed"})
    u = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": "hw-probe",
                  "isolation.level": "read_uncommitted"})
    try:
        for p in range(PARTITIONS):
            tp = TopicPartition(topic, p)
            if c.get_watermark_offsets(tp, timeout=5)[1] != u.get_watermark_offsets(tp, timeout=5)[1]:
                return False
        return True
    except KafkaException:
        return False
    finally:
        c.close()
        u.close()


def test_a_transaction_hanging_in_prepare_commit_is_completed_by_the_next_coordinator(tmp_path, topic):
    """The coordinator and a data leader are killed -9 while the transaction is in
    PrepareCommit: on four brokers, the data leader is the one broker outside the
    coordinator's `__transaction_state` replicas, stopped before the commit, so
    PrepareCommit is written but that leader's markers cannot be; then both die. The next
    coordinator reloads the prepared transaction and writes every marker: every partition
    is stable and the whole transaction readable within the transaction timeout."""
    cluster = Cluster(tmp_path, brokers=4, extra_args=[
        "--transaction-state-log-num-partitions", str(TXN_PARTITIONS), "--offsets-topic-num-partitions", "6",
        "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "500"])
    try:
        cluster.start()
        hanging_in_prepare_commit(cluster, topic)
    finally:
        cluster.stop()


def hanging_in_prepare_commit(cluster: Cluster, topic: str) -> None:
    cluster.create_topic(topic, PARTITIONS)
    timeout_ms = 10_000

    def producer(txn_id: str) -> Producer:
        p = Producer({"bootstrap.servers": cluster.bootstrap(), "transactional.id": txn_id,
                      "transaction.timeout.ms": timeout_ms, "message.timeout.ms": timeout_ms,
                      "socket.timeout.ms": 10000, "linger.ms": 5})
        p.init_transactions(60)
        return p

    producer(f"{topic}-first")  # creates __transaction_state
    state_partitions = cluster.metadata(topic="__transaction_state").topics["__transaction_state"].partitions
    data_leaders = set(cluster.leaders(topic).values())

    def outsider(txn_id: str) -> int | None:
        """The one broker outside the id's __transaction_state replicas, if it leads data."""
        replicas = state_partitions[txn_partition_of(txn_id)].replicas
        out = [n for n in cluster.brokers if n not in replicas]
        return out[0] if len(out) == 1 and out[0] in data_leaders else None

    txn_id = next(t for t in (f"{topic}-id-{k}" for k in range(100)) if outsider(t) is not None)
    coordinator = cluster.brokers[state_partitions[txn_partition_of(txn_id)].leader]
    data_leader = cluster.brokers[outsider(txn_id)]
    p = producer(txn_id)
    p.begin_transaction()
    for i in range(60):
        p.produce(topic, value=f"c-{i}", partition=i % PARTITIONS)
    assert p.flush(20) == 0
    os.kill(data_leader.pid, signal.SIGSTOP)
    try:
        commit_with_retries(p)
        state = txn_state(coordinator, txn_id)
        assert state == "PrepareCommit", f"{state}: the markers were written although a data leader was stopped"
        coordinator.kill9()
    finally:
        data_leader.kill9()  # SIGKILL ends a stopped process too
    killed_at = time.monotonic()
    wait_until(lambda: stable_everywhere(cluster, topic), timeout_ms / 1000 + 2 * FAILOVER_BOUND_S,
               what="every partition stable again")
    resolved_after = time.monotonic() - killed_at
    assert read_committed(cluster, topic) == sorted(f"c-{i}" for i in range(60))
    survivor = next(b for b in cluster.brokers.values() if b.alive())
    assert txn_state(survivor, txn_id) == "CompleteCommit"
    # Both come back to a cluster that agrees with them.
    coordinator.start()
    data_leader.start()
    wait_until(lambda: stable_everywhere(cluster, topic), 30, what="stable with every broker back")
    assert read_committed(cluster, topic) == sorted(f"c-{i}" for i in range(60))
    print(f"resolved {resolved_after:.1f} s after the kill")
