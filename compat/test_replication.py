"""Replication on a three-broker cluster (issue 11), with kcat, confluent-kafka and the
tern CLI against real etcd and real tern processes on 127.0.0.1.

What is asserted: a replication-factor-3 topic lists three replicas, all in sync; an
acks=all producer loses nothing acknowledged when a leader is killed (kill -9) and comes
back; a paused follower leaves the ISR and rejoins after SIGCONT; with two of three
brokers down acks=all is refused with NOT_ENOUGH_REPLICAS while acks=1 goes on; a fourth
broker's new replicas catch up before old ones go (whose files are then deleted); a
SIGTERM moves leaderships before the broker leaves; a consumer with client.rack reads
from the follower in its rack (KIP-392); committed offsets survive the kill -9 of their
coordinator.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import ck
from test_cluster import LEASE_TTL_S, Cluster, kcat
from tern_harness import wait_until

LAG_MS = 2000
ARGS = ["--replica-lag-time-max-ms", str(LAG_MS)]


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, extra_args=ARGS)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def isr_listing(cluster: Cluster, topic: str, via=None) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr) as kcat -L prints them."""
    b = via or cluster.live()[0]
    out = kcat("-b", b.address, "-L", "-t", topic)
    parts = {}
    for m in re.finditer(r"partition (\d+), leader (-?\d+), replicas: ([\d,]*), isrs: ([\d,]*)", out):
        as_list = lambda s: [int(x) for x in s.split(",") if x]  # noqa: E731
        parts[int(m.group(1))] = (int(m.group(2)), as_list(m.group(3)), as_list(m.group(4)))
    return parts


def all_in_sync(cluster: Cluster, topic: str, n: int = 3, via=None) -> bool:
    listing = isr_listing(cluster, topic, via)
    return bool(listing) and all(len(isr) == n and leader > 0 for leader, _, isr in listing.values())


class Recorder:
    """A producer loop in a thread: uniquely numbered values, every acknowledgement kept."""

    def __init__(self, cluster: Cluster, topic: str, config: dict | None = None, rate: float = 400):
        self.topic = topic
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list = []
        self.stop = threading.Event()
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap(), "acks": "all",
                                  "enable.idempotence": True, "message.timeout.ms": 60000,
                                  "linger.ms": 5, **(config or {})})
        self.rate = rate
        self.sent = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _report(self, err, msg):
        if err is None:
            self.acked[msg.value()] = (msg.partition(), msg.offset())
        else:
            self.errors.append(err)

    def _run(self):
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline and self.sent < 100_000:
            self.producer.produce(self.topic, value=f"m{self.sent}".encode(), on_delivery=self._report)
            self.sent += 1
            self.producer.poll(0)
            time.sleep(1 / self.rate)  # the stimulus: a steady write rate, not a wait for anything
        self.producer.flush(60)

    def finish(self):
        self.stop.set()
        self.thread.join(90)

    def latest(self) -> dict[int, int]:
        """partition -> highest offset acknowledged so far."""
        out: dict[int, int] = {}
        for p, offset in list(self.acked.values()):
            if offset is not None:
                out[p] = max(out.get(p, -1), offset)
        return out

    def wait_for_acks_past(self, marks: dict[int, int], partitions: int, timeout: float, what: str) -> None:
        """Waits until every partition has an acknowledged write above `marks` (what
        latest() was at some earlier moment): writes go on, on every partition."""
        wait_until(lambda: all(self.latest().get(p, -1) > marks.get(p, -1) for p in range(partitions)),
                   timeout, interval=0.05, what=what)


def start_recorder(cluster, topic, **kwargs) -> Recorder:
    """A running Recorder whose writes are already acknowledged: a fault injected before the
    producer has its producer id and metadata would test the client's bootstrap timeouts
    (a request to a paused broker waits out socket.timeout.ms), not the broker."""
    recorder = Recorder(cluster, topic, **kwargs)
    wait_until(lambda: len(recorder.acked) >= 20, 15, what="the recorder's first acknowledgements")
    return recorder


