#!/usr/bin/env python3
"""tern-check: does a replicated tern cluster keep every acknowledged write through faults?

Starts a real etcd and three real `tern` brokers on 127.0.0.1, creates the topic `checked`
(6 partitions, replication factor 3, min.insync.replicas=2), produces uniquely numbered
messages with an idempotent acks=all confluent-kafka producer at a bounded rate, and
records every send and every delivery report in a history file (JSON lines). Meanwhile it
injects one fault at a time, chosen at random from a seeded generator and healed before the
next: kill -9 of a partition leader or of the controller, SIGSTOP of a leader for 1.5x the
lease TTL, SIGSTOP of a follower, a broker cut off from etcd, a leader cut off from its
followers (but not from etcd or clients), and a power loss of a leader's machine (SIGKILL,
then its data dir cut back to what it had fsynced: tools/powerloss_shim.c, under which
every broker of the run starts). Every claimed kind occurs at least once: the schedule
begins with each kind once, in a seeded order, and goes on past --seconds (bounded) while
one is owed. The seed is printed; --seed replays the same schedule of choices.

Then it heals everything, stops producing, waits until every partition has 3 in-sync
replicas, reads every partition from its log start to its high watermark and checks that
every acknowledged message is there, at the offset it was acknowledged with, once, and in
send order per partition. Last, an offline audit: it stops the brokers with SIGTERM, reads
every replica's log (records, CRC32C recomputed) up to the partition's high watermark,
compares the replicas batch by batch and record by record, and checks each against the
history.

The verdict (judge()) fails on: a lost, moved, duplicated, out-of-order or unknown
message; a replica mismatch, CRC error, torn bytes or gap; a broker panic (in any broker
log), a broker that exited by itself or did not stop cleanly; a fatal producer error;
messages still pending after the final flush; a final ISR below the replication factor;
an unrecovered fault; a claimed fault kind that never occurred; a producer epoch bump no
fault explains, or more copies re-sent after bumps than the bumps explain; too many
acknowledgements without an offset. TERN_CHECK_INJECT=<condition,...> (test only, see
INJECTABLE) makes the checker see a condition the run did not produce.

Exit status 1 on a failing verdict; 2 if the run itself could not be set up; else 0. The
last line of stdout is a JSON summary. `--recheck WORK_DIR` judges a kept run again
offline (exit 1 on any failure). Broker logs and the history stay in the work dir on
failure (or with --keep / --work-dir).

Every wait is bounded; every process started here is ended here, by its PID.
"""

from __future__ import annotations

import argparse
import json
import logging
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

# log.flush.interval.ms of the brokers when power_loss is claimed.
POWER_LOSS_FLUSH_INTERVAL_MS = 10000
# Faults go on past --seconds, by at most this long, until every claimed kind occurred.
OWED_GRACE_S = 120.0

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
                        "--log-segment-bytes", str(SEGMENT_BYTES),
                        # Under power_loss, a longer flush interval than the default second
                        # leaves more unsynced data for the power loss to take.
                        *(["--log-flush-interval-ms", str(POWER_LOSS_FLUSH_INTERVAL_MS)] if power_loss else [])],
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
        # Epoch bumps, from librdkafka's EOS debug log: {t, reason, to}.
        self.epoch_bumps: list[dict] = []
        self._bump_reason: str | None = None
        self._rdkafka_log = logging.getLogger(f"tern-check.rdkafka.{id(self)}")
        self._rdkafka_log.propagate = False
        self._rdkafka_log.setLevel(logging.DEBUG)
        self._rdkafka_log.addHandler(_EpochBumpLog(self))

    def note_rdkafka_log(self, line: str) -> None:
        """librdkafka (rdkafka_idempotence.c) logs 'Beginning partition drain for PID{..}
        epoch bump ... with in-flight requests: <reason>', then 'All partitions drained,
        bumped epoch to PID{..}'; a drain for a *reset* takes a new producer id instead."""
        if "Beginning partition drain" in line:
            reason = line.split("in-flight requests: ", 1)[-1].strip()
            self._bump_reason = ("reset: " if " reset " in line else "") + reason
            self.history.write(ev="epoch_bump_start", reason=self._bump_reason)
        elif "bumped epoch to" in line or ("Acquired PID" in line and "previous" in line):
            to = line.split("bumped epoch to ", 1)[-1].strip() if "bumped epoch to" in line else line.strip()
            bump = {"t": round(now() - self.history.t0, 4), "reason": self._bump_reason or "unknown", "to": to}
            self.epoch_bumps.append(bump)
            self.history.write(ev="epoch_bump", reason=bump["reason"], to=to)
            self._bump_reason = None

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
            # The EOS debug context logs each epoch bump and its reason (note_rdkafka_log).
            "debug": "eos",
            "logger": self._rdkafka_log,
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


class _EpochBumpLog(logging.Handler):
    def __init__(self, loop: "ProducerLoop"):
        super().__init__(logging.DEBUG)
        self.loop = loop

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.loop.note_rdkafka_log(record.getMessage())
        except Exception:  # noqa: BLE001 - a log line must never break the producer
            pass


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
        # Each claimed kind once first, in a seeded order; a skipped one stays owed.
        self.owed = list(kinds)
        rng.shuffle(self.owed)
        # (start, end) of each injected fault, in history time (what explains an epoch bump).
        self.windows: list[tuple[float, float]] = []

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
        kind = self.owed[0] if self.owed else self.rng.choice(self.kinds)
        t0 = now()
        detail = getattr(self, kind)()
        if detail is None:
            self.skipped[kind] = self.skipped.get(kind, 0) + 1
            self.history.write(ev="fault_skipped", kind=kind)
            if self.owed:
                self.owed.append(self.owed.pop(0))  # try the others first
            return
        if kind in self.owed:
            self.owed.remove(kind)
        self.injected[kind] += 1
        self.windows.append((round(t0 - self.history.t0, 4), round(now() - self.history.t0, 4)))
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

