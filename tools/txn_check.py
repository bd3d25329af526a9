#!/usr/bin/env python3
"""txn-check: is every input processed exactly once by a transactional copier through faults?

Kafka's own copier test (TransactionalMessageCopier and its system test), ported: a real
etcd and three real `tern` brokers on 127.0.0.1; an `input` topic filled with numbered
messages; two copier processes (this file, `copier` mode) in one consumer group, each a
read_committed consumer and a transactional producer that copies what it reads to the
same partition of `output` and commits the consumed offsets in the same transaction
(`send_offsets_to_transaction`); about one transaction in ten is aborted on purpose
(its records are written with an `x` prefix, so a reader that sees one has read an
aborted record), after which the copier rewinds to its committed offsets. A
read_committed reader follows `output` the whole time.

Meanwhile faults, one at a time from a seeded generator, each healed before the next:
kill -9 of a copier (restarted), of the leader of a copier's `__transaction_state`
partition (its transaction coordinator), of an `output` partition leader, of the group
coordinator, and SIGSTOP of a broker past its lease. The seed is printed; --seed replays
the same choices.

The verdict fails on: an input missing from `output` or copied twice (read_committed,
after everything is copied), `output` out of input order on a partition, an aborted
record seen by the concurrent reader or in the final read, a duplicate seen by the
concurrent reader, a partition whose last stable offset has not reached its high
watermark within the transaction timeout after the faults, a copy that did not finish in
time, a broker panic, and replicas that differ: after the run the brokers stop and the
durability checker's offline audit (tools/tern_check.py) reads every replica of `input`
and `output` from its segment files, CRCs recomputed, markers included, and compares
them batch by batch and record by record up to the high watermark. Exit 1 on a failing
verdict, 2 when the run could not be set up. The last line of stdout is a JSON summary.

TXN_CHECK_INJECT (tests only, comma-separated) makes the verdict see a condition the run
did not produce (see INJECTABLE): each assertion is shown failing by
compat/test_txn_checker.py, as tern_check's are by compat/test_checker.py.

Every wait is bounded; every process started here is ended here, by its PID.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "compat"))

from confluent_kafka import (OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer,  # noqa: E402
                             TopicPartition)
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tern_harness import Broker, BrokerError, Etcd, free_port, tern_bin, wait_until  # noqa: E402

sys.path.insert(0, str(HERE))
import tern_check  # noqa: E402  (the offline replica audit)

INPUT, OUTPUT, GROUP = "input", "output", "copier"
PARTITIONS = 6
LEASE_TTL_S = 3
TXN_STATE_PARTITIONS = 6
OFFSETS_PARTITIONS = 6
TXN_TIMEOUT_MS = 10_000
COPIERS = 2

INJECTABLE = ("lost", "duplicate", "disorder", "aborted_in_final_read", "aborted_read", "reader_duplicate",
              "not_copied", "unstable", "panic", "replica_diff")


def injected(condition: str) -> bool:
    return condition in os.environ.get("TXN_CHECK_INJECT", "").split(",")


def inject(sent: dict[int, list[bytes]], got: dict[int, list[bytes]], facts: dict) -> None:
    """Plants TXN_CHECK_INJECT's conditions in what the verdict is about to judge."""
    wanted = [c for c in os.environ.get("TXN_CHECK_INJECT", "").split(",") if c]
    unknown = [c for c in wanted if c not in INJECTABLE]
    if unknown:
        raise SystemExit(f"TXN_CHECK_INJECT: unknown conditions {unknown} (known: {', '.join(INJECTABLE)})")
    p = next((p for p in sorted(got) if len(got[p]) >= 2), None)
    if p is not None:
        if injected("lost"):
            got[p] = got[p][1:]
        if injected("duplicate"):
            got[p] = got[p] + [got[p][-1]]
        if injected("disorder"):
            got[p][0], got[p][1] = got[p][1], got[p][0]
        if injected("aborted_in_final_read"):
            got[p] = got[p] + [b"x" + got[p][0]]
    if injected("aborted_read"):
        facts["aborted_reads"] = facts.get("aborted_reads", 0) + 1
    if injected("reader_duplicate"):
        facts["reader_duplicates"] = facts.get("reader_duplicates", 0) + 1
    if injected("not_copied"):
        facts["copied"] = False
    if injected("unstable"):
        facts["unstable_partitions"] = [0]
    if injected("panic"):
        facts["panics"] = ["injected"]
    if injected("replica_diff"):
        facts["replica_mismatches"] = facts.get("replica_mismatches", 0) + 1


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def log_err(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def java_hash(s: str) -> int:
    h = 0
    for ch in s.encode("utf-16-be").decode("utf-16-be"):
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    h = h - (1 << 32) if h >= 1 << 31 else h
    return 0 if h == -(1 << 31) else abs(h)


# ---- the copier (a separate process) --------------------------------------------------

def copier(args) -> int:
    """Copies input to output, exactly once, until stdin closes or SIGTERM."""
    rng = random.Random(args.seed)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": GROUP,
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 1000, "max.poll.interval.ms": 60000})
    producer_config = {"bootstrap.servers": args.bootstrap, "transactional.id": args.id,
                       "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5,
                       "message.timeout.ms": TXN_TIMEOUT_MS, "socket.timeout.ms": 5000}
    if os.environ.get("TXN_CHECK_CLIENT_DEBUG"):
        producer_config["debug"] = os.environ["TXN_CHECK_CLIENT_DEBUG"]
    producer = Producer(producer_config)

    def stuck(what: str) -> None:
        print(json.dumps({"copier": args.id, "stuck": what}), flush=True)
        os._exit(5)

    def call(what: str, fn, *fn_args, limit_s: float = 60):
        """One transactional call, told on stderr when it fails or is slow: a copier that
        stalls says where (the work dir is kept when a run fails). A call still running
        15 s past its own timeout ends the copier, which is restarted as after a kill:
        librdkafka's send_offsets_to_transaction can wait forever for a group coordinator
        that left the metadata (librdkafka issues 5456 and 5511; Kafka too lists only live
        brokers), and the group would otherwise wait max.poll.interval.ms for the copier."""
        began = time.monotonic()
        watchdog = threading.Timer(limit_s + 15, stuck, args=(what,))
        watchdog.daemon = True
        watchdog.start()
        try:
            result = fn(*fn_args)
        except KafkaException as e:
            log_err(f"{args.id} {what} failed after {time.monotonic() - began:.1f} s: {e.args[0]}")
            raise
        finally:
            watchdog.cancel()
        if time.monotonic() - began > 2:
            log_err(f"{args.id} {what} took {time.monotonic() - began:.1f} s")
        return result

    call("init_transactions", producer.init_transactions, 60)
    consumer.subscribe([INPUT])
    committed = aborted = 0

    def rewind() -> bool:
        """Back to the committed offsets: what an aborted transaction read is read again.
        False when that cannot be done; the copier then exits, and its restart begins at
        the committed offsets (going on from the current positions would skip input)."""
        assignment = consumer.assignment()
        if not assignment:
            return True
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                for tp in consumer.committed(assignment, timeout=10):
                    consumer.seek(TopicPartition(tp.topic, tp.partition,
                                                 tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
                return True
            except KafkaException:
                time.sleep(0.5)  # e.g. UNSTABLE_OFFSET_COMMIT until the abort's markers land
        return False

    def finish(commit: bool) -> None:
        """commit_transaction or abort_transaction, retried while the error is retriable."""
        for _ in range(10):
            try:
                if commit:
                    call("commit_transaction", producer.commit_transaction, 60)
                else:
                    call("abort_transaction", producer.abort_transaction, 60)
                return
            except KafkaException as e:
                if not e.args[0].retriable():
                    raise
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "commit or abort kept failing"))

    while not stop.is_set():
        records = [m for m in consumer.consume(50, timeout=0.5) if not m.error()]
        if not records:
            continue
        on_purpose = rng.random() < 0.1
        try:
            call("begin_transaction", producer.begin_transaction)
            for m in records:
                value = (b"x" if on_purpose else b"") + m.value()
                producer.produce(OUTPUT, value=value, partition=m.partition())
            call("send_offsets_to_transaction", producer.send_offsets_to_transaction,
                 consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 20,
                 limit_s=20)
            if on_purpose:
                producer.flush(30)
            finish(commit=not on_purpose)
            if on_purpose:
                aborted += 1
                if not rewind():
                    print(json.dumps({"copier": args.id, "rewind_failed": True}), flush=True)
                    return 4
            else:
                committed += 1
        except KafkaException as e:
            error = e.args[0]
            if error.fatal():
                print(json.dumps({"copier": args.id, "fatal": str(error)}), flush=True)
                return 3
            try:
                finish(commit=False)
            except KafkaException as again:
                print(json.dumps({"copier": args.id, "abort_failed": str(again.args[0])}), flush=True)
                return 3
            if not rewind():
                print(json.dumps({"copier": args.id, "rewind_failed": True}), flush=True)
                return 4
    print(json.dumps({"copier": args.id, "committed": committed, "aborted": aborted}), flush=True)
    consumer.close()
    return 0


