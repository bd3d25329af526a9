#!/usr/bin/env python3
"""tern-check: does a replicated tern cluster keep every acknowledged write through faults?

Starts a real etcd and three real `tern` brokers on 127.0.0.1, creates the topic `checked`
(6 partitions, replication factor 3, min.insync.replicas=2), produces uniquely numbered
messages with an idempotent acks=all confluent-kafka producer at a bounded rate, and
records every send and every delivery report in a history file (JSON lines). Meanwhile it
injects one fault at a time, chosen at random from a seeded generator and healed before the
next: kill -9 of a partition leader or of the controller, SIGSTOP of a leader for 1.5x the
lease TTL, SIGSTOP of a follower, a broker cut off from etcd, a leader cut off from its
followers (but not from etcd or clients), and, when the broker has a test-only flag for it,
a kill -9 whose restart loses what was not fsynced.

Then it heals everything, stops producing, waits until every partition has 3 in-sync
replicas, reads every partition from its log start to its high watermark and checks that
every acknowledged message is there, at the offset it was acknowledged with, once, and in
send order per partition. Last, an offline audit: it stops the brokers with SIGTERM and
compares every replica's segment files batch by batch (base offset, last offset delta,
leader epoch, CRC) below the partition's high watermark.

Exit status 1 on any lost, inconsistent, duplicated, out-of-order or unknown message or any
replica mismatch; 2 if the run itself could not be set up; else 0. The last line of stdout
is a JSON summary. Broker logs and the history stay in the work dir on failure (or with
--keep / --work-dir).

Every wait is bounded; every process started here is ended here, by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from array import array
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "compat"))  # tern_harness
sys.path.insert(0, str(HERE))  # faults

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import powerloss  # noqa: E402
from faults import CuttableProxy  # noqa: E402
from tern_harness import Broker, BrokerError, Etcd, free_port, tern_bin, wait_until  # noqa: E402

TOPIC = "checked"
PARTITIONS = 6
REPLICATION_FACTOR = 3
MIN_INSYNC = 2
LEASE_TTL_S = 3
REPLICA_LAG_TIME_MAX_MS = 4000
# Small segments, so that rolls happen during a run and the audit reads several files.
SEGMENT_BYTES = 8 * 1024 * 1024

FAULT_KINDS = (
    "kill_leader",
    "kill_controller",
    "pause_leader",
    "pause_follower",
    "etcd_cut",
    "peer_cut",
    "power_loss",
)

# Bounds of the waits between faults and at the end.
LEADERS_WAIT_S = 30.0
ISR_WAIT_BETWEEN_FAULTS_S = 20.0
FINAL_ISR_WAIT_S = 90.0
READ_WAIT_S = 180.0
METADATA_TIMEOUT_S = 5.0

# Record batch header (Kafka's v2 format): baseOffset i64, batchLength i32,
# partitionLeaderEpoch i32, magic i8, crc u32, attributes i16, lastOffsetDelta i32.
BATCH_HEADER = struct.Struct(">qiibIhi")
LOG_OVERHEAD = 12  # baseOffset + batchLength: batchLength counts the bytes after them
MIN_BATCH_LENGTH = 49 - LOG_OVERHEAD  # a v2 batch with no records is 61 bytes


def now() -> float:
    return time.monotonic()


def log(msg: str) -> None:
    print(f"[tern-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- history --------------------------------------------------------------------------

class History:
    """JSON lines, one per event; written from the producer thread and the fault loop."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "w", buffering=1 << 20)
        self.lock = threading.Lock()
        self.t0 = now()

    def write(self, **event) -> None:
        event["t"] = round(now() - self.t0, 4)
        line = json.dumps(event, separators=(",", ":"))
        with self.lock:
            if not self.file.closed:
                self.file.write(line + "\n")

    def close(self) -> None:
        with self.lock:
            self.file.close()


# ---- the cluster ----------------------------------------------------------------------

class Node:
    """One broker, with the proxy it reaches etcd through and the proxy its peers reach it
    through (its --peer-advertise)."""

    def __init__(self, node_id: int, work: Path, etcd: Etcd, binary: Path, power_loss: bool = False):
        self.node_id = node_id
        data_dir = work / f"node-{node_id}" / "data"
        # Where tools/powerloss_shim.c keeps what this broker made durable (power_loss).
        self.shadow = work / f"node-{node_id}" / "durable"
        shim = powerloss.environment(data_dir, self.shadow, base={}) if power_loss else {}
        self.port = free_port()
        self.etcd_proxy = CuttableProxy(etcd.client_port)
        self.peer_proxy = CuttableProxy(self.port)
        self.paused = False
        self.broker = Broker(
            data_dir=data_dir, log_dir=work / f"node-{node_id}" / "logs", extra_env=shim,
            port=self.port, binary=binary, node_id=node_id,
            extra_args=["--etcd", self.etcd_proxy.endpoint, "--etcd-lease-ttl-secs", str(LEASE_TTL_S),
                        "--metrics", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{free_port()}",
                        "--peer-advertise", self.peer_proxy.address,
                        "--replica-lag-time-max-ms", str(REPLICA_LAG_TIME_MAX_MS),
                        "--log-segment-bytes", str(SEGMENT_BYTES)],
        )

    @property
    def address(self) -> str:
        return self.broker.address

    def alive(self) -> bool:
        return self.broker.alive()

    def usable(self) -> bool:
        return self.alive() and not self.paused

    def start(self, extra: list[str] | None = None) -> None:
        """Starts the broker (with `extra` flags for this start only), retrying a failed start."""
        base = list(self.broker.extra_args)
        self.broker.extra_args = base + (extra or [])
        try:
            for attempt in range(3):
                try:
                    self.broker.start()
                    return
                except BrokerError as e:
                    log(f"broker {self.node_id} failed to start (attempt {attempt + 1}): {str(e)[:300]}")
                    time.sleep(1.0)
            raise BrokerError(f"broker {self.node_id} would not start; logs in {self.broker.log_dir}")
        finally:
            self.broker.extra_args = base

    def stop_signal(self) -> None:
        if self.alive():
            os.kill(self.broker.pid, signal.SIGSTOP)
            self.paused = True

    def cont_signal(self) -> None:
        if self.alive() and self.paused:
            os.kill(self.broker.pid, signal.SIGCONT)
        self.paused = False


