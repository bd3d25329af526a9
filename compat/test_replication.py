"""Replication on a three-broker cluster (issue 11), with kcat, confluent-kafka and the
tern CLI against real etcd and real tern processes on 127.0.0.1.

What is asserted: a replication-factor-3 topic lists three replicas, all in sync; an
acks=all producer loses nothing acknowledged when a leader is killed (kill -9) and comes
back; a paused follower leaves the ISR and rejoins after SIGCONT; with two of three
brokers down acks=all is refused with NOT_ENOUGH_REPLICAS while acks=1 goes on; a fourth
broker's new replicas catch up before old ones go (whose files are then deleted); a
SIGTERM moves leaderships before the broker leaves; a consumer with client.rack reads
from the follower in its rack (KIP-392); committed offsets survive the kill -9 of their
coordinator. KIP-392 further: a lagging follower still in the ISR holds the high watermark
at what it has; a follower out of the ISR is not offered as preferred read replica (its
rack reads from the leader) and is offered again once back; a follower serves consumers
only below its own high watermark. An unclean election's old leader truncates its
divergent tail when it returns (every replica's records and end agree, the divergent
records gone, on disk too). SIGTERM of the controller moves its leaderships and the
controller role before it exits; SIGTERM of a partition's last in-sync replica exits with
status 0 at once and it leads again, with every acknowledged write, when it returns.
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
    # Kafka's ReplicationBytesIn/OutPerSec: each byte produced is appended by two followers
    # and served to them, and a follower's fetch is not counted as a topic's bytes out.
    brokers = list(cluster.brokers.values())

    def total(name):
        return sum(cluster.metric(b, name) for b in brokers)

    produced = total("tern_topic_bytes_in_total")
    assert produced > 300
    wait_until(lambda: total("tern_replication_bytes_in_total") == 2 * produced, 15,
               what="each byte appended by both followers")
    assert total("tern_replication_bytes_out_total") >= 2 * produced
    assert produced <= total("tern_topic_bytes_out_total") < 2 * produced


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


# ---- KIP-392 follower reads, unclean-election truncation, controlled shutdown ------------

LONG_LEASE_TTL_S = 60  # a SIGSTOPped broker stays registered: only the ISR rules decide


def racked_cluster(tmp_path, lag_ms: int, lease_ttl_s: int = LONG_LEASE_TTL_S) -> Cluster:
    """Three brokers in racks rack-1..rack-3 (node N in rack-N), with `lag_ms` as
    replica.lag.time.max.ms and an etcd lease long enough that a paused broker keeps its
    registration for the whole test: a follower then leaves an ISR only by lagging."""
    c = Cluster(tmp_path, extra_args=["--replica-lag-time-max-ms", str(lag_ms)],
                rack_of=lambda node: f"rack-{node}")
    for b in c.brokers.values():
        at = b.extra_args.index("--etcd-lease-ttl-secs")
        b.extra_args[at + 1] = str(lease_ttl_s)
    return c


def pin(cluster: Cluster, topic: str, replicas: list[int], configs: dict | None = None) -> None:
    """One partition on exactly `replicas` (the first leads), all in sync, known to every
    live broker."""
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=15000)
    try:
        admin.create_topics({topic: {"assignments": {0: replicas}, "configs": configs or {}}})
    finally:
        admin.close()
    for b in cluster.live():
        wait_until(lambda b=b: isr_listing(cluster, topic, via=b).get(0, (0, [], []))[0] == replicas[0]
                   and sorted(isr_listing(cluster, topic, via=b)[0][2]) == sorted(replicas), 15,
                   what=f"{topic}-0 led by {replicas[0]} with ISR {replicas} as broker {b.node_id} sees it")


def raw_call(address: str, api_key: int, version: int, body: bytes) -> bytes:
    """One non-flexible request to the broker at `address`; its response after the
    correlation id."""
    client = b"replica-probe"
    request = struct.pack(">hhih", api_key, version, 7, len(client)) + client + body
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"{address} closed the connection")
            data += chunk
    return data[8:]


def partition_size(cluster: Cluster, node: int, topic: str, partition: int = 0) -> int:
    """The size a raw DescribeLogDirs v1 to broker `node` lists for its replica of the
    partition (-1: not listed). Raw, so that no admin client connects to a paused broker."""
    data = raw_call(cluster.brokers[node].address, 35, 1, struct.pack(">i", -1))
    at = 4  # throttle
    (results,) = struct.unpack_from(">i", data, at)
    at += 4
    for _ in range(results):
        (_, dir_len) = struct.unpack_from(">hh", data, at)
        at += 4 + dir_len
        (topics,) = struct.unpack_from(">i", data, at)
        at += 4
        for _ in range(topics):
            (name_len,) = struct.unpack_from(">h", data, at)
            name = data[at + 2:at + 2 + name_len].decode()
            at += 2 + name_len
            (partitions,) = struct.unpack_from(">i", data, at)
            at += 4
            for _ in range(partitions):
                index, size, _, _ = struct.unpack_from(">iqqb", data, at)
                at += 21
                if (name, index) == (topic, partition):
                    return size
    return -1


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's record fields): (value, next position)."""
    shift = raw = 0
    while True:
        byte = data[at]
        at += 1
        raw |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), at


