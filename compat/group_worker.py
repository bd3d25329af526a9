#!/usr/bin/env python3
"""One consumer-group member in its own process, for the group tests (test_groups.py).

    python group_worker.py ck|kp member  '{"broker": "127.0.0.1:9092", "topic": "t", "group": "g", ...}'
    python group_worker.py ck|kp session '{"broker": ..., "topic": ..., "group": ..., "commit": "sync", "stop_after": 20}'

ck = confluent-kafka (librdkafka), kp = kafka-python. Both subscribe() to one topic with the
classic group protocol and the assignor "assignor" names: "range" (default; eager: every
rebalance revokes everything, then assigns) or "cooperative-sticky" (incremental: only the
partitions that move are revoked / assigned).

Prints one JSON object per line on stdout (flushed at once); client logs go to stderr:
  {"ev": "start", "client": "ck", "pid": 123}
  {"ev": "assign", "partitions": [0, 3], "assignment": [0, 3]}   partitions added; whole assignment after
  {"ev": "revoke", "partitions": [0, 3], "assignment": []}       partitions given up; what is left
  {"ev": "lost", "partitions": [...], "assignment": []}          lost without a clean revoke
  {"ev": "msg", "p": 0, "o": 17, "v": "..."}   a record handed to the application
  {"ev": "commit", "offsets": {"0": 18}, "error": null}   result of an explicit commit
  {"ev": "committed", "offsets": {"0": 18, "1": null}}    OffsetFetch, read back before close
  {"ev": "error", "error": "..."}              a client error (the process carries on)
  {"ev": "closed"}                             consumer closed (LeaveGroup sent)

member:  consume (auto-commit every second) until stdin reaches EOF, SIGTERM, or deadline_s.
session: process records until stop_after of them have been processed, commit them the way
         "commit" says (auto: enable.auto.commit, periodic; sync / async: explicit commit of
         last processed offset + 1 per partition), read the committed offsets back, close.
Other args: session_timeout_ms (6000), heartbeat_interval_ms (1000), assignor, group_instance_id
(static membership, KIP-345), client_id, client_rack; group_protocol "consumer" (KIP-848, ck only: the
broker assigns, with remote_assignor if given, and the session knobs are the broker's). Every loop is bounded by deadline_s (default 60 s
for session, 150 s for member).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

_out_lock = threading.Lock()
_ck_commit_results: list[tuple] = []  # confluent-kafka on_commit callbacks: (error, offsets, partition errors)


def emit(ev: str, **fields) -> None:
    line = json.dumps({"ev": ev, **fields}, default=str)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def stop_signals() -> threading.Event:
    """Set on SIGTERM or when stdin reaches EOF (the parent closed it or died)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def watch_stdin():
        try:  # os.read, not sys.stdin: a daemon thread blocked in a buffered read aborts shutdown
            while os.read(0, 4096):
                pass
        except OSError:
            pass
        stop.set()

    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    return stop


# ---------------------------------------------------------------------------- confluent-kafka

def ck_consumer(a: dict, auto_commit: bool):
    from confluent_kafka import Consumer

    def on_commit(err, partitions):
        _ck_commit_results.append(
            (str(err) if err else None,
             {str(tp.partition): tp.offset for tp in partitions},
             [str(tp.error) for tp in partitions if tp.error]))

    if a.get("group_protocol") == "consumer":
        # KIP-848: the broker assigns and times sessions; the classic knobs are refused.
        protocol = {"group.protocol": "consumer",
                    **({"group.remote.assignor": a["remote_assignor"]} if a.get("remote_assignor") else {})}
    else:
        protocol = {"session.timeout.ms": a.get("session_timeout_ms", 6000),
                    "heartbeat.interval.ms": a.get("heartbeat_interval_ms", 1000),
                    "partition.assignment.strategy": a.get("assignor", "range")}
    return Consumer({
        "bootstrap.servers": a["broker"],
        "group.id": a["group"],
        "client.id": a.get("client_id", "tern-compat-ck-worker"),
        **({"client.rack": a["client_rack"]} if a.get("client_rack") else {}),
        **protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": auto_commit,
        "auto.commit.interval.ms": a.get("auto_commit_interval_ms", 500),
        "socket.timeout.ms": 10000,
        "on_commit": on_commit,
        **({"group.instance.id": a["group_instance_id"]} if a.get("group_instance_id") else {}),
        "error_cb": lambda err: emit("error", error=str(err)),
    })