# A leadership move after healing (the controller moving a leader back to its ring owner)
# is normal: clients refresh metadata and ask again. Anything else, or the same for a
# minute, still ends the run.
WATERMARK_RETRIABLE = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                       KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}


def watermarks(consumer: Consumer, p: int) -> tuple[int, int]:
    deadline = now() + 60
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15, cached=False)
        except KafkaException as e:
            err = e.args[0]
            if err.code() not in WATERMARK_RETRIABLE or now() > deadline:
                raise
            log(f"watermarks of partition {p}: {err.str()}; asking again")
            time.sleep(0.5)


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
            marks[p] = watermarks(consumer, p)
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
                  incarnation_of=None) -> dict:
    """Checks what was read against the history: status[i] (PENDING/ACKED/FAILED),
    part[i] and off[i] (where message i was acknowledged; off[i] < 0 when the client was
    told no offset) for every message sent, and got = {partition: [(offset, value)]} in
    offset order.

    `incarnation_of(p, o)`, when given, is the producer incarnation that wrote offset o
    of partition p: (producer id, producer epoch) from its batch header. A value stored
    twice whose later copy is under a later incarnation was re-sent by the client after
    it bumped its epoch (KIP-360: librdkafka drains, bumps and re-sends what it had no
    answer for); the broker deduplicates within an epoch only, as Kafka's does, so such
    copies are counted apart (`resent_after_epoch_bump`, bounded by the verdict). Any
    other second copy (same incarnation, an earlier one, or unknown) is the broker's
    deduplication failure (`duplicates`).

    Order, per partition, over acknowledged values: within each incarnation every copy
    comes in send order; across incarnations the first copies do (what a bump re-sends
    lands after what the old epoch wrote, as later copies, never as a first copy that
    overtakes). A record breaking either rule counts once in `out_of_order`."""
    sent = len(status)
    seen_at: dict[int, tuple[int, int]] = {}  # value -> where it was first read
    positions: dict[int, list[tuple[int, int]]] = {}
    at_offset: dict[tuple[int, int], int] = {}
    duplicates = unknown = resent = 0
    examples: dict[str, list] = {"lost": [], "inconsistent": [], "out_of_order": [], "duplicates": []}
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
                a = None if incarnation_of is None else incarnation_of(*first)
                b = None if incarnation_of is None else incarnation_of(p, o)
                if a is not None and b is not None and b > a:
                    resent += 1
                else:
                    duplicates += 1
                    if len(examples["duplicates"]) < 10:
                        examples["duplicates"].append({"v": v, "first": list(first), "again": [p, o],
                                                       "incarnations": [a, b]})
            else:
                seen_at[v] = (p, o)
    lost = inconsistent = 0
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
    out_of_order = 0
    for p, records in got.items():
        last: dict = {}
        last_first = -1
        for o, raw in records:
            v = at_offset.get((p, o))
            if v is None or status[v] != ACKED:
                continue
            inc = None if incarnation_of is None else incarnation_of(p, o)
            bad = v < last.get(inc, -1)
            if seen_at.get(v) == (p, o):
                bad = bad or v < last_first
                last_first = max(last_first, v)
            if bad:
                out_of_order += 1
                if len(examples["out_of_order"]) < 10:
                    examples["out_of_order"].append({"p": p, "o": o, "v": v, "after": max(last.get(inc, -1), last_first),
                                                     "incarnation": inc})
            last[inc] = max(last.get(inc, -1), v)
    read = sum(len(r) for r in got.values())
    acked_present = sum(1 for i in range(sent) if status[i] == ACKED and i in seen_at)
    unacked_present = len(seen_at) - acked_present
    return {"read": read, "lost": lost, "inconsistent": inconsistent, "duplicates": duplicates,
            "resent_after_epoch_bump": resent,
            "out_of_order": out_of_order, "unknown": unknown, "unacked_present": unacked_present,
            "examples": {k: v for k, v in examples.items() if v}}


# ---- the offline replica audit --------------------------------------------------------

def crc32c(data: bytes) -> int:
    import crc32c as _crc32c  # the wheel ships with the compat venv
    return _crc32c.crc32c(data)


def parse_segments(partition_dir: Path) -> tuple[list[tuple[int, int, int, int]], int]:
    """The batches of one replica's log: [(base offset, last offset delta, leader epoch, crc)],
    and how many bytes of torn tail were skipped (headers only; see read_replica)."""
    r = read_replica(partition_dir, records=False)
    return [b[:4] for b in r["batches"]], r["torn"]


