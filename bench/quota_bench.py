#!/usr/bin/env python3
"""Fairness under load: one client id floods the broker; does another's produce p99 hold?

One broker. A "victim" producer (confluent-kafka, client id "victim", acks=1,
linger.ms=0) sends --rate messages of 100 B a second for --seconds and records each
message's send-to-acknowledgement latency. It runs three times: alone; beside a flood
(a second process, client id "flood", producing 1 KiB messages as fast as librdkafka
can); and beside the same flood with a producer_byte_rate quota of --quota bytes/s on
client id "flood" (`tern quota set`). Prints each phase's p50/p99 and the loaded p99 as
a multiple of the unloaded one (the target: within 2x with the quota). Bounded by
--seconds per phase.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import time
from pathlib import Path

from confluent_kafka import Producer

from single_broker import single_broker

ROOT = Path(__file__).resolve().parent.parent


def flood(broker: str, topic: str, stop_at: float, sent) -> None:
    p = Producer({"bootstrap.servers": broker, "client.id": "flood", "linger.ms": 5,
                  "queue.buffering.max.kbytes": 65536, "log_level": 3})
    value = b"f" * 1024
    acked = [0]

    def delivered(err, msg):
        if err is None:
            acked[0] += 1

    n = 0
    while time.monotonic() < stop_at:
        try:
            p.produce(topic, value, on_delivery=delivered)
            n += 1
        except BufferError:
            p.poll(0.005)
        if n % 1000 == 0:
            p.poll(0)
    p.poll(0)
    sent.value = acked[0]  # acknowledged while the flood ran; the rest is dropped
    p.purge()
    p.flush(1)


def victim(broker: str, topic: str, rate: int, seconds: float) -> list[float]:
    p = Producer({"bootstrap.servers": broker, "client.id": "victim", "acks": 1, "linger.ms": 0,
                  "log_level": 3})
    latencies: list[float] = []

    def delivered(err, msg, sent_at):
        if err is None:
            latencies.append(time.perf_counter() - sent_at)

    value = b"v" * 100
    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        while (now := time.perf_counter()) < due:
            p.poll(min(due - now, 0.001))
        p.produce(topic, value, on_delivery=lambda err, msg, t=time.perf_counter(): delivered(err, msg, t))
        p.poll(0)
    p.flush(30)
    return sorted(latencies)


def pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p))] * 1000 if values else float("nan")


def phase(broker: str, name: str, args, with_flood: bool) -> float:
    sent = mp.Value("q", 0)
    proc = None
    if with_flood:
        proc = mp.Process(target=flood, args=(broker, "flood-topic", time.monotonic() + args.seconds + 2, sent))
        proc.start()
        time.sleep(1.0)  # the flood at full speed before measuring
    lat = victim(broker, "victim-topic", args.rate, args.seconds)
    if proc:
        proc.join(30)
    flood_mb = sent.value * 1024 / 1e6 / (args.seconds + 2) if with_flood else 0.0
    print(f"quota-fairness {name}: victim p50 {pct(lat, 0.5):.2f} ms p99 {pct(lat, 0.99):.2f} ms "
          f"({len(lat)} acked); flood acknowledged {flood_mb:.1f} MB/s", flush=True)
    return pct(lat, 0.99)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--quota", type=int, default=10 * 1024 * 1024)
    args = ap.parse_args()
    tern = os.environ.get("TERN_BIN", str(ROOT / "target/release/tern"))
    with single_broker([], "quota") as broker:
        alone = phase(broker, "alone", args, False)
        flooded = phase(broker, "beside a flood", args, True)
        subprocess.run([tern, "quota", "set", "-b", broker, "--client-id", "flood",
                        "--producer-byte-rate", str(args.quota)], check=True, capture_output=True)
        time.sleep(12)  # the flood phase's rate out of the quota window
        quota = phase(broker, f"beside a flood held to {args.quota / 1e6:.1f} MB/s", args, True)
        print(f"quota-fairness: loaded p99 / unloaded p99 = {flooded / alone:.1f}x without a quota, "
              f"{quota / alone:.1f}x with it (target <= 2x)", flush=True)


if __name__ == "__main__":
    main()