class Assignment:
    """The member's whole assignment, kept from the (eager or incremental) callbacks."""

    def __init__(self):
        self.parts: set[int] = set()

    def change(self, ev: str, partitions) -> None:
        delta = sorted(tp.partition for tp in partitions)
        if ev == "assign":
            self.parts |= set(delta)
        else:
            self.parts -= set(delta)
        emit(ev, partitions=delta, assignment=sorted(self.parts))


def ck_subscribe(c, topic):
    # confluent-kafka assigns (eager) / incrementally assigns (cooperative) right after on_assign.
    # A topic starting with "^" is a regex subscription (broker-side with group.protocol=consumer).
    a = Assignment()
    c.subscribe([topic], on_assign=lambda _c, ps: a.change("assign", ps),
                on_revoke=lambda _c, ps: a.change("revoke", ps), on_lost=lambda _c, ps: a.change("lost", ps))


def ck_committed(c, topic, partitions) -> dict:
    from confluent_kafka import TopicPartition
    res = c.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
    return {str(tp.partition): (tp.offset if tp.offset >= 0 else None) for tp in res}


def ck_poll_one(c):
    from confluent_kafka import KafkaError
    m = c.poll(0.2)
    if m is None:
        return None
    if m.error():
        if m.error().code() != KafkaError._PARTITION_EOF:
            emit("error", error=str(m.error()))
        return None
    return m


def ck_member(a: dict, stop: threading.Event) -> None:
    c = ck_consumer(a, auto_commit=True)
    ck_subscribe(c, a["topic"])
    deadline = time.monotonic() + a.get("deadline_s", 150)
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            m = ck_poll_one(c)
            if m is not None:
                emit("msg", t=m.topic(), p=m.partition(), o=m.offset(), v=(m.value() or b"").decode(errors="replace"))
    finally:
        c.close()
        emit("closed")


def ck_session(a: dict, stop: threading.Event) -> None:
    from confluent_kafka import KafkaException, TopicPartition
    mode = a["commit"]
    topic = a["topic"]
    c = ck_consumer(a, auto_commit=(mode == "auto"))
    ck_subscribe(c, topic)
    deadline = time.monotonic() + a.get("deadline_s", 60)
    last: dict[int, int] = {}
    processed = 0
    try:
        while processed < a["stop_after"] and not stop.is_set() and time.monotonic() < deadline:
            m = ck_poll_one(c)  # one record per poll: exactly stop_after are handed to the app
            if m is None:
                continue
            processed += 1
            last[m.partition()] = m.offset()
            emit("msg", t=m.topic(), p=m.partition(), o=m.offset(), v=(m.value() or b"").decode(errors="replace"))
        if processed < a["stop_after"]:
            emit("error", error=f"deadline: processed only {processed} of {a['stop_after']}")
        offsets = [TopicPartition(topic, p, o + 1) for p, o in sorted(last.items())]
        if mode == "sync" and offsets:
            try:
                res = c.commit(offsets=offsets, asynchronous=False)
                emit("commit", offsets={str(tp.partition): tp.offset for tp in res},
                     error=next((str(tp.error) for tp in res if tp.error), None))
            except KafkaException as e:
                emit("commit", offsets=None, error=str(e))
        elif mode == "async" and offsets:
            c.commit(offsets=offsets, asynchronous=True)
            # The on_commit callback is served by poll(); auto commit is off and no offsets
            # are stored, so records poll() returns meanwhile are dropped, never committed.
            t_end = time.monotonic() + 15
            while not _ck_commit_results and time.monotonic() < t_end:
                c.poll(0.1)
            results = _ck_commit_results or [("no commit callback within 15 s", None, [])]
            err, offs, perrs = results[0]
            emit("commit", offsets=offs, error=err or (perrs[0] if perrs else None))
        elif mode == "auto":
            # No more poll(): the offsets stored so far are exactly the processed records.
            # librdkafka's background auto-commit (every 500 ms) must commit them.
            time.sleep(2.0)
        parts = sorted(tp.partition for tp in c.assignment())
        emit("committed", offsets=ck_committed(c, topic, parts) if parts else {})
    finally:
        c.close()
        emit("closed")


# ---------------------------------------------------------------------------- kafka-python

def kp_consumer(a: dict, auto_commit: bool):
    from kafka import KafkaConsumer
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    assignor = {"range": RangePartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}[
        a.get("assignor", "range")]
    return KafkaConsumer(
        bootstrap_servers=a["broker"],
        group_id=a["group"],
        client_id=a.get("client_id", "tern-compat-kp-worker"),
        session_timeout_ms=a.get("session_timeout_ms", 6000),
        heartbeat_interval_ms=a.get("heartbeat_interval_ms", 1000),
        auto_offset_reset="earliest",
        enable_auto_commit=auto_commit,
        auto_commit_interval_ms=a.get("auto_commit_interval_ms", 500),
        request_timeout_ms=10000,
        max_poll_records=a.get("max_poll_records", 5),
        partition_assignment_strategy=[assignor],
        group_instance_id=a.get("group_instance_id"),
    )