def read_replica(partition_dir: Path, records: bool = True, tamper=None) -> dict:
    """One replica's log, from its segment files: `batches` [(base offset, last offset
    delta, leader epoch, stored crc, producer id, producer epoch)], `records`
    [(offset, value)] (uncompressed batches, as this tool's producer writes them),
    `crc_errors` (batches whose stored CRC is not the CRC32C of their bytes, recomputed
    when `records`), `torn` bytes (a batch that does not fit its segment or is not v2,
    up to the segment's end), `gaps` (a batch not starting where the previous ended) and
    `compressed` batches (records not read). Segments may be preallocated: a zero
    length ends one. `tamper(segment name, bytes) -> bytes` is TERN_CHECK_INJECT's hook."""
    out = {"batches": [], "records": [], "crc_errors": 0, "torn": 0, "gaps": 0, "compressed": 0,
           "crc_error_at": []}
    for seg in sorted(partition_dir.glob("*.log")):
        data = seg.read_bytes()
        if tamper is not None:
            data = tamper(seg.name, data)
        size = len(data)
        pos = 0
        while pos + 12 <= size:
            base, length = struct.unpack_from(">qi", data, pos)
            if length == 0 and data.count(0, pos) == size - pos:
                break  # preallocated zeros: the end of the segment's data (scanned only
                # where a batch would have length 0: scanning at every batch is quadratic)
            if length < MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + length > size or data[pos + 16] != 2:
                out["torn"] += size - pos
                break
            end = pos + LOG_OVERHEAD + length
            _, _, epoch, _magic, crc, attrs, delta = BATCH_HEADER.unpack_from(data, pos)
            pid, pepoch = struct.unpack_from(">qh", data, pos + 43)
            batches = out["batches"]
            if batches and base != batches[-1][0] + batches[-1][1] + 1:
                out["gaps"] += 1
            batches.append((base, delta, epoch, crc, pid, pepoch))
            if records:
                if crc32c(data[pos + 21:end]) != crc:
                    out["crc_errors"] += 1
                    out["crc_error_at"].append([seg.name, base])
                if attrs & 0x07:
                    out["compressed"] += 1
                else:
                    count = struct.unpack_from(">i", data, pos + 57)[0]
                    at = pos + 61
                    try:
                        for _ in range(count):
                            _size, at = read_varint(data, at)
                            at += 1  # attributes
                            _ts, at = read_varint(data, at)
                            d, at = read_varint(data, at)
                            klen, at = read_varint(data, at)
                            at += max(klen, 0)
                            vlen, at = read_varint(data, at)
                            out["records"].append((base + d, data[at:at + max(vlen, 0)]))
                            at += max(vlen, 0)
                            headers, at = read_varint(data, at)
                            for _ in range(headers):
                                hk, at = read_varint(data, at)
                                at += hk
                                hv, at = read_varint(data, at)
                                at += max(hv, 0)
                    except IndexError:
                        out["crc_errors"] += 1  # records run past their batch: corrupt
            pos = end
    return out


def records_in(partition_dir: Path) -> list[tuple[int, bytes]]:
    """Every (offset, value) of one replica's log."""
    return read_replica(partition_dir)["records"]


def incarnation_lookup(logs: dict[int, dict]):
    """incarnation_of(partition, offset) -> (producer id, producer epoch) over one
    replica's logs {partition: read_replica(...)}; bisects a table."""
    import bisect
    tables = {p: [(b[0], b[0] + b[1], (b[4], b[5])) for b in r["batches"]] for p, r in logs.items() if r}
    bases = {p: [b[0] for b in t] for p, t in tables.items()}

    def incarnation_of(p: int, o: int):
        table = tables.get(p, [])
        i = bisect.bisect_right(bases.get(p, []), o) - 1
        if i >= 0 and table[i][0] <= o <= table[i][1]:
            return table[i][2]
        return None
    return incarnation_of


def read_checkpoint(path: Path) -> dict[str, int]:
    if injected("no_hw_checkpoint"):
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _tamper_for(node_id: int, p: int):
    """TERN_CHECK_INJECT's changes to the bytes the audit reads (never to the files): on
    the lowest node's partition 0, `crc` flips a value byte, `replica_diff` changes a value
    and fixes the CRC (only reading records sees it), `torn` appends junk after the last
    batch, `gap` drops the second batch."""
    if p != 0 or node_id != 1 or not any(injected(c) for c in ("crc", "replica_diff", "torn", "gap")):
        return None

    def tamper(name: str, data: bytes) -> bytes:
        buf = bytearray(data)
        if (injected("crc") or injected("replica_diff")) and len(buf) > 70:
            length = struct.unpack_from(">i", buf, 8)[0]
            end = LOG_OVERHEAD + length
            buf[end - 2] ^= 0x01  # inside the last record of the first batch
            if injected("replica_diff"):
                struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:end])))
        if injected("gap") and len(buf) > 70:
            first = LOG_OVERHEAD + struct.unpack_from(">i", buf, 8)[0]
            if first + 12 <= len(buf):
                second = LOG_OVERHEAD + struct.unpack_from(">i", buf, first + 8)[0]
                del buf[first:first + second]
        if injected("torn"):
            used = 0
            while used + 12 <= len(buf):
                length = struct.unpack_from(">i", buf, used + 8)[0]
                if length <= 0:
                    break
                used += LOG_OVERHEAD + length
            buf[used:used + 100] = b"\x7f" * 100
        return bytes(buf)
    return tamper