def read_all(cluster: Cluster, topic: str, partitions: int,
             covering: Recorder | None = None) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value, everything below each high watermark.

    With `covering`, first waits (bounded) until each high watermark passes the highest
    offset the recorder saw acknowledged: a leader elected or moved a moment ago learns
    its followers' positions, and so its high watermark, from their next fetch, and a
    read taken before that would miss the newest acknowledged writes though every
    in-sync replica holds them. A watermark that never gets there is left for the
    checker to report as loss."""
    c = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": f"read-{time.time()}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    needed = {p: 0 for p in range(partitions)}
    for p, offset in (covering.acked.values() if covering else ()):
        if offset is not None:
            needed[p] = max(needed[p], offset + 1)

    def high_watermarks() -> dict[int, int]:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}

    ends = high_watermarks()
    deadline = time.monotonic() + 30
    while any(ends[p] < needed[p] for p in ends) and time.monotonic() < deadline:
        time.sleep(0.2)
        ends = high_watermarks()
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[tuple[int, int], bytes] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(
            len([k for k in got if k[0] == p]) < ends[p] for p in range(partitions)):
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got[(m.partition(), m.offset())] = m.value()
    c.close()
    return got


def assert_nothing_acknowledged_lost(recorder: Recorder, got: dict) -> None:
    # librdkafka's implicit ack reports some writes delivered without an offset (a request
    # failed retriably, NOT_LEADER_OR_FOLLOWER say, yet a later one of the same partition
    # succeeded, so its messages were written after all): those must be in their partition.
    stored = {(p, v) for (p, _), v in got.items()}
    unplaced = {v: at for v, at in recorder.acked.items() if at[1] is None}
    lost = [v for v, at in recorder.acked.items()
            if (got.get(at) != v if at[1] is not None else (at[0], v) not in stored)]
    print(f"\nsent {recorder.sent}, acknowledged {len(recorder.acked)} ({len(unplaced)} without an offset), "
          f"lost {len(lost)}, producer errors {len(recorder.errors)}")
    assert recorder.acked, "something was acknowledged"
    # What the read found where each lost write was acknowledged, and how far it read:
    # a hole, another value (a divergent log) or a read that stopped short tell apart.
    read_up_to = {p: max(o for (q, o) in got if q == p) for (p, _) in got}
    assert not lost, (f"{len(lost)} acknowledged messages lost or moved, e.g. "
                      f"{[(v, recorder.acked[v], got.get(recorder.acked[v])) for v in lost[:5]]}; "
                      f"highest offset read per partition {read_up_to}")
    values = list(got.values())
    assert len(values) == len(set(values)), "no message stored twice"


def test_a_replicated_topic_lists_three_replicas_all_in_sync(cluster, topic):
    b = cluster.brokers[1]
    subprocess.run([str(b.binary), "topic", "create", topic, "--partitions", "6", "--replication-factor", "3",
                    "--config", "min.insync.replicas=2", "-b", b.address], check=True, capture_output=True,
                   timeout=30)
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="every partition with 3 in-sync replicas")
    listing = isr_listing(cluster, topic)
    assert len(listing) == 6
    leaders = [leader for leader, _, _ in listing.values()]
    assert sorted(set(leaders)) == [1, 2, 3], f"leaders spread over the brokers: {leaders}"
    for leader, replicas, isr in listing.values():
        assert sorted(replicas) == [1, 2, 3] and replicas[0] == leader and sorted(isr) == [1, 2, 3]
    # Data written through the leaders reaches every replica: each broker's log holds it.
    kcat("-b", cluster.bootstrap(), "-P", "-t", topic, "-X", "acks=all",
         input=b"\n".join(b"v%d" % i for i in range(300)) + b"\n")
    out = kcat("-b", cluster.bootstrap(), "-C", "-t", topic, "-e", "-q")
    assert len(out.split()) == 300


@pytest.mark.timeout(150)
def test_kill9_of_a_leader_under_acks_all_loses_no_acknowledged_write(cluster, topic):
    cluster.create_topic(topic, 6, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync")
    recorder = start_recorder(cluster, topic)
    recorder.wait_for_acks_past({}, 6, 15, "acknowledged writes on all 6 partitions")
    victim = cluster.brokers[cluster.leaders(topic)[0]]
    victim.kill9()
    killed = time.monotonic()
    at_kill = recorder.latest()
    first_ack_after = None
    before = len(recorder.acked)
    while time.monotonic() - killed < 20:
        if len(recorder.acked) > before + 50:
            first_ack_after = time.monotonic() - killed
            break
        time.sleep(0.05)  # a poll's interval
    # Writes go on on every partition (the victim's moved) while it is down, and after it
    # is back in every ISR.
    recorder.wait_for_acks_past(at_kill, 6, LEASE_TTL_S + 15, "acknowledged writes on every partition after the kill -9")
    victim.start()
    wait_until(lambda: all_in_sync(cluster, topic), 30, what="the restarted broker back in every ISR")
    recorder.wait_for_acks_past(recorder.latest(), 6, 15, "acknowledged writes on every partition after the rejoin")
    recorder.finish()
    assert_nothing_acknowledged_lost(recorder, read_all(cluster, topic, 6, recorder))
    print(f"writes acknowledged again {first_ack_after:.2f}s after the kill -9 (lease TTL {LEASE_TTL_S}s)")
    assert first_ack_after is not None and first_ack_after <= LEASE_TTL_S + 4


@pytest.mark.timeout(150)
def test_a_paused_follower_leaves_the_isr_and_rejoins_after_sigcont(cluster, topic):
    cluster.create_topic(topic, 6, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync")
    controller = cluster.metadata().controller_id
    victim = next(b for n, b in cluster.brokers.items() if n != controller)
    watcher = cluster.brokers[controller]
    recorder = start_recorder(cluster, topic)
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        wait_until(lambda: all(victim.node_id not in isr and leader > 0
                               for leader, _, isr in isr_listing(cluster, topic, watcher).values()),
                   LAG_MS / 1000 + LEASE_TTL_S + 8, what="the paused broker out of every ISR")
        acked = len(recorder.acked)
        wait_until(lambda: len(recorder.acked) > acked + 200, 15, what="acks=all writes going on with 2 of 3")
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    wait_until(lambda: all_in_sync(cluster, topic, via=watcher), 30, what="the follower back in every ISR")
    recorder.finish()
    assert_nothing_acknowledged_lost(recorder, read_all(cluster, topic, 6, recorder))


@pytest.mark.timeout(150)
def test_with_two_of_three_down_acks_all_is_refused_and_acks_1_goes_on(cluster, topic):
    cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync")
    survivor = cluster.brokers[cluster.metadata().controller_id]
    for b in cluster.brokers.values():
        if b is not survivor:
            b.kill9()
    wait_until(lambda: all(leader == survivor.node_id and isr == [survivor.node_id]
                           for leader, _, isr in isr_listing(cluster, topic, via=survivor).values()),
               LAG_MS / 1000 + LEASE_TTL_S + 10, what="the survivor alone leading and in sync")
    refused = ck.produce_all(survivor.address, topic, [{"value": b"x", "partition": p} for p in range(3)],
                             {"acks": "all", "retries": 0, "enable.idempotence": False})
    codes = {err.code() for _, err, _, _ in refused if err is not None}
    assert codes and codes <= {KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND}, refused
    accepted = ck.produce_all(survivor.address, topic, [{"value": b"y", "partition": p} for p in range(3)],
                              {"acks": "1"})
    assert all(err is None for _, err, _, _ in accepted), accepted


@pytest.mark.timeout(180)
def test_a_fourth_broker_gets_replicas_that_catch_up_before_old_ones_go(cluster, topic):
    cluster.create_topic(topic, 12, 3)
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync")
    kcat("-b", cluster.bootstrap(), "-P", "-t", topic, "-X", "acks=all",
         input=b"\n".join(b"v%d" % i for i in range(1200)) + b"\n")
    before = isr_listing(cluster, topic)
    recorder = start_recorder(cluster, topic, rate=200)

    def isr_changes() -> tuple[float, float]:
        """(shrinks, expands) of in-sync replica sets, summed over the live brokers' counters."""
        live = cluster.live()
        return (sum(cluster.metric(b, "tern_isr_shrinks_total") for b in live),
                sum(cluster.metric(b, "tern_isr_expands_total") for b in live))

    shrinks_before, expands_before = isr_changes()
    cluster.add(4)

    def settled():
        listing = isr_listing(cluster, topic)
        has_four = [p for p, (_, replicas, _) in listing.items() if 4 in replicas]
        done = all(len(replicas) == 3 and sorted(isr) == sorted(replicas) for _, replicas, isr in listing.values())
        return done and has_four and listing

    after = wait_until(settled, 60, what="a quarter of the replicas on broker 4, all in sync")
    recorder.finish()
    moved = sum(1 for p in after if set(after[p][1]) != set(before[p][1]))
    on_four = sum(1 for p in after if 4 in after[p][1])
    shrinks, expands = (now - then for now, then in zip(isr_changes(), (shrinks_before, expands_before)))
    print(f"\n3 -> 4 brokers: {on_four} of 36 replicas on broker 4, {moved} partitions changed replicas; "
          f"ISR shrinks {shrinks:.0f}, expands {expands:.0f}")
    assert 6 <= on_four <= 12
    assert moved == on_four, "each moved partition has one replica on broker 4"
    # No leader dropped an in-sync replica for lagging while replicas moved (every shrink is
    # counted, however short: a sampled listing could miss one), and every new replica joined
    # its ISR (at least one expand each).
    assert shrinks == 0, f"{shrinks:.0f} ISR shrinks while replicas moved to broker 4"
    assert expands >= on_four, f"{expands:.0f} ISR expands for {on_four} new replicas on broker 4"
    # A dropped replica's files are deleted.
    for p, (_, replicas, _) in after.items():
        for node in (1, 2, 3):
            if node in before[p][1] and node not in replicas:
                d = cluster.brokers[node].data_dir / f"{topic}-{p}"
                wait_until(lambda d=d: not d.exists(), 10, what=f"{d} deleted")
    assert_nothing_acknowledged_lost(recorder, read_all(cluster, topic, 12, recorder))