def decode_batches(records: bytes) -> list[tuple[int, int, int, list[bytes]]]:
    """(base offset, last offset, partition leader epoch, values) of each uncompressed v2
    record batch."""
    out = []
    at = 0
    while at + 61 <= len(records):
        base, length, leader_epoch, magic = struct.unpack_from(">qiib", records, at)
        end = at + 12 + length
        if end > len(records):
            break  # a partial batch at the end of the answer
        assert magic == 2, magic
        attributes, last_delta = struct.unpack_from(">hi", records, at + 21)
        assert attributes & 0x7 == 0, "uncompressed batches only"
        (count,) = struct.unpack_from(">i", records, at + 57)
        values = []
        pos = at + 61
        for _ in range(count):
            length, pos = _varint(records, pos)
            record_end = pos + length
            pos += 1  # attributes
            _, pos = _varint(records, pos)  # timestamp delta
            _, pos = _varint(records, pos)  # offset delta
            key_len, pos = _varint(records, pos)
            pos += max(key_len, 0)
            value_len, pos = _varint(records, pos)
            values.append(records[pos:pos + value_len] if value_len >= 0 else None)
            pos = record_end
        out.append((base, base + last_delta, leader_epoch, values))
        at = end
    return out


def fetch_v11(address: str, topic: str, partition: int, offset: int, rack: str = "") -> dict:
    """One raw Fetch v11 as a consumer (replica id -1, no wait) with `rack` as its rack id
    (KIP-392) to the broker at `address`. Its answer for the partition: error,
    high_watermark, log_start, preferred (preferred_read_replica) and batches, as
    decode_batches gives them. A broker that only follows the partition answers from its
    own log."""
    def s16(text: str) -> bytes:
        return struct.pack(">h", len(text)) + text.encode()

    body = struct.pack(">iiiibii", -1, 0, 0, 8 << 20, 0, 0, -1)
    body += struct.pack(">i", 1) + s16(topic)
    body += struct.pack(">i", 1) + struct.pack(">iiqqi", partition, -1, offset, -1, 8 << 20)
    body += struct.pack(">i", 0) + s16(rack)
    request = struct.pack(">hhi", 1, 11, 7) + s16("rack-probe") + body
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(struct.pack(">i", len(request)) + request)
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError(f"{address} closed the connection")
            data += chunk
    at = 4 + 4 + 4 + 2 + 4  # size, correlation id, throttle, error, session id
    (topics,) = struct.unpack_from(">i", data, at)
    assert topics == 1, topics
    (name_len,) = struct.unpack_from(">h", data, at + 4)
    at += 4 + 2 + name_len + 4  # topic count, name, partition count
    _, error, high_watermark, _, log_start = struct.unpack_from(">ihqqq", data, at)
    at += 4 + 2 + 8 + 8 + 8
    (aborted,) = struct.unpack_from(">i", data, at)
    at += 4 + max(aborted, 0) * 16
    preferred, records_len = struct.unpack_from(">ii", data, at)
    at += 8
    records = data[at:at + max(records_len, 0)]
    return {"error": error, "high_watermark": high_watermark, "log_start": log_start,
            "preferred": preferred, "batches": decode_batches(records)}


