#!/usr/bin/env python3
"""Rebalance time of KIP-848 consumer groups against the classic protocol's.

One broker; a topic with as many partitions as members. For each protocol and group
size N (10, 100): N members start together (time until each holds a share and every
partition is held by exactly one: "form"), then one more member joins the settled group (time until
the N+1 members again hold every partition exactly once and the newcomer has one:
"join"). Every member is a confluent-kafka (librdkafka) Consumer in this process, polled
in turn; assignments are tracked from the rebalance callbacks.

Protocols, all with a 1 s heartbeat so that only the protocol differs:
  classic-eager        partition.assignment.strategy=range (stop-the-world)
  classic-cooperative  cooperative-sticky (KIP-429)
  consumer             group.protocol=consumer (KIP-848; the broker assigns, uniform)

Bounded: each phase gives up after --timeout seconds (reported as a timeout).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from single_broker import single_broker

class Member:
    def __init__(self, broker: str, group: str, topic: str, protocol: str):
        common = {"bootstrap.servers": broker, "group.id": group, "enable.auto.commit": False,
                  "auto.offset.reset": "latest", "log_level": 3}
        if protocol == "consumer":
            config = {**common, "group.protocol": "consumer"}
        else:
            strategy = "range" if protocol == "classic-eager" else "cooperative-sticky"
            config = {**common, "partition.assignment.strategy": strategy,
                      "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000}
        self.parts: set[int] = set()
        self.consumer = Consumer(config)
        eager = protocol == "classic-eager"

        def assign(_c, ps):
            if eager:
                self.parts = {tp.partition for tp in ps}
            else:
                self.parts |= {tp.partition for tp in ps}

        def revoke(_c, ps):
            self.parts = set() if eager else self.parts - {tp.partition for tp in ps}

        self.consumer.subscribe([topic], on_assign=assign, on_revoke=revoke, on_lost=revoke)

    def poll(self) -> None:
        self.consumer.poll(0)

    def close(self) -> None:
        self.consumer.close()


def covered(members: list[Member], partitions: int) -> bool:
    """Every member holds a share (members < partitions) and every partition is held once."""
    if not all(m.parts for m in members):
        return False
    flat = [p for m in members for p in m.parts]
    return len(flat) == partitions and set(flat) == set(range(partitions))


def settle(members: list[Member], partitions: int, timeout: float, started: float) -> float | None:
    """Seconds from `started` until the members hold every partition once."""
    while time.monotonic() - started < timeout:
        for m in members:
            m.poll()
        if covered(members, partitions):
            return time.monotonic() - started
        time.sleep(0.005)
    return None


def run(broker: str, protocol: str, n: int, timeout: float) -> tuple[float | None, float | None]:
    topic = f"rebalance-{protocol}-{n}-{os.getpid()}"
    admin = AdminClient({"bootstrap.servers": broker})
    admin.create_topics([NewTopic(topic, n + 1, 1)])[topic].result(30)
    group = f"g-{topic}"
    started = time.monotonic()
    members = [Member(broker, group, topic, protocol) for _ in range(n)]
    try:
        # N members over N+1 partitions: one member holds two.
        form = settle(members, n + 1, timeout, started)
        if form is None:
            return None, None
        started = time.monotonic()
        newcomer = Member(broker, group, topic, protocol)
        members.append(newcomer)
        join = settle(members, n + 1, timeout, started)
        return form, join
    finally:
        for m in members:
            m.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10,100")
    ap.add_argument("--protocols", default="classic-eager,classic-cooperative,consumer")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    with single_broker(["--group-initial-rebalance-delay-ms", "0",
                        "--group-consumer-heartbeat-interval-ms", "1000"], "group") as broker:
        print(f"{'protocol':<22}{'members':>8}{'form (s)':>12}{'join (s)':>12}")
        for n in (int(s) for s in args.sizes.split(",")):
            for protocol in args.protocols.split(","):
                form, join = run(broker, protocol, n, args.timeout)
                show = lambda v: "timeout" if v is None else f"{v:.2f}"  # noqa: E731
                print(f"{protocol:<22}{n:>8}{show(form):>12}{show(join):>12}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
