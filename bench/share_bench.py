#!/usr/bin/env python3
"""Share-group (KIP-932) throughput: records acknowledged per second with 1, 4 and 16
consumers on one partition.

One broker; one topic with one partition holding --records records of --size bytes,
produced before the consumers start (the group starts at the log start:
--group-share-auto-offset-reset earliest). Each consumer is confluent-kafka's
ShareConsumer (librdkafka) in its own process, in implicit acknowledgement mode (each
poll accepts the previous poll's records, close accepts the last). The figure is
records / seconds from the consumers' start until every consumer has closed after the
group received them all; "redelivered" counts records seen more than once (a lock that
ran out), which should be 0. Bounded by --timeout seconds per run.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

from confluent_kafka import Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from single_broker import single_broker

def consume(broker: str, group: str, topic: str, total: int, seen, offsets, done, deadline: float) -> None:
    consumer = ShareConsumer({"bootstrap.servers": broker, "group.id": group, "log_level": 3})
    consumer.subscribe([topic])
    mine = []
    while seen.value < total and time.monotonic() < deadline:
        batch = [m for m in consumer.poll(0.2) if not m.error()]
        if batch:
            with seen.get_lock():
                seen.value += len(batch)
            mine.extend(m.offset() for m in batch)
    # Implicit mode accepts the last poll's records on the next poll or commit: commit
    # them before leaving, so that leaving releases only what was never handed out.
    consumer.commit_sync(30)
    consumer.close()
    offsets.put(mine)
    done.release()


def produce(broker: str, topic: str, records: int, size: int) -> None:
    producer = Producer({"bootstrap.servers": broker, "linger.ms": 20, "batch.size": 1 << 20,
                         "acks": "all", "log_level": 3})
    payload = os.urandom(size)
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, payload, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0


def run(broker: str, topic: str, consumers: int, total: int, timeout: float) -> tuple[float, int, int]:
    group = f"share-bench-{consumers}-{time.monotonic_ns()}"
    ctx = mp.get_context("spawn")
    seen, offsets, done = ctx.Value("q", 0), ctx.Queue(), ctx.Semaphore(0)
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    procs = [ctx.Process(target=consume, args=(broker, group, topic, total, seen, offsets, done, deadline))
             for _ in range(consumers)]
    for p in procs:
        p.start()
    received = []
    for _ in procs:
        received.extend(offsets.get(timeout=timeout + 30))
    elapsed = time.monotonic() - started
    for p in procs:
        p.join(30)
    return elapsed, len(set(received)), len(received) - len(set(received))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--consumers", default="1,4,16")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    with single_broker(["--group-share-auto-offset-reset", "earliest"], "share") as broker:
        print(f"{'consumers':>10}{'records':>10}{'seconds':>10}{'records/s':>12}{'redelivered':>13}")
        for n in (int(s) for s in args.consumers.split(",")):
            topic = f"share-bench-{n}"
            admin = AdminClient({"bootstrap.servers": broker})
            admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(15)
            produce(broker, topic, args.records, args.size)
            elapsed, distinct, again = run(broker, topic, n, args.records, args.timeout)
            rate = distinct / elapsed if elapsed > 0 else 0.0
            note = "" if distinct == args.records else f"  (only {distinct} of {args.records})"
            print(f"{n:>10}{distinct:>10}{elapsed:>10.2f}{rate:>12.0f}{again:>13}{note}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