def audit_replicas(data_dirs: dict[int, Path], read_marks: dict[int, tuple[int, int]] | None,
                   status=None, part=None, off=None, topic: str = TOPIC, partitions: int = PARTITIONS) -> dict:
    """Reads every replica's log (records too, CRCs recomputed) up to the partition's high
    watermark and compares them: batch headers and records with the replica holding the
    most, each with the history (every acknowledged message there, at its offset, once,
    in order). The high watermark is the largest of the replicas' checkpoints and the
    read-back one; with neither, the shortest replica's log end (never nothing)."""
    mismatches = 0
    details: list[dict] = []
    per_partition = {}
    totals = {"crc_errors": 0, "torn_bytes": 0, "gaps": 0, "compressed": 0, "missing_hw_checkpoints": 0,
              "hw_unknown": 0, "records_checked": 0}
    node_logs: dict[int, dict[int, dict]] = {n: {} for n in data_dirs}
    checkpoints = {n: read_checkpoint(d / "replication-offset-checkpoint") for n, d in data_dirs.items()}
    for p in range(partitions):
        name = f"{topic}-{p}"
        replicas = {}
        for node_id, data in sorted(data_dirs.items()):
            d = data / name
            r = read_replica(d, tamper=_tamper_for(node_id, p)) if d.is_dir() else None
            node_logs[node_id][p] = r
            if r is None:
                continue
            r["hw"] = checkpoints[node_id].get(name)
            if r["hw"] is None:
                totals["missing_hw_checkpoints"] += 1
            replicas[node_id] = r
            for k, key in (("crc_errors", "crc_errors"), ("torn_bytes", "torn"), ("gaps", "gaps"),
                           ("compressed", "compressed")):
                totals[k] += r[key]
            if r["crc_errors"] or r["torn"] or r["gaps"]:
                details.append({"p": p, "node": node_id, "why": "corrupt log", "crc_errors": r["crc_errors"],
                                "crc_error_at": r["crc_error_at"][:3], "torn": r["torn"], "gaps": r["gaps"]})

        def log_end(r):
            return (r["batches"][-1][0] + r["batches"][-1][1] + 1) if r["batches"] else 0

        candidates = [r["hw"] for r in replicas.values() if r["hw"] is not None]
        if read_marks and p in read_marks:
            candidates.append(read_marks[p][1])
        if candidates:
            hw = max(candidates)
        else:
            totals["hw_unknown"] += 1
            hw = min((log_end(r) for r in replicas.values()), default=0)
        if not replicas:
            mismatches += 1
            details.append({"p": p, "why": "no replica has a log"})
            per_partition[p] = {"hw": hw, "replicas": 0}
            continue
        below = {n: ([b for b in r["batches"] if b[0] < hw], [x for x in r["records"] if x[0] < hw])
                 for n, r in replicas.items()}
        # The reference: the fullest replica, among equals the one most others agree with.
        agree = {n: sum(1 for m in below if below[m][1] == below[n][1]) for n in below}
        ref_id = max(below, key=lambda n: (len(below[n][1]), agree[n], len(below[n][0]), -n))
        ref_batches, ref_records = below[ref_id]
        totals["records_checked"] += sum(len(b[1]) for b in below.values())
        bad = []
        for node_id, r in replicas.items():
            if log_end(r) < hw:
                bad.append({"node": node_id, "why": f"log ends at {log_end(r)}, below the high watermark {hw}"})
            if node_id == ref_id:
                continue
            mine_b, mine_r = below[node_id]
            if [b[:4] for b in mine_b] != [b[:4] for b in ref_batches]:
                first = next((k for k, (a, b) in enumerate(zip(mine_b, ref_batches)) if a[:4] != b[:4]),
                             min(len(mine_b), len(ref_batches)))
                bad.append({"node": node_id, "why": "batches differ from broker %d's" % ref_id,
                            "first_diff": {"index": first,
                                           "mine": list(mine_b[first]) if first < len(mine_b) else None,
                                           "ref": list(ref_batches[first]) if first < len(ref_batches) else None}})
            elif mine_r != ref_records:
                first = next((k for k, (a, b) in enumerate(zip(mine_r, ref_records)) if a != b),
                             min(len(mine_r), len(ref_records)))
                bad.append({"node": node_id, "why": "records differ from broker %d's (same batch headers)" % ref_id,
                            "first_diff": {"index": first,
                                           "mine": repr(mine_r[first]) if first < len(mine_r) else None,
                                           "ref": repr(ref_records[first]) if first < len(ref_records) else None}})
        mismatches += len(bad)
        details += [dict(p=p, **b) for b in bad]
        per_partition[p] = {"hw": hw, "batches": len(ref_batches), "records": len(ref_records),
                            "leader_epochs": sorted({b[2] for b in ref_batches}),
                            "incarnations": sorted({(b[4], b[5]) for b in ref_batches}),
                            "replica_hws": {n: r["hw"] for n, r in replicas.items()},
                            "replica_log_ends": {n: log_end(r) for n, r in replicas.items()}}
    # Each replica against the history, below the high watermark.
    replica_history = {}
    if status is not None:
        for node_id, logs in node_logs.items():
            got = {p: [x for x in (r["records"] if r else []) if x[0] < per_partition[p]["hw"]]
                   for p, r in logs.items()}
            c = check_history(status, part, off, got, incarnation_lookup(logs))
            replica_history[node_id] = {k: c[k] for k in ("lost", "inconsistent", "duplicates", "out_of_order",
                                                          "unknown", "resent_after_epoch_bump")}
            if any(c[k] for k in ("lost", "inconsistent", "duplicates", "out_of_order", "unknown")):
                details.append({"node": node_id, "why": "replica disagrees with the history",
                                **replica_history[node_id], "examples": c["examples"]})
    return {"replica_mismatches": mismatches, "mismatch_details": details[:20], "partitions": per_partition,
            "replica_history": replica_history, "node_logs": node_logs, **totals}