@pytest.mark.timeout(150)
def test_sigterm_moves_leaderships_before_the_broker_leaves(cluster, topic):
    cluster.create_topic(topic, 6, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync")
    controller = cluster.metadata().controller_id
    victim = next(b for n, b in cluster.brokers.items() if n != controller)
    assert victim.node_id in cluster.leaders(topic).values()
    recorder = start_recorder(cluster, topic)
    recorder.wait_for_acks_past({}, 6, 15, "acknowledged writes on all 6 partitions")
    stamps: list[float] = []
    original = recorder._report

    def stamped(err, msg):
        if err is None:
            stamps.append(time.monotonic())
        original(err, msg)

    recorder._report = stamped
    t0 = time.monotonic()
    victim.stop()
    stopped_after = time.monotonic() - t0
    # Writes acknowledged on every partition after the broker left: the gaps measured
    # span its leaving.
    recorder.wait_for_acks_past(recorder.latest(), 6, 15, "acknowledged writes on every partition after the SIGTERM")
    recorder.finish()
    gaps = [b - a for a, b in zip(stamps, stamps[1:]) if a > t0 - 1]
    longest = max(gaps) if gaps else 0
    print(f"\nSIGTERM: broker gone after {stopped_after:.2f}s; longest gap between acknowledgements {longest:.2f}s")
    assert_nothing_acknowledged_lost(recorder, read_all(cluster, topic, 6, recorder))
    assert longest <= 2.5, "leaderships moved before the broker left"


@pytest.mark.timeout(120)
def test_a_consumer_with_client_rack_reads_from_the_follower_in_its_rack(tmp_path, topic):
    c = Cluster(tmp_path, extra_args=ARGS, rack_of=lambda node: f"rack-{node}")
    try:
        c.start()
        c.create_topic(topic, 1, 3)
        wait_until(lambda: all_in_sync(c, topic), 15, what="all in sync")
        leader = c.leaders(topic)[0]
        follower = next(n for n in c.brokers if n != leader)
        kcat("-b", c.bootstrap(), "-P", "-t", topic, "-X", "acks=all",
             input=b"\n".join(b"r%d" % i for i in range(100)) + b"\n")
        before = c.metric(c.brokers[follower], "tern_topic_messages_out_total")
        consumer = Consumer({"bootstrap.servers": c.bootstrap(), "group.id": "racked",
                             "client.rack": f"rack-{follower}", "auto.offset.reset": "earliest",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 100 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        consumer.close()
        assert len(got) == 100
        served = c.metric(c.brokers[follower], "tern_topic_messages_out_total") - before
        print(f"\nthe follower in the consumer's rack served {served:.0f} of 100 messages")
        assert served >= 100
    finally:
        c.stop()


@pytest.mark.timeout(150)
def test_committed_offsets_survive_the_kill9_of_their_coordinator(cluster, topic):
    cluster.create_topic(topic, 3, 3)
    wait_until(lambda: all_in_sync(cluster, topic, 3) and all_in_sync(cluster, "__consumer_offsets", 3), 30,
               what="topic and offsets topic in sync")
    group = "survivor"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap(), "group.id": group,
                         "enable.auto.commit": False})
    offsets = [TopicPartition(topic, p, 100 + p) for p in range(3)]
    consumer.commit(offsets=offsets, asynchronous=False)
    consumer.close()
    from test_cluster import offsets_partition_of
    coordinator = cluster.leaders("__consumer_offsets")[offsets_partition_of(group)]
    cluster.brokers[coordinator].kill9()
    admin_from = next(b for n, b in cluster.brokers.items() if n != coordinator)

    def committed():
        c = Consumer({"bootstrap.servers": admin_from.address, "group.id": group, "enable.auto.commit": False})
        try:
            got = c.committed([TopicPartition(topic, p) for p in range(3)], timeout=5)
            return [tp.offset for tp in got] == [100, 101, 102]
        except Exception:  # noqa: BLE001 - coordinator moving: ask again
            return False
        finally:
            c.close()

    wait_until(committed, LEASE_TTL_S + 20, interval=0.5, what="the commits served by the new coordinator")


def fetch_from_replica(address: str, topic: str, partition: int, offset: int) -> tuple[int, int, int]:
    """One raw Fetch v11 as a consumer (replica id -1) to the broker at `address`: its
    (error_code, high_watermark, log_start_offset) for the partition. From v11 a broker
    that only follows the partition answers from its own log (KIP-392), so this reads
    that very replica's log start."""
    def s16(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    body = struct.pack(">iiiibii", -1, 0, 0, 1 << 20, 0, 0, -1)
    body += struct.pack(">i", 1) + s16(topic)
    body += struct.pack(">i", 1) + struct.pack(">iiqqi", partition, -1, offset, -1, 1 << 20)
    body += struct.pack(">i", 0) + s16("")  # no forgotten topics, no rack
    request = struct.pack(">hhi", 1, 11, 7) + s16("replica-probe") + body
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"{address} closed the connection")
            data += chunk
    at = 4 + 4 + 4 + 2 + 4  # size, correlation id, throttle, error, session id
    (topics,) = struct.unpack_from(">i", data, at)
    assert topics == 1, topics
    (name_len,) = struct.unpack_from(">h", data, at + 4)
    at += 4 + 2 + name_len + 4  # topic count, name, partition count
    _, error, high_watermark, _, log_start = struct.unpack_from(">ihqqq", data, at)
    return error, high_watermark, log_start


@pytest.mark.timeout(150)
def test_deleted_records_stay_deleted_after_the_leader_fails_over(cluster, topic):
    """DeleteRecords raises the log start on the leader; each follower raises its own from
    the leader's log_start_offset on its next fetch (Kafka's maybeIncrementLogStartOffset),
    which each broker's own answer to a Fetch v11 shows. So after the leader's kill -9 the
    new leader's earliest offset is still past the deleted records, and no consumer reads
    them again."""
    from confluent_kafka.admin import AdminClient, OffsetSpec

    cluster.create_topic(topic, 1, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync")
    kcat("-b", cluster.bootstrap(), "-P", "-t", topic, "-X", "acks=all",
         input=b"\n".join(b"old-%d" % i for i in range(50)) + b"\n")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    (done,) = admin.delete_records([TopicPartition(topic, 0, 30)], request_timeout=10).values()
    assert done.result(timeout=15).low_watermark == 30
    # A write acknowledged by every ISR member after the delete: each follower has
    # fetched since, and every fetch answer carries the leader's log start.
    kcat("-b", cluster.bootstrap(), "-P", "-t", topic, "-X", "acks=all", input=b"new-0\n")
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync after the delete")
    # Every replica's own log start, read from each broker (KIP-392 fetch from a follower).
    seen: dict[int, tuple] = {}

    def every_replica_starts_at_30() -> bool:
        seen.update({b.node_id: fetch_from_replica(b.address, topic, 0, 30) for b in cluster.live()})
        return all(answer == (0, 51, 30) for answer in seen.values())

    try:
        wait_until(every_replica_starts_at_30, 15, what="every replica's log start at 30")
    except AssertionError as e:
        raise AssertionError(f"{e}; (error, high watermark, log start) per broker: {seen}") from None
    for b in cluster.live():
        assert fetch_from_replica(b.address, topic, 0, 0)[::2] == (1, 30), \
            f"broker {b.node_id}: a fetch at 0 is below its log start (OFFSET_OUT_OF_RANGE)"
    old_leader = cluster.leaders(topic)[0]
    cluster.brokers[old_leader].kill9()
    wait_until(lambda: cluster.leaders(topic).get(0, -1) not in (-1, old_leader), 30,
               what="a new leader")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    tp = TopicPartition(topic, 0)
    earliest = admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=10)[tp].result(timeout=15)
    assert earliest.offset == 30, f"the new leader's log start is {earliest.offset}: deleted records came back"
    # The new leader's high watermark reaches what the old one acknowledged once a
    # follower fetches from it.
    latest = lambda: admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=10)[tp].result(15).offset  # noqa: E731
    wait_until(lambda: latest() == 51, 30, what="the new leader's high watermark past new-0")
    got, errors, _ = ck.consume_all(cluster.bootstrap(), topic)
    assert not errors, [str(e) for e in errors]
    values = [m.value() for m in got]
    assert values[0] == b"old-30" and b"old-0" not in values and values[-1] == b"new-0", values[:3]