class Cluster:
    def __init__(self, work: Path, binary: Path, brokers: int = 3, power_loss: bool = False):
        self.work = work
        self.binary = binary
        self.etcd = Etcd(work / "etcd", work / "etcd-logs")
        self.nodes: dict[int, Node] = {n: Node(n, work, self.etcd, binary, power_loss) for n in range(1, brokers + 1)}

    def start(self) -> None:
        self.etcd.start()
        for n in self.nodes.values():
            n.start()
        wait_until(lambda: len(self.metadata().brokers) == len(self.nodes), 30, what="all brokers registered")
        wait_until(lambda: self.metadata().controller_id > 0, 30, what="a controller")

    def bootstrap(self) -> str:
        usable = [n.address for n in self.nodes.values() if n.usable()]
        return ",".join(usable or [n.address for n in self.nodes.values()])

    def metadata(self, topic: str | None = None):
        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": 3000})
        return admin.list_topics(topic=topic, timeout=METADATA_TIMEOUT_S)

    def partitions(self) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition -> (leader, replicas, isr), as one broker's Metadata tells it."""
        md = self.metadata(TOPIC)
        t = md.topics.get(TOPIC)
        if t is None or t.error is not None:
            return {}
        return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}

    def all_led(self) -> bool:
        md = self.metadata(TOPIC)
        t = md.topics.get(TOPIC)
        if t is None or t.error is not None or len(t.partitions) != PARTITIONS:
            return False
        return all(p.leader > 0 and p.leader in md.brokers and p.error is None for p in t.partitions.values())

    def all_in_sync(self) -> bool:
        parts = self.partitions()
        return len(parts) == PARTITIONS and all(l > 0 and len(isr) == REPLICATION_FACTOR
                                                for l, _, isr in parts.values())

    def create_topic(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap()})
        topic = NewTopic(TOPIC, PARTITIONS, REPLICATION_FACTOR, config={"min.insync.replicas": str(MIN_INSYNC)})
        admin.create_topics([topic])[TOPIC].result(30)
        wait_until(self.all_led, 30, what="a leader for every partition")
        wait_until(self.all_in_sync, 60, interval=0.25, what="3 in-sync replicas for every partition")

    def heal_all(self) -> None:
        for n in self.nodes.values():
            n.etcd_proxy.heal()
            n.peer_proxy.heal()
            n.cont_signal()
        for n in self.nodes.values():
            if not n.alive():
                n.start()

    def stop_all(self) -> list[int]:
        """SIGTERM every broker (SIGKILL after the harness's bound); the ids that did not stop cleanly."""
        unclean = []
        for n in self.nodes.values():
            n.cont_signal()
            try:
                n.broker.stop()
            except BrokerError as e:
                log(f"broker {n.node_id} did not stop cleanly: {str(e)[:300]}")
                unclean.append(n.node_id)
        return unclean

    def close(self) -> None:
        for n in self.nodes.values():
            n.cont_signal()
            n.broker.kill9()
            n.etcd_proxy.close()
            n.peer_proxy.close()
        self.etcd.stop()


# ---- the producer ---------------------------------------------------------------------

def value_of(i: int) -> bytes:
    return b"%012d" % i


PENDING, ACKED, FAILED = 0, 1, 2