# ---- the verdict ----------------------------------------------------------------------

# An epoch bump is explained by a fault that began before it and ended at most this long
# before it (the request timeout, retries and the drain of in-flight requests).
BUMP_EXPLAIN_WINDOW_S = 30.0
# A bump re-sends what the producer had no answer for: at most what it sent in one
# request timeout (REQUEST_TIMEOUT_S of the producer's rate) per bump.
REQUEST_TIMEOUT_S = 10.0
# Acknowledgements without an offset (librdkafka's implicit acks) are checked for
# presence only: at most this share of the acknowledged messages may be such.
ACKS_WITHOUT_OFFSET_MAX_SHARE = 0.05

INJECTABLE = ("panic", "broker_exit", "unclean_stop", "fatal", "pending", "isr_short", "unrecovered",
              "missing_kind", "lost", "duplicate", "disorder", "unknown_value", "unexplained_bump",
              "resent_flood", "acks_without_offset", "read_incomplete", "crc", "replica_diff", "torn", "gap",
              "no_hw_checkpoint")


def injected(condition: str) -> bool:
    """Whether TERN_CHECK_INJECT (test only: comma-separated conditions) asks the checker
    to see `condition` (see INJECTABLE) although the run did not produce it."""
    return condition in os.environ.get("TERN_CHECK_INJECT", "").split(",")


def check_injections() -> list[str]:
    wanted = [c for c in os.environ.get("TERN_CHECK_INJECT", "").split(",") if c]
    unknown = [c for c in wanted if c not in INJECTABLE]
    if unknown:
        raise SystemExit(f"TERN_CHECK_INJECT: unknown conditions {unknown} (known: {', '.join(INJECTABLE)})")
    return wanted


def panics_in_logs(log_paths: list[Path]) -> dict:
    """How many times brokers panicked (Rust's "panicked at"), and where, from their logs."""
    count, where = 0, {}
    lines = []
    for path in log_paths:
        try:
            lines += Path(path).read_text(errors="replace").splitlines()
        except OSError:
            continue
    if injected("panic"):
        lines.append("thread 'main' panicked at src/injected.rs:1:1:")
    for line in lines:
        if " panicked at " in line:
            count += 1
            at = line.split(" panicked at ", 1)[1].rstrip(":")
            where[at] = where.get(at, 0) + 1
    return {"count": count, "where": dict(sorted(where.items(), key=lambda kv: -kv[1])[:10])}