def kp_subscribe(c, topic):
    from kafka import ConsumerRebalanceListener

    a = Assignment()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            a.change("revoke", revoked)

        def on_partitions_assigned(self, assigned):
            a.change("assign", assigned)

        def on_partitions_lost(self, lost):
            a.change("lost", lost)

    c.subscribe([topic], listener=Listener())


def kp_committed(c, topic, partitions) -> dict:
    from kafka import TopicPartition
    return {str(p): c.committed(TopicPartition(topic, p), timeout_ms=10000) for p in partitions}


def kp_poll(c):
    try:
        return c.poll(timeout_ms=200)
    except Exception as e:  # noqa: BLE001 - reported, the loop carries on
        emit("error", error=f"{type(e).__name__}: {e}")
        time.sleep(0.2)
        return {}


def kp_member(a: dict, stop: threading.Event) -> None:
    c = kp_consumer(a, auto_commit=True)
    kp_subscribe(c, a["topic"])
    deadline = time.monotonic() + a.get("deadline_s", 150)
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            for tp, recs in kp_poll(c).items():
                for r in recs:
                    emit("msg", p=tp.partition, o=r.offset, v=(r.value or b"").decode(errors="replace"))
    finally:
        c.close(timeout_ms=10000)
        emit("closed")


def kp_session(a: dict, stop: threading.Event) -> None:
    from kafka import OffsetAndMetadata, TopicPartition
    mode = a["commit"]
    topic = a["topic"]
    # max_poll_records=1: exactly stop_after records are handed to the application, so the
    # consumer's position (what auto-commit commits) is exactly the processed records.
    c = kp_consumer({**a, "max_poll_records": 1}, auto_commit=(mode == "auto"))
    kp_subscribe(c, topic)
    deadline = time.monotonic() + a.get("deadline_s", 60)
    last: dict[int, int] = {}
    processed = 0
    try:
        while processed < a["stop_after"] and not stop.is_set() and time.monotonic() < deadline:
            for tp, recs in kp_poll(c).items():
                for r in recs:
                    processed += 1
                    last[tp.partition] = r.offset
                    emit("msg", p=tp.partition, o=r.offset, v=(r.value or b"").decode(errors="replace"))
        if processed < a["stop_after"]:
            emit("error", error=f"deadline: processed only {processed} of {a['stop_after']}")
        assigned = sorted(c.assignment(), key=lambda tp: tp.partition)
        # Paused partitions return no records, so later poll()s (which run the auto commit
        # and the async commit callback) cannot move the position past what was processed.
        c.pause(*assigned)
        offsets = {TopicPartition(topic, p): OffsetAndMetadata(o + 1, "", -1) for p, o in last.items()}
        if mode == "sync" and offsets:
            try:
                c.commit(offsets)
                emit("commit", offsets={str(tp.partition): om.offset for tp, om in offsets.items()}, error=None)
            except Exception as e:  # noqa: BLE001
                emit("commit", offsets=None, error=f"{type(e).__name__}: {e}")
        elif mode == "async" and offsets:
            results = []
            c.commit_async(offsets, callback=lambda offs, resp: results.append(resp))
            t_end = time.monotonic() + 15
            while not results and time.monotonic() < t_end:
                kp_poll(c)
            resp = results[0] if results else "no commit callback within 15 s"
            err = f"{type(resp).__name__}: {resp}" if isinstance(resp, (Exception, str)) else None
            emit("commit", offsets={str(tp.partition): om.offset for tp, om in offsets.items()}, error=err)
        elif mode == "auto":
            t_end = time.monotonic() + 2.0
            while time.monotonic() < t_end:  # auto commit (every 500 ms) runs inside poll()
                kp_poll(c)
        emit("committed", offsets=kp_committed(c, topic, [tp.partition for tp in assigned]))
    finally:
        # autocommit=False: for "auto" the periodic commit above must already have committed.
        c.close(autocommit=False, timeout_ms=10000)
        emit("closed")


def main() -> int:
    client, mode, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    stop = stop_signals()
    emit("start", client=client, mode=mode, pid=os.getpid())
    fn = {("ck", "member"): ck_member, ("ck", "session"): ck_session,
          ("kp", "member"): kp_member, ("kp", "session"): kp_session}[(client, mode)]
    fn(args, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