class ProducerLoop(threading.Thread):
    """Sends message i (value `%012d`, key `k<i>`) at `rate` per second until stopped, then
    flushes. status[i], partition[i], offset[i] hold what the delivery report said."""

    def __init__(self, cluster: Cluster, history: History, rate: int, message_timeout_ms: int):
        super().__init__(name="producer", daemon=True)
        self.cluster = cluster
        self.history = history
        self.rate = rate
        self.message_timeout_ms = message_timeout_ms
        self.stop_event = threading.Event()
        self.status = array("b")
        self.partition = array("b")
        self.offset = array("q")
        self.acked = 0
        self.acked_without_offset = 0
        self.failed = 0
        self.errors: dict[str, int] = {}
        self.fatal: list[str] = []
        self._fatal_pending: str | None = None
        self.unflushed = 0
        self.exception: BaseException | None = None

    @property
    def sent(self) -> int:
        return len(self.status)

    def _new_producer(self) -> Producer:
        return Producer({
            "bootstrap.servers": self.cluster.bootstrap(),
            "enable.idempotence": True,
            "acks": "all",
            "message.timeout.ms": self.message_timeout_ms,
            "request.timeout.ms": 10000,
            "linger.ms": 5,
            "retry.backoff.ms": 100,
            "metadata.max.age.ms": 5000,
            "socket.timeout.ms": 10000,
            "error_cb": self._on_error,
        })

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal_pending = f"{err.name()}: {err.str()}"

    def _on_delivery(self, err, msg) -> None:
        try:
            i = int(msg.value())
        except (TypeError, ValueError):
            return
        p = msg.partition()
        self.partition[i] = p if p is not None and 0 <= p < 127 else -1
        if err is None:
            o = msg.offset()
            self.status[i] = ACKED
            self.acked += 1
            if o is None or o < 0:
                # Delivered, but the client was not told where: librdkafka's implicit ack (a
                # request failed retriably, NOT_LEADER_OR_FOLLOWER or a timeout, yet a later
                # one of the same partition succeeded, so the earlier messages were in the
                # log after all; rdkafka_request.c). Checked for presence.
                self.offset[i] = -1
                self.acked_without_offset += 1
                self.history.write(ev="ack", v=i, p=p, o=-1, no_offset=True)
            else:
                self.offset[i] = o
                self.history.write(ev="ack", v=i, p=p, o=o)
        else:
            self.status[i] = FAILED
            self.failed += 1
            name = err.name()
            self.errors[name] = self.errors.get(name, 0) + 1
            self.history.write(ev="err", v=i, p=p, err=name)

    @staticmethod
    def _fatal_reason(e: KafkaException) -> str | None:
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if err is not None and (err.fatal() or err.code() in (KafkaError._FATAL, KafkaError._INCONSISTENT)):
            return f"{err.name()}: {err.str()}"
        return None

    def _drain(self, producer: Producer) -> None:
        """Collects the delivery reports of a producer that failed fatally (it fails what it holds)."""
        for step in (lambda: producer.flush(10), lambda: producer.purge(), lambda: producer.flush(5)):
            try:
                step()
            except KafkaException as e:
                log(f"while draining the failed producer: {e}")

    def _recreate_after_fatal(self, producer: Producer, reason: str) -> Producer:
        self.fatal.append(reason)
        self.history.write(ev="fatal", err=reason, sent=self.sent)
        log(f"fatal producer error ({reason}); recreating the producer")
        self._drain(producer)
        return self._new_producer()

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.exception = e
            log(f"producer thread crashed: {e!r}\n{traceback.format_exc()}")

    def _run(self) -> None:
        producer = self._new_producer()
        started = now()
        while not self.stop_event.is_set():
            due = int((now() - started) * self.rate)
            burst = 0
            while self.sent < due and burst < 500 and self._fatal_pending is None:
                i = self.sent
                try:
                    producer.produce(TOPIC, key=b"k%d" % i, value=value_of(i), on_delivery=self._on_delivery)
                except BufferError:
                    break  # the queue is full: poll, and send the rest later
                except KafkaException as e:
                    reason = self._fatal_reason(e)
                    if reason is None:
                        raise
                    self._fatal_pending = reason
                    break
                self.status.append(PENDING)
                self.partition.append(-1)
                self.offset.append(-1)
                self.history.write(ev="send", v=i)
                burst += 1
            try:
                producer.poll(0.002)
            except KafkaException as e:
                reason = self._fatal_reason(e)
                if reason is None:
                    raise
                self._fatal_pending = reason
            except SystemError as e:
                # confluent-kafka has been seen to raise this from poll() once the producer
                # failed fatally; only then is it treated as the fatal error.
                if self._fatal_pending is None:
                    raise
                log(f"poll raised {e!r} after the fatal error")
            if self._fatal_pending is not None:
                reason, self._fatal_pending = self._fatal_pending, None
                producer = self._recreate_after_fatal(producer, reason)
        # Stopped: wait for every report (bounded by message.timeout.ms and some).
        deadline = now() + self.message_timeout_ms / 1000 + 30
        while now() < deadline:
            try:
                self.unflushed = producer.flush(max(1.0, deadline - now()))
                break
            except KafkaException as e:
                reason = self._fatal_reason(e)
                if reason is None:
                    raise
                self._fatal_pending = reason
                break
        if self._fatal_pending is not None:
            self.fatal.append(self._fatal_pending)
            self.history.write(ev="fatal", err=self._fatal_pending, sent=self.sent)
            self._drain(producer)
            self.unflushed = len(producer)


# ---- faults ---------------------------------------------------------------------------