# ---- the cluster and the faults -----------------------------------------------------

class Run:
    def __init__(self, work: Path, binary: Path, seed: int):
        self.work = work
        self.rng = random.Random(seed)
        self.etcd = Etcd(work / "etcd", work / "etcd-logs")
        self.brokers: dict[int, Broker] = {}
        for n in (1, 2, 3):
            self.brokers[n] = Broker(
                data_dir=work / f"node-{n}" / "data", log_dir=work / f"node-{n}" / "logs",
                port=free_port(), binary=binary, node_id=n,
                extra_args=["--etcd", self.etcd.endpoint, "--etcd-lease-ttl-secs", str(LEASE_TTL_S),
                            "--metrics", f"127.0.0.1:{free_port()}", "--http", f"127.0.0.1:{free_port()}",
                            "--transaction-state-log-num-partitions", str(TXN_STATE_PARTITIONS),
                            "--offsets-topic-num-partitions", str(OFFSETS_PARTITIONS),
                            "--transaction-abort-timed-out-transaction-cleanup-interval-ms", "1000",
                            "--group-initial-rebalance-delay-ms", "300",
                            "--group-min-session-timeout-ms", "1000"])
        self.copiers: dict[str, subprocess.Popen] = {}
        self.faults: dict[str, int] = {}
        self.copier_exits: list[str] = []

    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers.values() if b.alive())

    def leaders(self, topic: str) -> dict[int, int]:
        """partition -> leader; empty while no broker answers (one may be down or paused)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap(), "socket.timeout.ms": 3000})
        try:
            t = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
        except KafkaException:
            return {}
        if t is None or t.error is not None:
            return {}
        return {p.id: p.leader for p in t.partitions.values()}

    def start(self) -> None:
        self.etcd.start()
        for b in self.brokers.values():
            b.start()
        admin = AdminClient({"bootstrap.servers": self.bootstrap()})
        for f in admin.create_topics([NewTopic(t, PARTITIONS, 3, config={"min.insync.replicas": "2"})
                                      for t in (INPUT, OUTPUT)]).values():
            f.result(30)
        for t in (INPUT, OUTPUT):
            wait_until(lambda t=t: len(self.leaders(t)) == PARTITIONS and all(l > 0 for l in self.leaders(t).values()),
                       30, what=f"leaders for {t}")

    def fill(self, count: int) -> dict[int, list[bytes]]:
        p = Producer({"bootstrap.servers": self.bootstrap(), "enable.idempotence": True, "linger.ms": 5})
        sent: dict[int, list[bytes]] = {i: [] for i in range(PARTITIONS)}
        for i in range(count):
            value = b"%012d" % i
            while True:
                try:
                    p.produce(INPUT, value=value, partition=i % PARTITIONS)
                    break
                except BufferError:  # librdkafka's queue is full: let deliveries drain it
                    p.poll(0.1)
            sent[i % PARTITIONS].append(value)
            if i % 1000 == 0:
                p.poll(0)
        assert p.flush(60) == 0, "input not fully produced"
        return sent

    def start_copier(self, name: str, seed: int) -> None:
        self.copiers[name] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "copier", "--bootstrap", self.bootstrap(),
             "--id", name, "--seed", str(seed)],
            stdin=subprocess.PIPE, stdout=open(self.work / f"{name}.out", "ab"),
            stderr=open(self.work / f"{name}.err", "ab"))

    def keep_copiers_running(self) -> None:
        for name, proc in list(self.copiers.items()):
            if proc.poll() is not None:
                self.copier_exits.append(f"{name} exited {proc.returncode}")
                self.start_copier(name, self.rng.randrange(1 << 30))

    def stop_copiers(self) -> None:
        for proc in self.copiers.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.copiers.values():
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)

    def restart_broker(self, node: int) -> None:
        b = self.brokers[node]
        for _ in range(3):
            try:
                b.start()
                return
            except BrokerError:
                time.sleep(1)
        raise BrokerError(f"broker {node} would not restart")

    KINDS = ["kill_copier", "kill_txn_coordinator", "kill_data_leader", "kill_group_coordinator", "pause_broker"]

    def one_fault(self, number: int) -> None:
        """Fault `number` of the run: the first ones are every kind once, in a seeded order."""
        if number == 0:
            self.first_kinds = self.rng.sample(self.KINDS, len(self.KINDS))
        kind = self.first_kinds[number] if number < len(self.KINDS) else self.rng.choice(self.KINDS)
        self.faults[kind] = self.faults.get(kind, 0) + 1
        if kind == "kill_copier":
            name = self.rng.choice(sorted(self.copiers))
            self.copiers[name].kill()
            self.copiers[name].wait(5)
            log(f"fault {kind}: {name}")
            return
        if kind == "kill_txn_coordinator":
            name = self.rng.choice(sorted(self.copiers))
            node = self.leaders("__transaction_state").get(java_hash(name) % TXN_STATE_PARTITIONS, -1)
        elif kind == "kill_group_coordinator":
            node = self.leaders("__consumer_offsets").get(java_hash(GROUP) % OFFSETS_PARTITIONS, -1)
        elif kind == "kill_data_leader":
            node = self.leaders(OUTPUT).get(self.rng.randrange(PARTITIONS), -1)
        else:
            node = self.rng.choice([1, 2, 3])
        if node not in self.brokers or not self.brokers[node].alive():
            log(f"fault {kind}: no live target")
            return
        b = self.brokers[node]
        log(f"fault {kind}: broker {node}")
        if kind == "pause_broker":
            os.kill(b.pid, signal.SIGSTOP)
            time.sleep(LEASE_TTL_S * 1.5)
            os.kill(b.pid, signal.SIGCONT)
        else:
            b.kill9()
            time.sleep(LEASE_TTL_S + 1)
            self.restart_broker(node)

    def close(self) -> None:
        for proc in self.copiers.values():
            if proc.poll() is None:
                proc.kill()
        for b in self.brokers.values():
            if b.alive():
                b.kill9()
        self.etcd.stop()


class Reader(threading.Thread):
    """A read_committed consumer following `output`: an `x` record is an aborted read,
    a value seen twice a duplicate."""

    def __init__(self, bootstrap: str):
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stop = threading.Event()
        self.seen: set[bytes] = set()
        self.aborted_reads = 0
        self.duplicates = 0

    def run(self) -> None:
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "txn-check-reader",
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
        c.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while not self.stop.is_set():
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            if m.value().startswith(b"x"):
                self.aborted_reads += 1
            elif m.value() in self.seen:
                self.duplicates += 1
            else:
                self.seen.add(m.value())
        c.close()


def group_done(bootstrap: str, ends: dict[int, int]) -> bool:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(INPUT, p) for p in range(PARTITIONS)], timeout=10)
        return all(tp.offset >= ends[tp.partition] for tp in got)
    except KafkaException:
        return False
    finally:
        c.close()


def read_output(bootstrap: str, level: str) -> tuple[dict[int, list[bytes]], dict[int, tuple[int, int]]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-check-final-{level}",
                  "isolation.level": level, "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        marks = {}
        for p in range(PARTITIONS):
            for attempt in range(10):
                try:
                    marks[p] = c.get_watermark_offsets(TopicPartition(OUTPUT, p), timeout=10)
                    break
                except KafkaException:
                    if attempt == 9:
                        raise
                    time.sleep(1)
        c.assign([TopicPartition(OUTPUT, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        at_end: set[int] = set()
        deadline = time.monotonic() + 60
        while len(at_end) < PARTITIONS and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            got[m.partition()].append(m.value())
        return got, marks
    finally:
        c.close()


def audit(data_dirs: dict[int, Path], marks: dict[str, dict[int, tuple[int, int]]]) -> dict:
    """tern_check's offline audit of `input` and `output` (the brokers stopped): the
    replicas of each partition byte-identical below the high watermark, no CRC error,
    torn tail or gap. The internal topics are left out: compacted, their replicas are
    cleaned independently and may differ in what they dropped."""
    out = {"replica_mismatches": 0, "crc_errors": 0, "torn_bytes": 0, "gaps": 0, "records_checked": 0,
           "mismatch_details": []}
    for topic in (INPUT, OUTPUT):
        a = tern_check.audit_replicas(data_dirs, marks.get(topic), topic=topic, partitions=PARTITIONS)
        for k in ("replica_mismatches", "crc_errors", "torn_bytes", "gaps", "records_checked"):
            out[k] += a[k]
        out["mismatch_details"] += [dict(topic=topic, **d) for d in a["mismatch_details"][:5]]
    return out


def judge(sent: dict[int, list[bytes]], got: dict[int, list[bytes]], reader: Reader, facts: dict) -> dict:
    facts = {"aborted_reads": reader.aborted_reads, "reader_duplicates": reader.duplicates, **facts}
    inject(sent, got, facts)
    lost = duplicated = out_of_order = aborted = 0
    for p in range(PARTITIONS):
        values = got[p]
        aborted += sum(1 for v in values if v.startswith(b"x"))
        clean = [v for v in values if not v.startswith(b"x")]
        duplicated += len(clean) - len(set(clean))
        lost += len(set(sent[p]) - set(clean))
        out_of_order += int(clean != sorted(clean))
    verdict = {
        "lost": lost, "duplicated": duplicated, "out_of_order_partitions": out_of_order,
        "aborted_in_final_read": aborted, **facts,
    }
    failures = [k for k in ("lost", "duplicated", "out_of_order_partitions", "aborted_in_final_read",
                            "aborted_reads", "reader_duplicates") if verdict[k]]
    for k in ("replica_mismatches", "crc_errors", "torn_bytes", "gaps"):
        if verdict.get(k):
            failures.append(k)
    if "records_checked" in verdict and not verdict["records_checked"]:
        failures.append("replica audit read nothing")
    if not facts.get("copied"):
        failures.append("copy did not finish")
    if facts.get("unstable_partitions"):
        failures.append("unstable_partitions")
    if facts.get("panics"):
        failures.append("panics")
    verdict["failures"] = failures
    verdict["ok"] = not failures
    return verdict


def run(args) -> int:
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    log(f"seed {seed}")
    work = Path(tempfile.mkdtemp(prefix="txn-check-"))
    r = Run(work, Path(args.binary or tern_bin()), seed)
    try:
        try:
            r.start()
            sent = r.fill(args.messages)
        except Exception as e:  # noqa: BLE001 - a setup failure is exit 2
            log(f"setup failed: {e}")
            return 2
        ends = {p: len(v) for p, v in sent.items()}
        reader = Reader(r.bootstrap())
        reader.start()
        for k in range(COPIERS):
            r.start_copier(f"copier-{k}", r.rng.randrange(1 << 30))
        started = time.monotonic()
        faults = 0
        while faults < args.faults and time.monotonic() - started < args.seconds:
            time.sleep(r.rng.uniform(0.5, 2.0))
            try:
                r.one_fault(faults)
            except (KafkaException, BrokerError, OSError) as e:
                log(f"fault {faults} could not be injected: {e}")
            faults += 1
            r.keep_copiers_running()
        fault_end = time.monotonic()
        copied = False
        deadline = time.monotonic() + args.finish_seconds
        while time.monotonic() < deadline:
            r.keep_copiers_running()
            if group_done(r.bootstrap(), ends):
                copied = True
                break
            time.sleep(1)
        r.stop_copiers()
        # Every transaction ends within its timeout: the LSO reaches the HW.
        unstable = []
        stable_by = time.monotonic() + TXN_TIMEOUT_MS / 1000 + 5
        while True:
            committed_marks = read_output(r.bootstrap(), "read_committed")[1]
            uncommitted_marks = read_output(r.bootstrap(), "read_uncommitted")[1]
            unstable = [p for p in range(PARTITIONS) if committed_marks[p][1] != uncommitted_marks[p][1]]
            if not unstable or time.monotonic() > stable_by:
                break
            time.sleep(1)
        time.sleep(1)
        reader.stop.set()
        reader.join(10)
        got, _ = read_output(r.bootstrap(), "read_committed")
        marks = {OUTPUT: uncommitted_marks}
        for b in r.brokers.values():
            if b.alive():
                b.stop()
        replicas = audit({n: b.data_dir for n, b in r.brokers.items()}, marks)
        panics = []
        for b in r.brokers.values():
            for path in b.log_paths:
                if path.exists() and "panicked" in path.read_text(errors="replace"):
                    panics.append(str(path))
        transactions = {"committed": 0, "aborted": 0}
        copier_errors = []  # why copiers gave up (fatal client errors, failed aborts, stuck calls)
        for name in r.copiers:
            for line in (work / f"{name}.out").read_text().splitlines():
                stats = json.loads(line)
                transactions["committed"] += stats.get("committed", 0)
                transactions["aborted"] += stats.get("aborted", 0)
                copier_errors += [f"{name}: {k} {stats[k]}" for k in ("fatal", "abort_failed", "stuck")
                               if k in stats]
        facts = {"seed": seed, "messages": args.messages, "faults": faults, "fault_kinds": r.faults,
                 "copied": copied, "copy_seconds": round(time.monotonic() - started, 1),
                 "after_faults_seconds": round(time.monotonic() - fault_end, 1),
                 "unstable_partitions": unstable, "panics": panics, "copier_exits": r.copier_exits,
                 "transactions_reported": transactions, "copier_errors": copier_errors[:20],
                 "work_dir": str(work), **replicas}
        verdict = judge(sent, got, reader, facts)
        print(json.dumps(verdict), flush=True)
        if verdict["ok"] and not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        return 0 if verdict["ok"] else 1
    finally:
        r.close()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode")
    c = sub.add_parser("copier")
    c.add_argument("--bootstrap", required=True)
    c.add_argument("--id", required=True)
    c.add_argument("--seed", type=int, default=0)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--faults", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--finish-seconds", type=float, default=180)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--binary")
    ap.add_argument("--keep", action="store_true", help="keep the work dir even when the run passes")
    args = ap.parse_args(argv)
    if args.mode == "copier":
        return copier(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