def _inject_facts(f: dict) -> None:
    """TERN_CHECK_INJECT's changes to what the run observed (history, read-back, faults)."""
    status, part, off, got = f["status"], f["part"], f["off"], f["got"]
    acked = [i for i in range(len(status)) if status[i] == ACKED and off[i] >= 0]
    if injected("broker_exit"):
        f["broker_exits"] = f["broker_exits"] + [{"node": 1, "exit": -11, "injected": True}]
    if injected("unclean_stop"):
        f["unclean_stops"] = f["unclean_stops"] + [1]
    if injected("fatal"):
        f["fatal"] = f["fatal"] + ["_FATAL: injected"]
    if injected("pending") and acked:
        status[acked[-1]] = PENDING
    if injected("isr_short"):
        f["final_partitions"] = {**f["final_partitions"], 0: {"leader": 1, "isr": [1, 2]}}
    if injected("unrecovered"):
        f["unrecovered"] += 1
    if injected("missing_kind"):
        f["claimed"] = list(f["claimed"]) + ["injected_kind"]
    if injected("read_incomplete"):
        f["read_complete"] = False
    if injected("unexplained_bump"):
        f["epoch_bumps"] = f["epoch_bumps"] + [{"t": -1000.0, "reason": "injected", "to": "PID{injected}"}]
    if got is not None:
        if injected("lost") and acked:
            i = acked[0]
            got[part[i]] = [x for x in got[part[i]] if int(x[1]) != i]
        if injected("duplicate") and acked:
            i = acked[0]
            records = got[part[i]]
            at = next(k for k, x in enumerate(records) if int(x[1]) == i)
            records.insert(at + 1, (records[-1][0] + 1 if records else 0, records[at][1]))
            records.sort(key=lambda x: x[0])
        if injected("disorder"):
            for p, records in got.items():
                if len(records) >= 2:
                    (o1, v1), (o2, v2) = records[0], records[1]
                    records[0], records[1] = (o1, v2), (o2, v1)
                    for i in (int(v1), int(v2)):  # acknowledged where they are now read
                        if 0 <= i < len(status) and status[i] == ACKED:
                            off[i] = o1 if i == int(v2) else o2
                    break
        if injected("unknown_value"):
            p = next(iter(got), 0)
            got.setdefault(p, []).append((10 ** 12, b"not-a-number"))
    if injected("acks_without_offset"):
        for i in acked[: max(1, len(acked) // 10 + 1)]:
            off[i] = -1
    if injected("resent_flood"):
        f["rate"] = 0  # no re-sent copy can then be explained


def judge(f: dict) -> dict:
    """The checker's verdict over what a run observed (`f`, see run() for its fields),
    as a summary dict whose `failures` lists every reason to fail (empty: PASS)."""
    check_injections()
    _inject_facts(f)
    status, part, off = f["status"], f["part"], f["off"]
    audit = audit_replicas(f["data_dirs"], f["marks"], status, part, off) if f["data_dirs"] else {
        "replica_mismatches": 0, "mismatch_details": [], "partitions": {}, "replica_history": {}, "node_logs": {},
        "crc_errors": 0, "torn_bytes": 0, "gaps": 0, "compressed": 0, "missing_hw_checkpoints": 0,
        "hw_unknown": 0, "records_checked": 0}
    node_logs = audit.pop("node_logs")
    # The incarnation table of the replica with the most batches serves the read-back.
    best: dict[int, dict] = {}
    for logs in node_logs.values():
        for p, r in logs.items():
            if r is not None and (p not in best or len(r["batches"]) > len(best[p]["batches"])):
                best[p] = r
    incarnation_of = incarnation_lookup(best) if best else None
    got = f["got"]
    if got is None:  # --recheck: no read-back; the fullest replica below the high watermark
        got = {p: [x for x in r["records"] if x[0] < audit["partitions"].get(p, {}).get("hw", 0)]
               for p, r in best.items()}
    checked = check_history(status, part, off, got, incarnation_of)
    sent = len(status)
    acked = sum(1 for s in status if s == ACKED)
    failed = sum(1 for s in status if s == FAILED)
    pending = sent - acked - failed
    without_offset = sum(1 for i in range(sent) if status[i] == ACKED and off[i] < 0)
    incarnations = {inc for r in best.values() for inc in {(b[4], b[5]) for b in r["batches"]}}
    producer_ids = {pid for pid, _ in incarnations}
    bumps_in_data = len(incarnations) - len(producer_ids)
    windows = f["fault_windows"]
    unexplained = [b for b in f["epoch_bumps"]
                   if not any(t0 - 1.0 <= b["t"] <= t1 + BUMP_EXPLAIN_WINDOW_S for t0, t1 in windows)]
    resent_bound = bumps_in_data * f["rate"] * REQUEST_TIMEOUT_S
    missing_kinds = [k for k in f["claimed"] if f["injected"].get(k, 0) < 1]
    short_isr = {p: x["isr"] for p, x in f["final_partitions"].items() if len(x["isr"]) < REPLICATION_FACTOR}
    panics = panics_in_logs(f["log_paths"])
    s = {
        "tern_check": 1, "seed": f["seed"], "fault_seconds": f.get("fault_seconds"), "rate": f["rate"],
        "sent": sent, "acknowledged": acked, "failed": failed, "acked_without_offset": without_offset,
        "pending_after_flush": pending,
        **{k: checked[k] for k in ("read", "lost", "inconsistent", "duplicates", "resent_after_epoch_bump",
                                   "out_of_order", "unknown", "unacked_present")},
        "epoch_bumps_logged": len(f["epoch_bumps"]), "epoch_bumps_in_data": bumps_in_data,
        "epoch_bump_reasons": sorted({b["reason"] for b in f["epoch_bumps"]})[:10],
        "unexplained_epoch_bumps": unexplained[:10], "resent_bound": resent_bound,
        **{k: audit[k] for k in ("replica_mismatches", "crc_errors", "torn_bytes", "gaps", "compressed",
                                 "missing_hw_checkpoints", "hw_unknown", "records_checked", "replica_history")},
        "faults_total": sum(f["injected"].values()), "faults": f["injected"], "faults_claimed": f["claimed"],
        "faults_missing": missing_kinds, "faults_skipped": f.get("skipped", {}),
        "fatal_producer_errors": len(f["fatal"]), "fatal_reasons": f["fatal"][:5],
        "producer_errors": f.get("producer_errors", {}), "producer_exception": f.get("producer_exception"),
        "unrecovered": f["unrecovered"], "isr_not_full": f.get("isr_not_full", 0),
        "final_in_sync": f["final_in_sync"], "final_short_isr": short_isr, "read_complete": f["read_complete"],
        "broker_exits": f["broker_exits"], "panics": panics, "unclean_stops": f["unclean_stops"],
        "audit": audit["partitions"], "work_dir": f.get("work_dir"),
        "examples": checked["examples"], "mismatch_details": audit["mismatch_details"],
        "injected_conditions": check_injections(),
    }
    fail = []

    def must(ok, why):
        if not ok:
            fail.append(why)
    for k in ("lost", "inconsistent", "duplicates", "out_of_order", "unknown"):
        must(s[k] == 0, f"{s[k]} {k.replace('_', ' ')} (acknowledged messages, as read back)")
    must(s["replica_mismatches"] == 0, f"{s['replica_mismatches']} replica mismatches below the high watermark")
    for node, h in s["replica_history"].items():
        must(not any(h[k] for k in ("lost", "inconsistent", "duplicates", "out_of_order", "unknown")),
             f"broker {node}'s replica disagrees with the history: {h}")
    must(s["crc_errors"] == 0, f"{s['crc_errors']} batches whose CRC32C does not match their bytes")
    must(s["torn_bytes"] == 0, f"{s['torn_bytes']} torn bytes in the replicas' logs")
    must(s["gaps"] == 0, f"{s['gaps']} gaps between batches in the replicas' logs")
    must(s["compressed"] == 0, f"{s['compressed']} compressed batches (this producer does not compress)")
    must(s["panics"]["count"] == 0, f"brokers panicked {s['panics']['count']} times: {s['panics']['where']}")
    must(not s["broker_exits"], f"brokers exited by themselves: {s['broker_exits']}")
    must(not s["unclean_stops"], f"brokers did not stop cleanly on SIGTERM: {s['unclean_stops']}")
    must(s["fatal_producer_errors"] == 0, f"fatal producer errors: {s['fatal_reasons']}")
    must(s["producer_exception"] is None, f"the producer thread crashed: {s['producer_exception']}")
    must(pending == 0, f"{pending} messages still pending after the final flush")
    if f["final_in_sync"] is not None:
        must(f["final_in_sync"] and not short_isr,
             f"final ISR below the replication factor {REPLICATION_FACTOR}: {short_isr or 'not all in sync'}")
    must(s["unrecovered"] == 0, f"{s['unrecovered']} faults not recovered from in time")
    must(not missing_kinds, f"claimed fault kinds never injected: {missing_kinds}")
    must(not unexplained, f"{len(unexplained)} producer epoch bumps no fault explains: {unexplained[:3]}")
    must(s["resent_after_epoch_bump"] <= resent_bound,
         f"{s['resent_after_epoch_bump']} copies re-sent after epoch bumps, more than {bumps_in_data} bumps "
         f"explain (at most {resent_bound})")
    must(without_offset <= ACKS_WITHOUT_OFFSET_MAX_SHARE * max(acked, 1),
         f"{without_offset} acknowledgements without an offset, over {ACKS_WITHOUT_OFFSET_MAX_SHARE:.0%} "
         f"of {acked}")
    if f["got"] is not None:
        must(f["read_complete"], "the read-back did not reach every high watermark")
    must(acked > 0, "nothing was acknowledged: nothing was checked")
    s["failures"] = fail
    s["result"] = "FAIL" if fail else "PASS"
    return s


# ---- the run --------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="tern-check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="how long to inject faults (default 60; "
                    "longer, by at most %d s, until every claimed kind has occurred)" % OWED_GRACE_S)
    ap.add_argument("--seed", type=int, default=None, help="seed of the fault schedule (default: random, printed)")
    ap.add_argument("--rate", type=int, default=1000, help="messages per second (default 1000)")
    ap.add_argument("--faults", default="all",
                    help="comma-separated fault kinds, 'all' or 'none' (kinds: %s)" % ", ".join(FAULT_KINDS))
    ap.add_argument("--pause-min", type=float, default=1.0, help="least pause after a fault has healed (s)")
    ap.add_argument("--pause-max", type=float, default=3.0, help="longest pause after a fault has healed (s)")
    ap.add_argument("--message-timeout-ms", type=int, default=60000, help="the producer's message.timeout.ms")
    ap.add_argument("--work-dir", type=Path, default=None, help="where brokers, etcd and the history live "
                    "(default: a temp dir, removed after a passing run unless --keep)")
    # (`--recheck WORK_DIR` alone checks a kept run again, offline.)
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
            ("failed (not acknowledged)", summary["failed"]), ("PENDING after the flush", summary["pending_after_flush"]),
            ("read back", summary["read"]), ("unacknowledged but present", summary["unacked_present"]),
            ("LOST", summary["lost"]), ("INCONSISTENT", summary["inconsistent"]),
            ("DUPLICATES", summary["duplicates"]),
            ("re-sent after an epoch bump", f"{summary['resent_after_epoch_bump']} (bound {summary['resent_bound']})"),
            ("epoch bumps (logged / in the data)", f"{summary['epoch_bumps_logged']} / {summary['epoch_bumps_in_data']}"),
            ("OUT OF ORDER", summary["out_of_order"]),
            ("UNKNOWN values", summary["unknown"]), ("REPLICA MISMATCHES", summary["replica_mismatches"]),
            ("records audited (all replicas)", summary["records_checked"]),
            ("CRC errors / torn bytes / gaps", f"{summary['crc_errors']} / {summary['torn_bytes']} / {summary['gaps']}"),
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
    if summary["epoch_bump_reasons"]:
        print("epoch bump reasons:", summary["epoch_bump_reasons"])
    for k, v in summary.get("examples", {}).items():
        print(f"examples of {k}: {v}")
    if summary["panics"]["count"]:
        print("broker panics at:", summary["panics"]["where"])
    for d in summary.get("mismatch_details", []):
        print("replica mismatch:", d)
    for why in summary["failures"]:
        print("FAILED:", why)


def run(args) -> int:
    check_injections()
    binary = Path(args.tern_bin or tern_bin()).resolve()
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    rng = random.Random(seed)
    temp = args.work_dir is None
    work = Path(tempfile.mkdtemp(prefix="tern-check-")) if temp else args.work_dir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    kinds, left_out = choose_kinds(args.faults)
    log(f"seed {seed} (replay: --seed {seed} --faults {args.faults} --seconds {args.seconds} --rate {args.rate}); "
        f"work dir {work}; faults {kinds or 'none'}" + (f"; left out: {left_out}" if left_out else ""))
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
        while producer.is_alive() and (now() - t0 < args.seconds
                                       or (faults.owed and now() - t0 < args.seconds + OWED_GRACE_S)):
            if kinds:
                faults.inject_one()
                faults.recover()
            if now() - t0 < args.seconds or faults.owed:
                time.sleep(rng.uniform(args.pause_min, args.pause_max))
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
            final_in_sync = False
        log("reading every partition back")
        got, marks, read_complete = read_everything(cluster.bootstrap())
        unclean = cluster.stop_all()
        for node in unclean:
            history.write(ev="unclean_stop", node=node)
        log("auditing the replicas' logs")
        summary = judge({
            "seed": seed, "fault_seconds": fault_seconds, "rate": args.rate,
            "claimed": kinds, "injected": faults.injected, "skipped": faults.skipped,
            "fault_windows": faults.windows, "unrecovered": faults.unrecovered,
            "isr_not_full": faults.isr_not_full, "broker_exits": faults.crashes, "unclean_stops": unclean,
            "log_paths": [p for n in cluster.nodes.values() for p in n.broker.log_paths],
            "status": producer.status, "part": producer.partition, "off": producer.offset,
            "fatal": producer.fatal, "producer_errors": producer.errors,
            "producer_exception": None if producer.exception is None else repr(producer.exception),
            "epoch_bumps": producer.epoch_bumps,
            "got": got, "marks": marks, "read_complete": read_complete,
            "final_in_sync": final_in_sync, "final_partitions": final_partitions,
            "data_dirs": {n: node.broker.data_dir for n, node in cluster.nodes.items()}, "work_dir": str(work),
        })
        summary["watermarks"] = {p: list(m) for p, m in marks.items()}
        summary["final_partitions"] = final_partitions
        failed = summary["result"] == "FAIL"
        history.write(ev="summary", **{k: summary[k] for k in ("sent", "acknowledged", "lost", "inconsistent",
                                                               "duplicates", "replica_mismatches", "result",
                                                               "failures")})
        print_table(summary)
        if failed:
            print(f"FAIL: history {work / 'history.jsonl'}; broker logs in {work}/node-*/logs; "
                  f"etcd logs in {work}/etcd-logs")
        print(json.dumps(summary, separators=(",", ":"), default=str), flush=True)
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


def facts_from_history(work_dir: Path) -> dict:
    """What a kept run's work dir tells offline: its history (sends, acknowledgements,
    errors, faults, epoch bumps, broker exits, the claimed kinds), its brokers' data dirs
    and logs. What only the live run knew (the read-back, the final ISR) is absent."""
    status, part, off = array("b"), array("b"), array("q")
    f = {"seed": None, "rate": 0, "claimed": [], "injected": {}, "fault_windows": [], "unrecovered": 0,
         "broker_exits": [], "unclean_stops": [], "fatal": [], "epoch_bumps": [], "got": None, "marks": None,
         "read_complete": True, "final_in_sync": None, "final_partitions": {}, "work_dir": str(work_dir)}
    for line in open(work_dir / "history.jsonl"):
        ev = json.loads(line)
        kind, v = ev.get("ev"), ev.get("v")
        if kind == "start":
            f["seed"], f["rate"], f["claimed"] = ev.get("seed"), ev.get("rate", 0), ev.get("faults", [])
            f["injected"] = {k: 0 for k in f["claimed"]}
        elif kind == "send":
            status.append(PENDING)
            part.append(-1)
            off.append(-1)
        elif kind == "ack" and v is not None and v < len(status):
            status[v], part[v], off[v] = ACKED, ev["p"], ev["o"]
        elif kind == "err" and v is not None and v < len(status):
            status[v], part[v] = FAILED, ev.get("p", -1) if ev.get("p") is not None else -1
        elif kind == "fault":
            f["injected"][ev["kind"]] = f["injected"].get(ev["kind"], 0) + 1
            f["fault_windows"].append((ev["t"] - ev.get("secs", 0), ev["t"]))
        elif kind == "unrecovered":
            f["unrecovered"] += 1
        elif kind == "broker_exited":
            f["broker_exits"].append({"node": ev.get("node"), "exit": ev.get("exit")})
        elif kind == "fatal":
            f["fatal"].append(ev.get("err"))
        elif kind == "epoch_bump":
            f["epoch_bumps"].append({"t": ev["t"], "reason": ev.get("reason"), "to": ev.get("to")})
        elif kind == "unclean_stop":
            f["unclean_stops"].append(ev.get("node"))
    f.update(status=status, part=part, off=off)
    f["data_dirs"] = {int(p.name.split("-", 1)[1]): p / "data" for p in sorted(work_dir.glob("node-*"))
                      if (p / "data").is_dir()}
    f["log_paths"] = sorted(work_dir.glob("node-*/logs/*.log"))
    return f


def recheck(work_dir: Path) -> int:
    """Checks a kept run again offline with the same verdict as the run (what only the
    live run could see, the read-back and the final ISR, excepted): exit 1 on any
    failure, among them replicas that differ."""
    summary = judge(facts_from_history(work_dir))
    out = {k: v for k, v in summary.items() if k not in ("audit",)}
    out["recheck"] = str(work_dir)
    for why in summary["failures"]:
        print("FAILED:", why)
    print(json.dumps(out, separators=(",", ":"), default=str))
    return 1 if summary["failures"] else 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--recheck":
        return recheck(Path(argv[1]))
    return run(parse_args(argv))


if __name__ == "__main__":
    # SIGTERM (an operator stopping a long run) exits through Python's own shutdown, so
    # that the history's write buffer reaches the file and `--recheck` sees every event
    # (a killed run once left the last 1 MiB of events unwritten).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
