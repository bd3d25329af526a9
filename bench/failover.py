#!/usr/bin/env python3
"""Failover and catch-up on a three-broker cluster on a real etcd (part of `make bench`).

An idempotent acks=all producer (confluent-kafka) writes 1 KiB messages at a steady rate
to a 6-partition topic, RF=3, min.insync.replicas=2, while this script:
- kills the leader of partition 0 with kill -9 (--kills times): the time from the kill
  to the first acknowledgement of a write to that partition after it (on its successor);
- stops the leader of partition 0 with SIGTERM (controlled shutdown; --terms times): the
  longest stretch without an acknowledgement of that partition around the stop (the
  producer's unavailability);
- restarts one broker with an empty data dir while the producer writes: the time until
  it is back in every partition's ISR, and the rate at which it copied its leaders' logs
  (bytes from its own /metrics once in sync).
Every acknowledged write is then read back (lost must be 0). Bounded by counts and time.

    .venv/bin/python bench/failover.py    # after `make deps` (etcd, the compat harness)
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "compat"))

try:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from test_cluster import LEASE_TTL_S, Cluster  # the compat suite's harness
    from tern_harness import wait_until
except ImportError as e:  # pragma: no cover - reported below
    Cluster = None
    MISSING = e

TOPIC = "failover"
PARTITIONS = 6
SIZE = 1024


class Stream:
    """A producer writing at `rate` msgs/s until stopped, recording every ack's time."""

    def __init__(self, bootstrap: str, rate: int):
        self.rate = rate
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 2, "message.timeout.ms": 60000, "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.acks: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        # (produce time, ack time) per partition: availability is judged by writes
        # produced after a fault, not by acks already on their way before it.
        self.pairs: dict[int, list[tuple[float, float]]] = {p: [] for p in range(PARTITIONS)}
        self.produced_at: dict[int, float] = {}
        self.acked: dict[int, set[tuple[int, int]]] = {p: set() for p in range(PARTITIONS)}
        self.failed = 0
        self.sent = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _report(self, err, msg):
        if err is not None:
            self.failed += 1
            return
        p = msg.partition()
        now = time.monotonic()
        self.acks[p].append(now)
        v = int(msg.value()[:12])
        self.pairs[p].append((self.produced_at.pop(v, now), now))
        self.acked[p].add((msg.offset(), int(msg.value()[:12])))

    def _run(self):
        payload = b"x" * (SIZE - 12)
        start = time.monotonic()
        while not self.stop.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while self.sent < due:
                value = b"%012d" % self.sent + payload
                self.produced_at[self.sent] = time.monotonic()
                try:
                    self.producer.produce(TOPIC, value, partition=self.sent % PARTITIONS,
                                          on_delivery=self._report)
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.005)
        self.producer.flush(90)

    def first_ack_after(self, partition: int, t: float, timeout: float = 30) -> float | None:
        """When the first write produced after `t` was acknowledged."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [a for sent, a in self.pairs[partition][-5000:] if sent > t]
            if later:
                return min(later)
            time.sleep(0.01)
        return None

    def longest_gap(self, partition: int, since: float, until: float) -> float:
        times = [a for a in self.acks[partition] if since <= a <= until]
        points = [since, *times, until]
        return max(b - a for a, b in zip(points, points[1:]))


def leader_of(cluster: Cluster, partition: int) -> int:
    return wait_until(lambda: max(cluster.leaders(TOPIC).get(partition, -1), 0), 20, what="a leader")


def full_isr(cluster: Cluster) -> bool:
    md = cluster.metadata(topic=TOPIC)
    return all(len(p.isrs) == 3 for p in md.topics[TOPIC].partitions.values())


def read_back(bootstrap: str, acked: dict[int, set[tuple[int, int]]]) -> int:
    """Acknowledged (offset, value) pairs missing from the log: lost writes."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 16 << 20})
    lost = 0
    for p in range(PARTITIONS):
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
        c.assign([TopicPartition(TOPIC, p, 0)])
        seen: set[tuple[int, int]] = set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not seen or max(o for o, _ in seen) < high - 1):
            for m in c.consume(1000, timeout=1):
                if m.error() is None:
                    seen.add((m.offset(), int(m.value()[:12])))
        # librdkafka reports some successes without an offset (its implicit ack: a request
        # failed retriably but a later one of the partition succeeded, so the earlier
        # messages were written): those count as kept when their value is in the log.
        values = {v: o for o, v in seen}
        missing = {(o, v) for o, v in acked[p] - seen if o is not None or v not in values}
        unplaced = sum(1 for o, _ in acked[p] if o is None)
        if unplaced:
            print(f"  partition {p}: {unplaced} acknowledged without an offset, "
                  f"{sum(1 for o, v in missing if o is None)} of them missing from the log")
        lost += len(missing)
        by_offset = dict(seen)
        for o, v in sorted(missing, key=lambda m: (m[0] is None, m[0] or 0, m[1]))[:5]:
            print(f"  lost: partition {p} offset {o} value {v}; the log holds {by_offset.get(o)} there"
                  f" (partition end {high})")
    c.close()
    return lost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=int, default=3000, help="messages per second (default 3000)")
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--terms", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the work dir (broker logs, data)")
    args = ap.parse_args()
    if shutil.which("etcd") is None or Cluster is None:
        why = "etcd is not installed" if Cluster is not None else f"the harness is missing ({MISSING})"
        print(f"failover: skipped ({why}; run `make deps`)")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="tern-failover-"))
    cluster = Cluster(tmp)
    try:
        cluster.start()
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        wait_until(lambda: full_isr(cluster), 20, what="full ISRs")
        stream = Stream(cluster.bootstrap(), args.rate)
        stream.thread.start()
        time.sleep(3)
        print(f"== failover: 3 brokers, RF=3, min.insync.replicas=2, idempotent acks=all at {args.rate} msgs/s "
              f"of {SIZE} B; lease TTL {LEASE_TTL_S} s")
        kills = []
        for _ in range(args.kills):
            node = leader_of(cluster, 0)
            t = time.monotonic()
            cluster.brokers[node].kill9()
            first = stream.first_ack_after(0, t)
            kills.append(first - t if first else float("inf"))
            cluster.brokers[node].start()
            wait_until(lambda: full_isr(cluster), 60, what="full ISRs after the restart")
            time.sleep(2)
        print("kill -9 of partition 0's leader -> first acks=all ack on its successor: "
              + ", ".join(f"{k:.2f} s" for k in kills) + f" (bound: lease TTL + 2 s = {LEASE_TTL_S + 2} s)")
        terms = []
        for _ in range(args.terms):
            node = leader_of(cluster, 0)
            t = time.monotonic()
            cluster.brokers[node].stop()
            stopped = time.monotonic()
            time.sleep(2)
            terms.append((stream.longest_gap(0, t - 0.5, time.monotonic()), stopped - t))
            cluster.brokers[node].start()
            wait_until(lambda: full_isr(cluster), 60, what="full ISRs after the restart")
            time.sleep(2)
        print("SIGTERM of partition 0's leader -> longest stretch without an ack: "
              + ", ".join(f"{g:.2f} s (shutdown took {s:.1f} s)" for g, s in terms) + " (target: 1 s)")
        # Catch-up: broker 3 comes back empty while the producer writes.
        victim = cluster.brokers[3]
        victim.kill9()
        wait_until(lambda: not full_isr(cluster), 30, what="broker 3 to leave the ISRs")
        shutil.rmtree(victim.data_dir)
        t = time.monotonic()
        victim.start()
        wait_until(lambda: full_isr(cluster), 300, interval=0.1, what="broker 3 back in every ISR")
        took = time.monotonic() - t
        size = wait_until(lambda: cluster.metric(victim, "tern_log_size_bytes{topic=\"failover\""), 15,
                          what="broker 3's log sizes")
        print(f"catch-up: an emptied broker re-replicated {size / 1e6:.0f} MB and was back in every ISR in "
              f"{took:.1f} s ({size / 1e6 / took:.0f} MB/s, its start-up included) while {args.rate} msgs/s were written")
        stream.stop.set()
        stream.thread.join(120)
        acked = sum(len(s) for s in stream.acked.values())
        lost = read_back(cluster.bootstrap(), stream.acked)
        print(f"sent {stream.sent}, acknowledged {acked}, failed {stream.failed}, lost {lost}")
        return 1 if lost else 0
    finally:
        cluster.stop()
        if args.keep:
            print(f"work dir kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
