#!/usr/bin/env python3
"""Transactional produce on three brokers (etcd, RF=3, min.insync.replicas=2), with
confluent-kafka (librdkafka): MB/s and commit latency p50/p99 for transactions of
--per-txn messages of --size bytes, beside the same load from an idempotent acks=all
producer without transactions (the cost of transactions); then the end-to-end latency
p99 of read_committed and read_uncommitted consumers following the transactional load.

Bounded: --transactions transactions, every wait with a timeout. Prints one line per
figure and a JSON summary last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "compat"))

from confluent_kafka import OFFSET_END, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tern_harness import Broker, Etcd, free_port, tern_bin, wait_until  # noqa: E402

PARTITIONS = 6


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


class Follower(threading.Thread):
    """A consumer at `level` measuring now - record timestamp for each record."""

    def __init__(self, bootstrap: str, topic: str, level: str):
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.latencies: list[float] = []
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{level}",
                           "isolation.level": level, "enable.auto.commit": False,
                           "fetch.wait.max.ms": 10})
        self.c.assign([TopicPartition(topic, p, OFFSET_END) for p in range(PARTITIONS)])

    def run(self) -> None:
        while not self.stop.is_set():
            for m in self.c.consume(500, timeout=0.2):
                if not m.error():
                    self.latencies.append(time.time() * 1000 - m.timestamp()[1])
        self.c.close()


def run_load(bootstrap: str, topic: str, transactional: bool, transactions: int, per_txn: int,
             size: int) -> dict:
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 256 * 1024,
            "compression.type": "none", "enable.idempotence": True, "acks": "all"}
    if transactional:
        conf["transactional.id"] = f"bench-{topic}"
    p = Producer(conf)
    if transactional:
        p.init_transactions(60)
    payload = b"v" * size
    commits: list[float] = []
    started = time.monotonic()
    for t in range(transactions):
        if transactional:
            p.begin_transaction()
        for i in range(per_txn):
            while True:
                try:
                    p.produce(topic, value=payload, partition=(t * per_txn + i) % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.01)
        t0 = time.monotonic()
        if transactional:
            p.commit_transaction(60)
        else:
            assert p.flush(60) == 0
        commits.append((time.monotonic() - t0) * 1000)
    elapsed = time.monotonic() - started
    mb = transactions * per_txn * size / 1e6
    return {"mb_per_s": round(mb / elapsed, 1), "msgs_per_s": round(transactions * per_txn / elapsed),
            "commit_p50_ms": round(statistics.median(commits), 1), "commit_p99_ms": round(pct(commits, 0.99), 1),
            "seconds": round(elapsed, 1)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--transactions", type=int, default=200)
    ap.add_argument("--per-txn", type=int, default=500)
    ap.add_argument("--size", type=int, default=1024)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="txn-bench-"))
    etcd = Etcd(work / "etcd", work / "etcd-logs")
    brokers = [Broker(data_dir=work / f"d{n}", log_dir=work / f"l{n}", port=free_port(), binary=tern_bin(),
                      node_id=n, extra_args=["--etcd", etcd.endpoint, "--metrics", f"127.0.0.1:{free_port()}",
                                             "--http-enable", "false",
                                             "--transaction-state-log-num-partitions", "6",
                                             "--offsets-topic-num-partitions", "6"])
               for n in (1, 2, 3)]
    try:
        etcd.start()
        for b in brokers:
            b.start()
        bootstrap = ",".join(b.address for b in brokers)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                                      for t in ("plain", "txn")]).values():
            f.result(30)
        wait_until(lambda: all(p.leader > 0 for t in ("plain", "txn")
                               for p in admin.list_topics(t, timeout=5).topics[t].partitions.values()),
                   30, what="leaders")
        plain = run_load(bootstrap, "plain", False, args.transactions, args.per_txn, args.size)
        print(f"idempotent acks=all, flush every {args.per_txn}: {plain}", flush=True)
        followers = [Follower(bootstrap, "txn", level) for level in ("read_committed", "read_uncommitted")]
        for f in followers:
            f.start()
        time.sleep(2)
        txn = run_load(bootstrap, "txn", True, args.transactions, args.per_txn, args.size)
        time.sleep(2)
        for f in followers:
            f.stop.set()
            f.join(10)
        e2e = {level: {"p50_ms": round(pct(f.latencies, 0.5), 1), "p99_ms": round(pct(f.latencies, 0.99), 1),
                       "records": len(f.latencies)}
               for level, f in zip(("read_committed", "read_uncommitted"), followers)}
        print(f"transactional, {args.per_txn} x {args.size} B per transaction: {txn}", flush=True)
        print(f"end to end: {e2e}", flush=True)
        cost = round(100 * (1 - txn["mb_per_s"] / plain["mb_per_s"]), 1) if plain["mb_per_s"] else None
        print(json.dumps({"plain": plain, "transactional": txn, "end_to_end": e2e,
                          "throughput_cost_percent": cost}), flush=True)
        return 0
    finally:
        for b in brokers:
            if b.alive():
                b.stop()
        etcd.stop()


if __name__ == "__main__":
    sys.exit(main())