class Faults:
    def __init__(self, cluster: Cluster, history: History, rng: random.Random, kinds: list[str]):
        self.cluster = cluster
        self.history = history
        self.rng = rng
        self.kinds = kinds
        self.injected: dict[str, int] = {k: 0 for k in kinds}
        self.skipped: dict[str, int] = {}
        self.unrecovered = 0
        self.isr_not_full = 0
        self.crashes: list[dict] = []

    def _pick_partition(self) -> tuple[int, tuple[int, list[int], list[int]]] | None:
        try:
            parts = self.cluster.partitions()
        except KafkaException as e:
            log(f"metadata failed: {e}")
            return None
        if not parts:
            return None
        p = self.rng.choice(sorted(parts))
        return p, parts[p]

    def _node(self, node_id: int) -> Node | None:
        n = self.cluster.nodes.get(node_id)
        return n if n is not None and n.usable() else None

    def inject_one(self) -> None:
        kind = self.rng.choice(self.kinds)
        t0 = now()
        detail = getattr(self, kind)()
        if detail is None:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
            self.history.write(ev="fault_skipped", kind=kind)
            return
        self.injected[kind] += 1
        self.history.write(ev="fault", kind=kind, secs=round(now() - t0, 2), **detail)
        log(f"fault {sum(self.injected.values())}: {kind} {detail} ({now() - t0:.1f}s)")

    def restart_crashed(self) -> None:
        """A broker that exited without being killed here is counted, and started again."""
        for n in self.cluster.nodes.values():
            if n.broker.proc is not None and not n.alive():
                code = n.broker.proc.returncode
                self.crashes.append({"node": n.node_id, "exit": code, "log": str(n.broker.log_paths[-1])})
                self.history.write(ev="broker_exited", node=n.node_id, exit=code)
                log(f"broker {n.node_id} exited by itself (code {code}); restarting it")
                n.start()

    def recover(self) -> None:
        """Waits (bounded) until every partition is led again and, softly, fully in sync."""
        self.restart_crashed()
        t0 = now()
        try:
            wait_until(self.cluster.all_led, LEADERS_WAIT_S, interval=0.2, what="every partition led")
        except AssertionError as e:
            self.unrecovered += 1
            self.history.write(ev="unrecovered", what="leaders", error=str(e))
            log(f"not recovered: {e}")
            return
        try:
            wait_until(self.cluster.all_in_sync, ISR_WAIT_BETWEEN_FAULTS_S, interval=0.25, what="ISR of 3")
        except AssertionError:
            self.isr_not_full += 1
            self.history.write(ev="isr_not_full", secs=round(now() - t0, 2))
            log(f"ISR not back to 3 within {ISR_WAIT_BETWEEN_FAULTS_S}s; going on")

    # Each fault returns what it did (for the history), or None when it could not be applied.

    def _kill_and_restart(self, n: Node, extra: list[str] | None = None) -> float:
        n.broker.kill9()
        down = self.rng.uniform(1.0, 3.0)
        time.sleep(down)
        n.start(extra)
        return down

    def kill_leader(self):
        picked = self._pick_partition()
        if picked is None:
            return None
        p, (leader, _, _) = picked
        n = self._node(leader)
        if n is None:
            return None
        down = self._kill_and_restart(n)
        return {"node": leader, "p": p, "down": round(down, 2)}

    def kill_controller(self):
        try:
            controller = self.cluster.metadata().controller_id
        except KafkaException:
            return None
        n = self._node(controller)
        if n is None:
            return None
        down = self._kill_and_restart(n)
        return {"node": controller, "down": round(down, 2)}

    def power_loss(self):
        """A leader's machine loses power: SIGKILL, then its data dir is cut back to what
        it had asked the kernel to make durable (tools/powerloss_shim.c, under which every
        broker of the run starts), and it boots again."""
        picked = self._pick_partition()
        if picked is None:
            return None
        p, (leader, _, _) = picked
        n = self._node(leader)
        if n is None:
            return None
        n.broker.kill9()
        lost = powerloss.apply(n.broker.data_dir, n.shadow)
        down = self.rng.uniform(1.0, 3.0)
        time.sleep(down)
        n.start()
        return {"node": leader, "p": p, "down": round(down, 2),
                "files_cut": len(lost["rewritten"]) + len(lost["removed"]), "bytes_lost": lost["bytes_dropped"]}

    def _pause(self, n: Node, secs: float) -> None:
        n.stop_signal()
        try:
            time.sleep(secs)
        finally:
            n.cont_signal()

    def pause_leader(self):
        picked = self._pick_partition()
        if picked is None:
            return None
        p, (leader, _, _) = picked
        n = self._node(leader)
        if n is None:
            return None
        secs = 1.5 * LEASE_TTL_S
        self._pause(n, secs)
        return {"node": leader, "p": p, "paused": secs}

    def pause_follower(self):
        picked = self._pick_partition()
        if picked is None:
            return None
        p, (leader, replicas, _) = picked
        followers = [r for r in replicas if r != leader and self._node(r) is not None]
        if not followers:
            return None
        victim = self.rng.choice(sorted(followers))
        secs = self.rng.uniform(2.0, 6.0)
        self._pause(self.cluster.nodes[victim], secs)
        return {"node": victim, "p": p, "leader": leader, "paused": round(secs, 2)}

    def etcd_cut(self):
        victim = self.rng.choice(sorted(self.cluster.nodes))
        n = self._node(victim)
        if n is None:
            return None
        n.etcd_proxy.cut()
        try:
            time.sleep(5.0)
        finally:
            n.etcd_proxy.heal()
        return {"node": victim, "cut": 5.0}

    def peer_cut(self):
        picked = self._pick_partition()
        if picked is None:
            return None
        p, (leader, _, _) = picked
        n = self._node(leader)
        if n is None:
            return None
        n.peer_proxy.cut()
        try:
            time.sleep(5.0)
        finally:
            n.peer_proxy.heal()
        return {"node": leader, "p": p, "cut": 5.0}


# ---- reading back ---------------------------------------------------------------------