def replica_values(address: str, topic: str, partition: int = 0) -> list[bytes]:
    """Every value below the high watermark of the replica on the broker at `address`,
    read from that broker's own log (fetch_v11 from offset 0 on)."""
    values: list[bytes] = []
    offset = 0
    while True:
        answer = fetch_v11(address, topic, partition, offset)
        assert answer["error"] == 0, answer
        batches = [b for b in answer["batches"] if b[1] >= offset]
        if not batches:
            return values
        for base, last, _, vals in batches:
            values.extend(vals[max(0, offset - base):])
            offset = last + 1


def consume_with_rack(bootstrap: str, topic: str, rack: str, start: int, until: int,
                      timeout: float = 30) -> tuple[list[bytes], int]:
    """A confluent-kafka consumer with client.rack=`rack` reading partition 0 from `start`
    until partition EOF at offset `until` (the high watermark it is served). Returns the
    values read and the offset of the last EOF seen."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rack-{time.time()}",
                  "client.rack": rack, "enable.auto.commit": False, "enable.partition.eof": True,
                  "topic.metadata.refresh.interval.ms": 1000})
    c.assign([TopicPartition(topic, 0, start)])
    got: list[bytes] = []
    eof = -1
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and eof != until:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof = m.offset()
                continue
            got.append(m.value())
    finally:
        c.close()
    return got, eof


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def produce_lines(address: str, topic: str, vals: list[bytes], acks: str) -> None:
    kcat("-b", address, "-P", "-t", topic, "-p", "0", "-X", f"acks={acks}", input=b"\n".join(vals) + b"\n")


def roles(cluster: Cluster) -> tuple[int, int, int]:
    """(leader, follower, other): the controller leads, so the two brokers a test may
    pause are never the controller the admin calls go to."""
    controller = cluster.metadata().controller_id
    others = [n for n in sorted(cluster.brokers) if n != controller]
    return controller, others[0], others[1]


@pytest.mark.timeout(150)
def test_a_lagging_follower_holds_the_high_watermark_until_it_leaves_the_isr(tmp_path, topic):
    """KIP-392 with a follower that lags: while the paused follower F is still in the ISR
    the leader's high watermark stays at what F has (so a consumer pointed at F, the
    preferred read replica of F's rack, is never asked for records F lacks, and none is
    served past it from the leader either); once F has lagged for replica.lag.time.max.ms
    it leaves the ISR, is no longer offered, and the high watermark moves on."""
    lag_ms = 8000
    c = racked_cluster(tmp_path, lag_ms)
    paused = None
    try:
        c.start()
        leader, follower, other = roles(c)
        L, F, G = c.brokers[leader], c.brokers[follower], c.brokers[other]
        pin(c, topic, [leader, follower, other])
        produce_lines(L.address, topic, values("a", 100), "all")
        wait_until(lambda: fetch_v11(F.address, topic, 0, 100)["high_watermark"] == 100, 15,
                   what="the follower's own high watermark at 100")
        # All in sync: each rack is offered its own replica (none for the leader's rack).
        offered = {n: fetch_v11(L.address, topic, 0, 0, rack=f"rack-{n}")["preferred"] for n in (1, 2, 3)}
        assert offered == {leader: -1, follower: follower, other: other}, offered

        os.kill(F.pid, signal.SIGSTOP)
        paused = F
        stopped_at = time.monotonic()
        produce_lines(L.address, topic, values("b", 100), "1")
        wait_until(lambda: partition_size(c, other, topic) == partition_size(c, leader, topic), 10,
                   what="the running follower holding all 200 records")
        # Still in the ISR (the lag time has not passed): the high watermark is held at
        # F's 100, for a consumer in F's rack and for one reading from the leader.
        racked = fetch_v11(L.address, topic, 0, 100, rack=f"rack-{follower}")
        at_leader = fetch_v11(L.address, topic, 0, 100, rack=f"rack-{leader}")
        isr_then = isr_listing(c, topic, via=L)[0][2]
        checked_after = time.monotonic() - stopped_at
        assert follower in isr_then and checked_after < lag_ms / 1000, \
            f"checked {checked_after:.1f}s after the pause, ISR {isr_then}: the lag window was missed"
        assert (racked["high_watermark"], racked["preferred"]) == (100, follower), racked
        assert (at_leader["high_watermark"], at_leader["batches"]) == (100, []), at_leader

        wait_until(lambda: sorted(isr_listing(c, topic, via=L)[0][2]) == sorted([leader, other]),
                   lag_ms / 1000 + 10, what="the paused follower out of the ISR")
        out = fetch_v11(L.address, topic, 0, 0, rack=f"rack-{follower}")
        assert (out["preferred"], out["high_watermark"]) == (-1, 200), \
            f"an out-of-sync follower is not offered, and the leader serves its rack: {out}"
        assert out["batches"] and out["batches"][0][0] == 0
        assert replica_values(L.address, topic) == values("a", 100) + values("b", 100)
    finally:
        if paused is not None:
            os.kill(paused.pid, signal.SIGCONT)
    try:
        wait_until(lambda: sorted(isr_listing(c, topic, via=L)[0][2]) == sorted([leader, follower, other]), 30,
                   what="the follower back in the ISR")
        wait_until(lambda: fetch_v11(L.address, topic, 0, 0, rack=f"rack-{follower}")["preferred"] == follower,
                   10, what="the follower offered again to its rack")
        wait_until(lambda: fetch_v11(F.address, topic, 0, 200)["high_watermark"] == 200, 10,
                   what="the follower's own high watermark at 200")
        assert replica_values(F.address, topic) == values("a", 100) + values("b", 100)
    finally:
        c.stop()


@pytest.mark.timeout(150)
def test_a_follower_out_of_the_isr_is_not_offered_and_its_rack_reads_from_the_leader(tmp_path, topic):
    """KIP-392, Kafka's ReplicaManager.findPreferredReadReplica: a replica out of the ISR is
    not a candidate (it may lag without bound). With the follower of rack F paused and out
    of the ISR, a client.rack=F consumer is not sent to it and reads everything from the
    leader; once back in the ISR the follower is offered and serves its rack again."""
    c = racked_cluster(tmp_path, LAG_MS)
    paused = None
    try:
        c.start()
        leader, follower, other = roles(c)
        L, F, G = c.brokers[leader], c.brokers[follower], c.brokers[other]
        pin(c, topic, [leader, follower, other])
        produce_lines(L.address, topic, values("a", 100), "all")
        assert fetch_v11(L.address, topic, 0, 0, rack=f"rack-{follower}")["preferred"] == follower
        shrinks, expands = (c.metric(L, m) for m in ("tern_isr_shrinks_total", "tern_isr_expands_total"))
        os.kill(F.pid, signal.SIGSTOP)
        paused = F
        produce_lines(L.address, topic, values("b", 100), "1")
        wait_until(lambda: sorted(isr_listing(c, topic, via=L)[0][2]) == sorted([leader, other]),
                   LAG_MS / 1000 + 10, what="the paused follower out of the ISR")
        # One shrink, counted as one: the paused follower left, no member joined.
        assert (c.metric(L, "tern_isr_shrinks_total"), c.metric(L, "tern_isr_expands_total")) == \
            (shrinks + 1, expands), "(shrinks, expands) on the leader"
        answer = fetch_v11(L.address, topic, 0, 0, rack=f"rack-{follower}")
        assert (answer["preferred"], answer["high_watermark"]) == (-1, 200), answer
        # A real consumer in the paused follower's rack reads everything, from the leader,
        # while the follower is still paused.
        got, eof = consume_with_rack(f"{L.address},{G.address}", topic, f"rack-{follower}", 0, 200)
        assert (got, eof) == (values("a", 100) + values("b", 100), 200)
    finally:
        if paused is not None:
            os.kill(paused.pid, signal.SIGCONT)
    try:
        wait_until(lambda: sorted(isr_listing(c, topic, via=L)[0][2]) == sorted([leader, follower, other]), 30,
                   what="the follower back in the ISR")
        wait_until(lambda: fetch_v11(L.address, topic, 0, 0, rack=f"rack-{follower}")["preferred"] == follower,
                   10, what="the follower offered again to its rack")
        wait_until(lambda: fetch_v11(F.address, topic, 0, 200)["high_watermark"] == 200, 10,
                   what="the follower's own high watermark at 200")
        served = c.metric(F, "tern_topic_messages_out_total")
        got, eof = consume_with_rack(c.bootstrap(), topic, f"rack-{follower}", 100, 200)
        assert (got, eof) == (values("b", 100), 200)
        assert c.metric(F, "tern_topic_messages_out_total") - served == 100, "the follower served its rack"
    finally:
        c.stop()


@pytest.mark.timeout(150)
def test_a_follower_serves_a_consumer_only_up_to_its_own_high_watermark(tmp_path, topic):
    """KIP-392: a follower serves consumers below its own high watermark, not its log end.
    The other follower G is paused but stays in the ISR (a long replica.lag.time.max.ms), so
    the high watermark cannot pass 100 while the follower F already holds 200 records;
    F then serves a consumer in its rack exactly 100, and the rest once G is back and the
    high watermark has moved."""
    c = racked_cluster(tmp_path, lag_ms=60000)
    paused = None
    try:
        c.start()
        leader, follower, other = roles(c)
        L, F, G = c.brokers[leader], c.brokers[follower], c.brokers[other]
        pin(c, topic, [leader, follower, other])
        produce_lines(L.address, topic, values("a", 100), "all")
        wait_until(lambda: fetch_v11(F.address, topic, 0, 100)["high_watermark"] == 100, 15,
                   what="the follower's own high watermark at 100")
        os.kill(G.pid, signal.SIGSTOP)
        paused = G
        produce_lines(L.address, topic, values("b", 100), "1")
        wait_until(lambda: partition_size(c, follower, topic) == partition_size(c, leader, topic), 10,
                   what="the follower holding all 200 records")
        assert sorted(isr_listing(c, topic, via=L)[0][2]) == sorted([leader, follower, other])
        at_100 = fetch_v11(F.address, topic, 0, 100)
        assert (at_100["error"], at_100["high_watermark"], at_100["batches"]) == (0, 100, []), at_100
        from_0 = fetch_v11(F.address, topic, 0, 0)
        assert from_0["batches"] and max(last for _, last, _, _ in from_0["batches"]) == 99, from_0["batches"]
        served = c.metric(F, "tern_topic_messages_out_total")
        racked = f"{L.address},{F.address}"
        got, eof = consume_with_rack(racked, topic, f"rack-{follower}", 0, 100)
        assert (got, eof) == (values("a", 100), 100)
        assert c.metric(F, "tern_topic_messages_out_total") - served == 100, "read from the follower"
        os.kill(G.pid, signal.SIGCONT)
        paused = None
        wait_until(lambda: fetch_v11(F.address, topic, 0, 200)["high_watermark"] == 200, 15,
                   what="the follower's own high watermark at 200 once the other follower caught up")
        got, eof = consume_with_rack(racked, topic, f"rack-{follower}", 100, 200)
        assert (got, eof) == (values("b", 100), 200)
        assert c.metric(F, "tern_topic_messages_out_total") - served == 200, "read from the follower"
    finally:
        if paused is not None:
            os.kill(paused.pid, signal.SIGCONT)
        c.stop()


@pytest.mark.timeout(150)
def test_an_unclean_elections_old_leader_truncates_its_divergent_tail_when_it_returns(cluster, topic):
    """KIP-101/KIP-320: the old leader of an unclean election holds records the new leader
    never had (written with acks=1 after the follower died). When it comes back it
    follows the new leader, truncates that divergent tail to the new leader's log and
    fetches the new leader's records at those offsets: afterwards both replicas hold the
    same records at the same offsets, end at the same offset, and no replica (not even
    on disk) holds the divergent records."""
    from confluent_kafka import ElectionType
    from confluent_kafka.admin import AdminClient

    old, new, bystander = 1, 2, cluster.brokers[3]
    pin(cluster, topic, [old, new])
    produce_lines(cluster.brokers[old].address, topic, values("common", 10), "all")
    cluster.brokers[new].kill9()
    wait_until(lambda: isr_listing(cluster, topic, via=bystander)[0][2] == [old], LEASE_TTL_S + 8,
               what="the follower out of the ISR")
    produce_lines(cluster.brokers[old].address, topic, values("divergent", 50), "1")
    assert replica_values(cluster.brokers[old].address, topic) == values("common", 10) + values("divergent", 50)
    cluster.brokers[old].kill9()
    wait_until(lambda: isr_listing(cluster, topic, via=bystander)[0][0] == -1, LEASE_TTL_S + 8,
               what="the partition offline")
    cluster.brokers[new].start()
    wait_until(lambda: new in [b.id for b in cluster.metadata(via=bystander).brokers.values()], 15,
               what="the follower registered again")
    tp = TopicPartition(topic, 0)
    admin = AdminClient({"bootstrap.servers": bystander.address})
    outcome = admin.elect_leaders(ElectionType.UNCLEAN, [tp]).result(20)
    assert outcome.get(tp) is None, outcome
    wait_until(lambda: isr_listing(cluster, topic, via=bystander)[0][:3:2] == (new, [new]), 10,
               what="the out-of-sync replica leading alone")
    produce_lines(cluster.brokers[new].address, topic, values("after", 5), "all")
    expected = values("common", 10) + values("after", 5)
    assert replica_values(cluster.brokers[new].address, topic) == expected

    def settled() -> bool:
        """Pinned [old, new]: once the old leader is back in the ISR it is the preferred
        leader again; every broker sees it leading with both in sync (a read while the
        leadership moves may be refused with NOT_LEADER_OR_FOLLOWER, as in Kafka)."""
        return all(isr_listing(cluster, topic, via=b)[0][0] == old and
                   sorted(isr_listing(cluster, topic, via=b)[0][2]) == [old, new] for b in cluster.live())

    cluster.brokers[old].start()
    wait_until(settled, 30, what="the old leader back in the ISR and leading again")
    for node in (old, new):
        b = cluster.brokers[node]
        wait_until(lambda b=b: fetch_v11(b.address, topic, 0, 15)["high_watermark"] == 15, 10,
                   what=f"broker {node}'s own high watermark at 15")
        assert replica_values(b.address, topic) == expected, f"broker {node}'s replica"
    assert partition_size(cluster, old, topic) == partition_size(cluster, new, topic), \
        "both replicas' logs end at the same place (nothing past offset 15 on the old leader)"
    for node in (old, new):
        segments = list((cluster.brokers[node].data_dir / f"{topic}-0").glob("*.log"))
        assert segments
        wait_until(lambda segments=segments: not any(b"divergent" in s.read_bytes() for s in segments), 10,
                   what=f"the divergent records gone from broker {node}'s segment files")
    # And they stay gone across a restart of the replica that had them.
    cluster.brokers[old].restart()
    wait_until(settled, 30, what="the old leader back in the ISR and leading after its restart")
    wait_until(lambda: fetch_v11(cluster.brokers[old].address, topic, 0, 15)["high_watermark"] == 15, 10,
               what="the old leader's high watermark at 15 after its restart")
    assert replica_values(cluster.brokers[old].address, topic) == expected
    got, errors, _ = ck.consume_all(cluster.bootstrap(), topic)
    assert not errors and [m.value() for m in got] == expected


@pytest.mark.timeout(150)
def test_sigterm_of_the_controller_hands_over_its_leaderships_and_the_controller_role(cluster, topic):
    """Controlled shutdown of the broker that is the controller (Kafka: it moves its own
    leaderships away, then resigns, and another broker is elected at once rather than
    when its session times out). By the time the process has exited, every partition is
    led by another broker and its ISR no longer lists the one gone; a new controller is
    elected within a second, once; and acks=all writes go on with no gap longer than
    2.5 s and nothing acknowledged lost."""
    cluster.create_topic(topic, 6, 3, {"min.insync.replicas": "2"})
    wait_until(lambda: all_in_sync(cluster, topic), 15, what="all in sync")
    controller = cluster.metadata().controller_id
    victim = cluster.brokers[controller]
    survivors = [b for n, b in cluster.brokers.items() if n != controller]
    assert list(cluster.leaders(topic).values()).count(controller) == 2, cluster.leaders(topic)
    elections = sum(cluster.metric(b, "tern_controller_elections_total") for b in survivors)
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
    assert victim.stop() == 0
    exited = time.monotonic()
    # Right at exit (well inside the lease TTL and the replica lag time, after which the
    # partitions would move or shrink anyway): nothing left on the broker gone.
    listing = wait_until(lambda: (lambda l: l if all(
        leader != controller and controller not in isr and sorted(isr) == sorted(b.node_id for b in survivors)
        for leader, _, isr in l.values()) else None)(isr_listing(cluster, topic, via=survivors[0])),
        1.0, interval=0.05, what="every partition led by a survivor with the survivors as its ISR")
    handed_over_after = time.monotonic() - exited
    new_controller = wait_until(
        lambda: (lambda c: c if c not in (-1, controller) else None)(cluster.metadata(via=survivors[0]).controller_id),
        1.0, interval=0.05, what="a new controller")
    elected_after = time.monotonic() - exited
    assert new_controller in [b.node_id for b in survivors]
    assert cluster.metadata(via=survivors[1]).controller_id == new_controller
    wait_until(lambda: sum(cluster.metric(b, "tern_controller_elections_total") for b in survivors) == elections + 1,
               5, what="the election counted")
    recorder.wait_for_acks_past(recorder.latest(), 6, 15, "acknowledged writes on every partition after the SIGTERM")
    recorder.finish()
    gaps = [b - a for a, b in zip(stamps, stamps[1:]) if a > t0 - 1]
    longest = max(gaps) if gaps else 0
    print(f"\nSIGTERM of the controller: gone after {exited - t0:.2f}s; partitions handed over "
          f"{handed_over_after:.2f}s and controller {new_controller} elected {elected_after:.2f}s after its exit; "
          f"longest gap between acknowledgements {longest:.2f}s; leaders {listing}")
    assert_nothing_acknowledged_lost(recorder, read_all(cluster, topic, 6, recorder))
    assert longest <= 2.5, "leaderships moved before the broker left"
    # Back, it rejoins every ISR and the controller stays where it is.
    victim.start()
    wait_until(lambda: all_in_sync(cluster, topic), 30, what="the old controller back in every ISR")
    assert cluster.metadata(via=survivors[0]).controller_id == new_controller
    assert sum(cluster.metric(b, "tern_controller_elections_total") for b in cluster.live()) == elections + 1


@pytest.mark.timeout(150)
@pytest.mark.parametrize("alone", [False, True], ids=["controller-up", "only-broker-left"])
def test_sigterm_of_the_last_in_sync_replica_exits_cleanly_and_it_leads_again_with_every_write(
        cluster, topic, alone):
    """Controlled shutdown of a partition's last in-sync replica (min.insync.replicas=1,
    its other replicas down): there is nowhere to move the leadership, so the broker must
    not wait for that — it exits with status 0 well within the harness's stop limit —
    and when it comes back it leads again with every acknowledged write, and the other
    replicas catch up to exactly those records. controller-up: a replication-factor-2
    partition whose other replica is down, with the controller (a third broker) up: the
    partition is offline while the broker is gone, its ISR still [it] (Kafka never writes
    an empty ISR), so the other replica, back first, is not elected. only-broker-left: a
    replication-factor-3 partition with both other brokers down, so the broker shut down
    is also the controller and the last broker of the cluster."""
    controller = cluster.metadata().controller_id
    if alone:
        last = controller
        others = [n for n in sorted(cluster.brokers) if n != last]
        pin(cluster, topic, [last, *others], {"min.insync.replicas": "1"})
        watcher = cluster.brokers[last]
    else:
        last, *others = [n for n in sorted(cluster.brokers) if n != controller]
        pin(cluster, topic, [last, *others], {"min.insync.replicas": "1"})
        watcher = cluster.brokers[controller]
    for n in others:
        cluster.brokers[n].kill9()
    wait_until(lambda: isr_listing(cluster, topic, via=watcher)[0][::2] == (last, [last]),
               LAG_MS / 1000 + LEASE_TTL_S + 8, what="the last in-sync replica leading alone")
    reports = ck.produce_all(cluster.brokers[last].address, topic,
                             [{"value": v, "partition": 0} for v in values("w", 300)], {"acks": "all"})
    assert all(err is None for _, err, _, _ in reports), [err for _, err, _, _ in reports if err][:3]
    acked = sorted((offset, values("w", 300)[i]) for i, _, _, offset in reports)
    assert [o for o, _ in acked] == list(range(300))
    t0 = time.monotonic()
    assert cluster.brokers[last].stop() == 0
    took = time.monotonic() - t0
    print(f"\nSIGTERM of the last in-sync replica ({'alone' if alone else 'controller up'}): "
          f"exited with 0 after {took:.2f}s")
    assert took < 5, f"{took:.2f}s: the shutdown waited for a leadership that cannot move"
    if not alone:
        wait_until(lambda: isr_listing(cluster, topic, via=watcher)[0][::2] == (-1, [last]), 5,
                   what="the partition offline with the ISR kept")
        for n in others:
            cluster.brokers[n].start()
        wait_until(lambda: all(n in [b.id for b in cluster.metadata(via=watcher).brokers.values()] for n in others),
                   15, what="the other replica registered again")
        # A spot check (an election that does not happen leaves nothing to wait for): the
        # out-of-sync replica, registered again, was not made leader.
        assert isr_listing(cluster, topic, via=watcher)[0][::2] == (-1, [last])
    cluster.brokers[last].start()
    watcher = watcher if not alone else cluster.brokers[last]
    # As the controller's broker and as the broker itself see it (a broker just started
    # may still refuse a read while it takes up the leadership, as in Kafka).
    wait_until(lambda: all(isr_listing(cluster, topic, via=b)[0][0] == last for b in (watcher, cluster.brokers[last]))
               and fetch_v11(cluster.brokers[last].address, topic, 0, 0)["error"] == 0,
               15, what="the last in-sync replica leading again")
    assert replica_values(cluster.brokers[last].address, topic) == [v for _, v in acked]
    if alone:
        for n in others:
            cluster.brokers[n].start()
    wait_until(lambda: sorted(isr_listing(cluster, topic, via=watcher)[0][2]) == sorted([last, *others]), 30,
               what="the other replicas caught up")
    for n in others:
        wait_until(lambda n=n: fetch_v11(cluster.brokers[n].address, topic, 0, 300)["high_watermark"] == 300, 10,
                   what=f"broker {n}'s high watermark at 300")
        assert replica_values(cluster.brokers[n].address, topic) == [v for _, v in acked]