def read_everything(bootstrap: str) -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, tuple[int, int]], bool]:
    """Every partition from its log start to its high watermark: {p: [(offset, value)]},
    {p: (low, high)}, and whether it got to every high watermark in time."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "tern-check-reader", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "isolation.level": "read_uncommitted",
        "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100,
    })
    try:
        marks = {}
        for p in range(PARTITIONS):
            marks[p] = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15, cached=False)
        consumer.assign([TopicPartition(TOPIC, p, low) for p, (low, _) in marks.items()])
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
        next_offset = {p: low for p, (low, _) in marks.items()}
        deadline = now() + READ_WAIT_S
        while any(next_offset[p] < marks[p][1] for p in marks) and now() < deadline:
            for m in consumer.consume(1000, 1.0):
                if m.error() is not None:
                    if m.error().code() != KafkaError._PARTITION_EOF:
                        log(f"read error: {m.error()}")
                    continue
                got[m.partition()].append((m.offset(), m.value()))
                next_offset[m.partition()] = m.offset() + 1
        complete = all(next_offset[p] >= marks[p][1] for p in marks)
        return got, marks, complete
    finally:
        consumer.close()


def check_history(status, part, off, got: dict[int, list[tuple[int, bytes]]],
                  producer_epoch_of=None) -> dict:
    """Checks what was read against the history: status[i] (PENDING/ACKED/FAILED),
    part[i] and off[i] (where message i was acknowledged) for every message sent, and
    got = {partition: [(offset, value)]} as read.

    `producer_epoch_of(p, o)`, when given, is the producer epoch of the batch holding
    offset o of partition p (from the replica audit). A value stored twice under two
    different producer epochs was re-sent by the client after it bumped its epoch
    (KIP-360: librdkafka drains, bumps and re-sends what it had no answer for); the
    broker deduplicates within a producer epoch only, as Kafka's does, so such copies are
    counted apart (`resent_after_epoch_bump`) and do not fail the run. A copy within one
    epoch is a broker deduplication failure (`duplicates`)."""
    sent = len(status)
    seen_at: dict[int, tuple[int, int]] = {}  # value -> where it was first read
    positions: dict[int, list[tuple[int, int]]] = {}
    at_offset: dict[tuple[int, int], int] = {}
    duplicates = unknown = resent = 0
    for p, records in got.items():
        for o, raw in records:
            try:
                v = int(raw)
            except (TypeError, ValueError):
                v = -1
            if not 0 <= v < sent:
                unknown += 1
                continue
            at_offset[(p, o)] = v
            positions.setdefault(v, []).append((p, o))
            if v in seen_at:
                first = seen_at[v]
                epochs = None if producer_epoch_of is None else (producer_epoch_of(*first), producer_epoch_of(p, o))
                if epochs is not None and None not in epochs and epochs[0] != epochs[1]:
                    resent += 1
                else:
                    duplicates += 1
            else:
                seen_at[v] = (p, o)
    lost = inconsistent = 0
    examples: dict[str, list] = {"lost": [], "inconsistent": [], "out_of_order": []}
    for i in range(sent):
        if status[i] != ACKED:
            continue
        where = seen_at.get(i)
        acked_at = (part[i], off[i])
        bad = False
        if where is None:
            lost += 1
            if len(examples["lost"]) < 10:
                examples["lost"].append({"v": i, "p": part[i], "o": off[i]})
        elif off[i] >= 0 and acked_at not in positions.get(i, []):
            bad = True
        elif off[i] < 0 and where[0] != part[i] and part[i] >= 0:
            bad = True  # told only the partition: it must be there
        holder = at_offset.get(acked_at) if off[i] >= 0 else None
        if holder is not None and holder != i:
            bad = True
        if bad:
            inconsistent += 1
            if len(examples["inconsistent"]) < 10:
                examples["inconsistent"].append({"v": i, "acked": list(acked_at), "read": list(where or ()),
                                                 "holder": holder})
    # Per partition and producer epoch, acknowledged values must be read in send order:
    # the idempotent producer orders within an epoch; what it re-sends after bumping its
    # epoch lands after what the old epoch wrote meanwhile (counted above as re-sent).
    out_of_order = 0
    for p, records in got.items():
        last: dict[int | None, int] = {}
        for o, raw in records:
            v = at_offset.get((p, o))
            if v is None or status[v] != ACKED:
                continue
            epoch = None if producer_epoch_of is None else producer_epoch_of(p, o)
            if v < last.get(epoch, -1):
                out_of_order += 1
                if len(examples["out_of_order"]) < 10:
                    examples["out_of_order"].append({"p": p, "o": o, "v": v, "after": last[epoch],
                                                     "producer_epoch": epoch})
            last[epoch] = max(last.get(epoch, -1), v)
    read = sum(len(r) for r in got.values())
    acked_present = sum(1 for i in range(sent) if status[i] == ACKED and i in seen_at)
    unacked_present = len(seen_at) - acked_present
    return {"read": read, "lost": lost, "inconsistent": inconsistent, "duplicates": duplicates,
            "resent_after_epoch_bump": resent,
            "out_of_order": out_of_order, "unknown": unknown, "unacked_present": unacked_present,
            "examples": {k: v for k, v in examples.items() if v}}


# ---- the offline replica audit --------------------------------------------------------

def parse_segments(partition_dir: Path) -> tuple[list[tuple[int, int, int, int]], int]:
    """The batches of one replica's log: [(base offset, last offset delta, leader epoch, crc)],
    and how many bytes of torn tail were skipped. Reads only headers (segments may be
    preallocated, so a zero length ends a segment)."""
    batches = []
    torn = 0
    for seg in sorted(partition_dir.glob("*.log")):
        size = seg.stat().st_size
        with open(seg, "rb") as f:
            pos = 0
            while pos + BATCH_HEADER.size <= size:
                f.seek(pos)
                head = f.read(BATCH_HEADER.size)
                if len(head) < BATCH_HEADER.size:
                    break
                base, length, epoch, magic, crc, _attrs, delta = BATCH_HEADER.unpack(head)
                if length == 0:
                    break
                if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size or magic != 2:
                    torn += size - pos
                    break
                batches.append((base, delta, epoch, crc))
                pos += LOG_OVERHEAD + length
    return batches, torn


def producer_epochs(partition_dir: Path) -> list[tuple[int, int, int]]:
    """[(base offset, last offset, producer epoch)] of one replica's batches, ascending."""
    found = []
    for seg in sorted(partition_dir.glob("*.log")):
        size = seg.stat().st_size
        with open(seg, "rb") as f:
            pos = 0
            while pos + 61 <= size:
                f.seek(pos)
                head = f.read(61)
                base, length = struct.unpack_from(">qi", head, 0)
                if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size:
                    break
                delta = struct.unpack_from(">i", head, 23)[0]
                epoch = struct.unpack_from(">h", head, 51)[0]
                found.append((base, base + delta, epoch))
                pos += LOG_OVERHEAD + length
    return found


def producer_epoch_lookup(cluster: "Cluster"):
    """producer_epoch_of(partition, offset) over the replica with the most batches."""
    return epoch_lookup_in([n.broker.data_dir for n in cluster.nodes.values()])


def epoch_lookup_in(data_dirs: list[Path]):
    """producer_epoch_of(partition, offset) over the replica (of those in `data_dirs`)
    with the most batches; bisects a precomputed table, so a run's millions of lookups
    stay cheap."""
    import bisect
    tables = {}
    for p in range(PARTITIONS):
        best = []
        for data_dir in data_dirs:
            d = data_dir / f"{TOPIC}-{p}"
            if d.is_dir():
                batches = producer_epochs(d)
                if len(batches) > len(best):
                    best = batches
        tables[p] = best

    bases = {p: [b[0] for b in table] for p, table in tables.items()}

    def producer_epoch_of(p: int, o: int):
        table = tables.get(p, [])
        i = bisect.bisect_right(bases.get(p, []), o) - 1
        if i >= 0 and table[i][0] <= o <= table[i][1]:
            return table[i][2]
        return None
    return producer_epoch_of


def read_checkpoint(path: Path) -> dict[str, int]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def audit_replicas(cluster: Cluster) -> dict:
    mismatches = 0
    details = []
    per_partition = {}
    for p in range(PARTITIONS):
        name = f"{TOPIC}-{p}"
        replicas = {}
        for node_id, n in cluster.nodes.items():
            data = n.broker.data_dir
            hw = read_checkpoint(data / "replication-offset-checkpoint").get(name)
            d = data / name
            batches, torn = parse_segments(d) if d.is_dir() else ([], 0)
            replicas[node_id] = {"hw": hw, "batches": batches, "torn": torn}
        hws = [r["hw"] for r in replicas.values() if r["hw"] is not None]
        hw = max(hws) if hws else 0
        ref_id = max(replicas, key=lambda r: (replicas[r]["hw"] or -1, len(replicas[r]["batches"])))

        def prefix(batches):
            return [b for b in batches if b[0] < hw]

        ref = prefix(replicas[ref_id]["batches"])
        ref_end = (ref[-1][0] + ref[-1][1] + 1) if ref else 0
        gaps = sum(1 for a, b in zip(ref, ref[1:]) if b[0] != a[0] + a[1] + 1)
        bad = []
        if ref_end < hw:
            bad.append({"node": ref_id, "why": f"log ends at {ref_end}, below the high watermark {hw}"})
        for node_id, r in replicas.items():
            if node_id == ref_id:
                continue
            mine = prefix(r["batches"])
            if mine != ref:
                first = next((k for k, (a, b) in enumerate(zip(mine, ref)) if a != b), min(len(mine), len(ref)))
                bad.append({"node": node_id, "why": "batches differ from broker %d's" % ref_id,
                            "first_diff": {"index": first,
                                           "mine": list(mine[first]) if first < len(mine) else None,
                                           "ref": list(ref[first]) if first < len(ref) else None},
                            "batches": len(mine), "ref_batches": len(ref)})
        mismatches += len(bad)
        details += [dict(p=p, **b) for b in bad]
        per_partition[p] = {"hw": hw, "batches": len(ref), "epochs": sorted({b[2] for b in ref}),
                            "replica_hws": {n: r["hw"] for n, r in replicas.items()},
                            "replica_log_ends": {n: (r["batches"][-1][0] + r["batches"][-1][1] + 1)
                                                 if r["batches"] else 0 for n, r in replicas.items()},
                            "torn_bytes": {n: r["torn"] for n, r in replicas.items() if r["torn"]},
                            "gaps": gaps}
    return {"replica_mismatches": mismatches, "mismatch_details": details[:20], "partitions": per_partition}


# ---- the run --------------------------------------------------------------------------

def panics_in_logs(cluster: Cluster) -> dict:
    """How many times brokers panicked (Rust's "panicked at"), and where, from their logs."""
    count, where = 0, {}
    for n in cluster.nodes.values():
        for path in n.broker.log_paths:
            try:
                text = path.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if " panicked at " in line:
                    count += 1
                    at = line.split(" panicked at ", 1)[1].rstrip(":")
                    where[at] = where.get(at, 0) + 1
    return {"count": count, "where": dict(sorted(where.items(), key=lambda kv: -kv[1])[:10])}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="tern-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to inject faults (default 60)")
    ap.add_argument("--seed", type=int, default=None, help="seed of the fault schedule (default: random, printed)")
    ap.add_argument("--rate", type=int, default=1000, help="messages per second (default 1000)")
    ap.add_argument("--faults", default="all",
                    help="comma-separated fault kinds, 'all' or 'none' (kinds: %s)" % ", ".join(FAULT_KINDS))
    ap.add_argument("--pause-min", type=float, default=1.0, help="least pause after a fault has healed (s)")
    ap.add_argument("--pause-max", type=float, default=3.0, help="longest pause after a fault has healed (s)")
    ap.add_argument("--message-timeout-ms", type=int, default=60000, help="the producer's message.timeout.ms")
    ap.add_argument("--work-dir", type=Path, default=None, help="where brokers, etcd and the history live "
                    "(default: a temp dir, removed after a passing run unless --keep)")
    # (`--recheck WORK_DIR` alone checks a kept run's history again, offline.)
    ap.add_argument("--keep", action="store_true", help="keep the temp work dir even when the run passes")
    ap.add_argument("--tern-bin", type=Path, default=None, help="the tern binary (default: $TERN_BIN or target/release/tern)")
    return ap.parse_args(argv)


def choose_kinds(spec: str) -> tuple[list[str], list[str]]:
    """(enabled kinds, kinds left out and why)."""
    if spec == "none":
        return [], []
    wanted = list(FAULT_KINDS) if spec == "all" else [k.strip() for k in spec.split(",") if k.strip()]
    unknown = [k for k in wanted if k not in FAULT_KINDS]
    if unknown:
        raise SystemExit(f"unknown fault kinds: {unknown} (known: {', '.join(FAULT_KINDS)})")
    return wanted, []


def print_table(summary: dict) -> None:
    rows = [("seed", summary["seed"]), ("fault seconds", summary["fault_seconds"]),
            ("sent", summary["sent"]), ("acknowledged", summary["acknowledged"]),
            ("acknowledged without an offset", summary["acked_without_offset"]),
            ("failed (not acknowledged)", summary["failed"]), ("read back", summary["read"]),
            ("unacknowledged but present", summary["unacked_present"]),
            ("LOST", summary["lost"]), ("INCONSISTENT", summary["inconsistent"]),
            ("DUPLICATES", summary["duplicates"]),
            ("RE-SENT AFTER A CLIENT EPOCH BUMP", summary["resent_after_epoch_bump"]), ("OUT OF ORDER", summary["out_of_order"]),
            ("UNKNOWN values", summary["unknown"]), ("REPLICA MISMATCHES", summary["replica_mismatches"]),
            ("fatal producer errors", summary["fatal_producer_errors"]),
            ("brokers that exited by themselves", len(summary["broker_exits"])),
            ("broker panics (in their logs)", summary["panics"]["count"]),
            ("faults injected", summary["faults_total"])]
    rows += [(f"  {k}", v) for k, v in summary["faults"].items()]
    rows += [("not recovered in time", summary["unrecovered"]), ("ISR not back to 3 between faults",
                                                                  summary["isr_not_full"]),
             ("all in sync at the end", summary["final_in_sync"]), ("read to every HW", summary["read_complete"])]
    width = max(len(k) for k, _ in rows)
    print("-" * (width + 14))
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    print("-" * (width + 14))
    if summary["producer_errors"]:
        print("producer delivery errors:", summary["producer_errors"])
    for k, v in summary.get("examples", {}).items():
        print(f"examples of {k}: {v}")
    if summary["panics"]["count"]:
        print("broker panics at:", summary["panics"]["where"])
    for d in summary.get("mismatch_details", []):
        print("replica mismatch:", d)


def run(args) -> int:
    binary = Path(args.tern_bin or tern_bin()).resolve()
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    temp = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tern-check-")) if temp else args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    kinds, left_out = choose_kinds(args.faults)
    log(f"seed {seed}; work dir {work}; faults {kinds or 'none'}" + (f"; left out: {left_out}" if left_out else ""))
    history = History(work / "history.jsonl")
    history.write(ev="start", seed=seed, faults=kinds, rate=args.rate, seconds=args.seconds, binary=str(binary))
    cluster = Cluster(work, binary, power_loss="power_loss" in kinds)
    producer = None
    try:
        try:
            cluster.start()
            cluster.create_topic()
        except (AssertionError, BrokerError, KafkaException) as e:
            log(f"could not set up the cluster: {e}; logs in {work}")
            return 2
        producer = ProducerLoop(cluster, history, args.rate, args.message_timeout_ms)
        producer.start()
        faults = Faults(cluster, history, rng, kinds)
        t0 = now()
        time.sleep(min(2.0, args.seconds))  # some traffic before the first fault
        while now() - t0 < args.seconds and producer.is_alive():
            if kinds:
                faults.inject_one()
                faults.recover()
            time.sleep(min(rng.uniform(args.pause_min, args.pause_max), max(0.0, args.seconds - (now() - t0))))
        fault_seconds = round(now() - t0, 1)
        log(f"faults done after {fault_seconds}s; healing and flushing")
        faults.restart_crashed()
        cluster.heal_all()
        producer.stop_event.set()
        producer.join(args.message_timeout_ms / 1000 + 60)
        if producer.is_alive():
            log("the producer did not finish flushing in time")
        try:
            wait_until(cluster.all_in_sync, FINAL_ISR_WAIT_S, interval=0.5, what="3 in-sync replicas everywhere")
            final_in_sync = True
        except AssertionError as e:
            log(str(e))
            final_in_sync = False
        final_partitions = {}
        try:
            final_partitions = {p: {"leader": l, "isr": isr} for p, (l, _, isr) in cluster.partitions().items()}
        except KafkaException:
            pass
        log("reading every partition back")
        got, marks, read_complete = read_everything(cluster.bootstrap())
        checked = check_history(producer.status, producer.partition, producer.offset, got)
        unclean = cluster.stop_all()
        log("auditing the replicas' segment files")
        audit = audit_replicas(cluster)
        checked = check_history(producer.status, producer.partition, producer.offset, got,
                                producer_epoch_lookup(cluster))
        summary = {
            "tern_check": 1, "seed": seed, "fault_seconds": fault_seconds, "rate": args.rate,
            "sent": producer.sent, "acknowledged": producer.acked, "failed": producer.failed,
            "acked_without_offset": producer.acked_without_offset,
            "pending_after_flush": producer.status.count(PENDING), **{k: checked[k] for k in
                                                          ("read", "lost", "inconsistent", "duplicates",
                                                           "resent_after_epoch_bump",
                                                           "out_of_order", "unknown", "unacked_present")},
            "replica_mismatches": audit["replica_mismatches"],
            "faults_total": sum(faults.injected.values()), "faults": faults.injected, "faults_skipped": faults.skipped,
            "faults_left_out": left_out,
            "fatal_producer_errors": len(producer.fatal), "fatal_reasons": producer.fatal[:5],
            "producer_errors": producer.errors, "unrecovered": faults.unrecovered,
            "isr_not_full": faults.isr_not_full, "final_in_sync": final_in_sync, "read_complete": read_complete,
            "watermarks": {p: list(m) for p, m in marks.items()}, "final_partitions": final_partitions,
            "broker_exits": faults.crashes, "panics": panics_in_logs(cluster),
            "audit": audit["partitions"], "unclean_stops": unclean, "work_dir": str(work),
            "examples": checked["examples"], "mismatch_details": audit["mismatch_details"],
        }
        failed = any(summary[k] > 0 for k in ("lost", "inconsistent", "duplicates", "out_of_order", "unknown",
                                               "replica_mismatches"))
        if producer.exception is not None:
            failed = True
            summary["producer_exception"] = repr(producer.exception)
        if producer.acked == 0:
            failed = True  # nothing acknowledged: nothing was checked
        summary["result"] = "FAIL" if failed else "PASS"
        history.write(ev="summary", **{k: summary[k] for k in ("sent", "acknowledged", "lost", "inconsistent",
                                                               "duplicates", "replica_mismatches", "result")})
        print_table(summary)
        if failed:
            print(f"FAIL: history {work / 'history.jsonl'}; broker logs in {work}/node-*/logs; "
                  f"etcd logs in {work}/etcd-logs")
        print(json.dumps(summary, separators=(",", ":")), flush=True)
        if not failed and temp and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return 1 if failed else 0
    finally:
        if producer is not None:
            producer.stop_event.set()
            producer.join(10)
        history.close()
        cluster.close()


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zig-zag varint (Kafka's record fields) at `pos`: (value, next position)."""
    shift = raw = 0
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7


def records_in(partition_dir: Path) -> list[tuple[int, bytes]]:
    """Every (offset, value) of one replica's log, from its segment files (uncompressed
    batches, as this tool's producer writes them)."""
    out = []
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        pos = 0
        while pos + 61 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > len(data):
                break
            count = struct.unpack_from(">i", data, pos + 57)[0]
            at = pos + 61
            for _ in range(count):
                _size, at = read_varint(data, at)
                at += 1  # attributes
                _ts, at = read_varint(data, at)
                delta, at = read_varint(data, at)
                klen, at = read_varint(data, at)
                at += max(klen, 0)
                vlen, at = read_varint(data, at)
                out.append((base + delta, data[at:at + max(vlen, 0)]))
                at += max(vlen, 0)
                headers, at = read_varint(data, at)
                for _ in range(headers):
                    hk, at = read_varint(data, at)
                    at += hk
                    hv, at = read_varint(data, at)
                    at += max(hv, 0)
            pos += LOG_OVERHEAD + length
    return out


def recheck(work_dir: Path) -> int:
    """Checks a kept run again offline: its history against the longest replica's log
    (the audit already compared the replicas), as `run` checks after reading back."""
    status, part, off = [], [], []
    for line in open(work_dir / "history.jsonl"):
        ev = json.loads(line)
        kind, v = ev.get("ev"), ev.get("v")
        if kind == "send":
            status.append(PENDING)
            part.append(-1)
            off.append(-1)
        elif kind == "ack" and v is not None and v < len(status):
            status[v], part[v], off[v] = ACKED, ev["p"], ev["o"]
        elif kind == "err" and v is not None and v < len(status):
            status[v], part[v] = FAILED, ev.get("p", -1)
    data_dirs = sorted(p / "data" for p in work_dir.glob("node-*"))
    got = {}
    for p in range(PARTITIONS):
        logs = [records_in(d / f"{TOPIC}-{p}") for d in data_dirs if (d / f"{TOPIC}-{p}").is_dir()]
        got[p] = max(logs, key=len, default=[])
        # Replicas agree record for record (the run's audit compares batch CRCs too).
        differ = sum(1 for log in logs if log != got[p][:len(log)] or len(log) != len(got[p]))
        if differ:
            print(f"partition {p}: {differ} replica(s) differ from the longest ({[len(x) for x in logs]})")
    checked = check_history(status, part, off, got, epoch_lookup_in(data_dirs))
    print(json.dumps({"recheck": str(work_dir), "sent": len(status), "acknowledged": status.count(ACKED),
                      **{k: v for k, v in checked.items() if k != "examples"}, "examples": checked["examples"]}))
    bad = any(checked[k] for k in ("lost", "inconsistent", "duplicates", "out_of_order", "unknown"))
    return 1 if bad else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--recheck":
        return recheck(Path(argv[1]))
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
