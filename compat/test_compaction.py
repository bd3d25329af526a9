"""Log compaction (cleanup.policy=compact) against tern, with confluent-kafka (librdkafka)
and kafka-python.

What Kafka's log cleaner promises, and what these tests hold tern to:
- for every key, the latest record survives, at the offset it was given when it was
  produced, with its timestamp and headers; older records of the key go, leaving gaps
  (offsets never change, the log start offset does not move);
- a tombstone (null value) deletes its key: it stays readable for delete.retention.ms
  after the cleaner first passes it, then a later pass removes it too;
- the active (last) segment is never cleaned, so every test rolls segments with a small
  segment.bytes and produces filler (distinct keys) after the keyed data;
- cleanup.policy=compact alone never deletes by age; compact,delete does both;
- a keyless record cannot be written to a compacted topic (INVALID_RECORD, 87), and
  nothing of the refused request is appended; keyless records from before a switch to
  compact are dropped by the cleaner;
- min.compaction.lag.ms holds young records back, max.compaction.lag.ms forces a pass
  below min.cleanable.dirty.ratio;
- what the cleaner wrote survives clean restarts and kill -9 (also at random moments
  while it works), the log start offset stays put, and an idempotent producer carries on;
- DeleteRecords is refused (POLICY_VIOLATION) on a topic whose policy lacks delete.

The broker runs its cleaner every 200 ms (--log-cleaner-backoff-ms) and its retention
check every 200 ms, so every wait here is short and bounded. No wait stands in for an
event: "the cleaner has had its rounds" is the cleaner passing over a witness topic
(cleaner_rounds), "flushed" is the broker's recovery checkpoint reaching the log end
(wait_flushed), and when a pass ran is read from the broker's own "log cleaner pass"
log lines (cleaner_passes), so a slow machine makes these tests slower, never wrong.
"""

from __future__ import annotations

import json
import random
import re
import struct
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from ck import consume_all, new_consumer, produce_all
from tern_harness import free_port, wait_until

METRICS = f"127.0.0.1:{free_port()}"  # one broker at a time: every test's broker uses it
pytestmark = pytest.mark.broker_args(
    "--log-cleaner-backoff-ms", "200",
    "--log-retention-check-interval-ms", "200",
    "--metrics", METRICS,
)

SEGMENT_BYTES = 8192  # below segment.bytes's 1 MiB minimum: internal.segment.bytes (Kafka's testing knob); a batch must fit in one segment
FIXED_TS = 1_700_000_000_000  # Nov 2023: far older than the default retention.ms (7 days)
COMPACT_WAIT_S = 30.0
# One ProduceRequest batch stays well below SEGMENT_BYTES, so batches never get refused
# with RECORD_LIST_TOO_LARGE and segments roll every few batches.
CK_SMALL_BATCHES = {"batch.size": 2048, "linger.ms": 5, "compression.type": "none"}


def compact_config(**overrides: str) -> dict[str, str]:
    """Topic configs that let the cleaner work at once: small segments (so the keyed data
    lands in sealed segments) and a dirty ratio a single overwritten key exceeds."""
    return {"cleanup.policy": "compact", "internal.segment.bytes": str(SEGMENT_BYTES),
            "min.cleanable.dirty.ratio": "0.01", **overrides}


def noise(seed: str, n: int) -> bytes:
    """n incompressible bytes, the same for the same seed: compressed batches still fill
    segments, and a wrong value is told apart from the right one."""
    return random.Random(seed).randbytes(n)


# ---------------------------------------------------------------------------- what is produced

def keyed_messages(n_keys: int, n_values: int, tag: str, timestamp_base: int | None = FIXED_TS,
                   null_header: bool = True) -> list[dict]:
    """n_values rounds over n_keys keys: the last round holds every key's latest value.
    Every third record carries headers (a duplicate name, and a null value unless
    null_header is False: kafka-python cannot send one), and each has its own explicit
    CreateTime (unless timestamp_base is None)."""
    msgs = []
    for rnd in range(n_values):
        for k in range(n_keys):
            seq = len(msgs)
            headers = None
            if seq % 3 == 0:
                headers = [("round", str(rnd).encode()), ("k", f"{k}".encode()),
                           ("round", None if null_header else b"")]
            msgs.append({
                "key": f"key-{k:03d}".encode(),
                "value": f"{tag} k{k} r{rnd} ".encode() + noise(f"{tag}-{k}-{rnd}", 60),
                "headers": headers,
                "timestamp": None if timestamp_base is None else timestamp_base + seq,
            })
    return msgs


def filler_messages(n: int, tag: str, timestamp: int | None = None) -> list[dict]:
    """Records with keys of their own (the cleaner keeps every one), big enough that n of
    them roll a few segments, so the keyed data before them is no longer in the active one."""
    return [{"key": f"filler-{tag}-{i:05d}".encode(), "value": noise(f"filler-{tag}-{i}", 300),
             "timestamp": timestamp} for i in range(n)]


FILLER_PER_SEGMENT = SEGMENT_BYTES // 300 + 1


def produce_ok(addr: str, topic: str, msgs: list[dict], config: dict | None = None) -> list[int]:
    """Produces msgs with confluent-kafka and returns each one's offset (by index); every
    delivery report must be a success on partition 0."""
    reports = produce_all(addr, topic, msgs, {**CK_SMALL_BATCHES, **(config or {})})
    errors = [(i, err) for i, err, _, _ in reports if err is not None]
    assert not errors, f"delivery errors: {errors[:5]}"
    assert len(reports) == len(msgs)
    assert {p for _, _, p, _ in reports} == {0}, reports[:5]
    offsets = dict((i, o) for i, _, _, o in reports)
    return [offsets[i] for i in range(len(msgs))]


# ---------------------------------------------------------------------------- what is read back

def admin_for(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.address, "socket.timeout.ms": 10000})


def create_topic(admin: AdminClient, name: str, config: dict[str, str]) -> None:
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config=config)],
                        operation_timeout=10)[name].result(timeout=15)


def describe_topic(admin: AdminClient, name: str) -> dict:
    res = ConfigResource(ResourceType.TOPIC, name)
    return admin.describe_configs([res], request_timeout=10)[res].result(timeout=15)


def watermarks(addr: str, topic: str) -> tuple[int, int]:
    c = new_consumer(addr)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
    finally:
        c.close()


def read_log(addr: str, topic: str) -> tuple[list[tuple], tuple[int, int]]:
    """Everything partition 0 holds, from the beginning to its high watermark, as
    (offset, key, value, headers, (timestamp type, timestamp)) tuples, plus the watermarks.
    The read must be complete: the last offset (never cleaned: it is in the active
    segment) is the high watermark - 1."""
    got, errors, wm = consume_all(addr, topic, partitions=[0], timeout=20)
    assert not errors, f"consumer errors: {[str(e) for e in errors]}"
    low, high = wm[0]
    recs = [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()) for m in got]
    if high > low:
        assert recs and recs[-1][0] == high - 1, \
            f"read stopped at {recs[-1][0] if recs else None}, high watermark {high}"
    return recs, (low, high)


def first_offset_from(addr: str, topic: str, offset: int, timeout: float = 10.0):
    """Offset of the first record a consumer gets when it starts at `offset` with
    auto.offset.reset=error: inside a compaction hole that is the next retained record;
    an out-of-range answer comes back as the KafkaError instead."""
    c = new_consumer(addr, {"auto.offset.reset": "error"})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                return m.error()
            return m.offset()
        return None
    finally:
        c.close()


def keyed_counts(recs: list[tuple], prefix: bytes = b"key-") -> Counter:
    return Counter(r[1] for r in recs if r[1] is not None and r[1].startswith(prefix))


def latest_by_key(msgs: list[dict], offsets: list[int]) -> dict[bytes, tuple[int, dict]]:
    """key -> (offset, message) of the last record produced for it."""
    latest = {}
    for m, o in zip(msgs, offsets):
        latest[m["key"]] = (o, m)
    return latest


def wait_compacted(addr: str, topic: str, n_keys: int, timeout: float = COMPACT_WAIT_S,
                   prefix: bytes = b"key-", nudge=None):
    """Reads the partition from the beginning (every 0.5 s, for `timeout` seconds at most)
    until each of the n_keys keys holds exactly one record. `nudge`, if given, is called
    between reads (e.g. to add dirty data so the cleaner passes again). Returns the last read."""
    last = {}

    def compacted():
        if nudge is not None:
            nudge()
        recs, wm = read_log(addr, topic)
        counts = keyed_counts(recs, prefix)
        last["recs"], last["wm"], last["counts"] = recs, wm, counts
        return len(counts) == n_keys and set(counts.values()) == {1}

    try:
        wait_until(compacted, timeout, interval=0.5, what=f"one record per key in {topic}")
    except AssertionError as e:
        counts = last.get("counts", Counter())
        raise AssertionError(f"{e}; last read: {len(counts)} keys, records per key "
                             f"{sorted(Counter(counts.values()).items())}, watermarks {last.get('wm')}") from None
    return last["recs"], last["wm"]


def segment_files(broker, topic: str) -> list:
    return sorted((broker.data_dir / f"{topic}-0").glob("*.log"))


# ---------------------------------------------------------------------------- what the broker says

def passes_total() -> float:
    """tern_log_cleaner_passes_total on the running broker's /metrics (0 from start-up)."""
    text = urllib.request.urlopen(f"http://{METRICS}/metrics", timeout=5).read().decode()
    return sum(float(line.rpartition(" ")[2]) for line in text.splitlines()
               if line.split("{", 1)[0].split(" ", 1)[0] == "tern_log_cleaner_passes_total")


PASS_LINE = re.compile(r"^(\S+Z)\s+INFO\s.*log cleaner pass partition=(\S+) cleaned_up_to=(\d+) "
                       r".*removed_records=(\d+) .*elapsed_ms=(\d+)")


@dataclass
class Pass:
    """One cleaner pass as its "log cleaner pass" line reports it, on the broker's wall clock
    (seconds since the epoch, the clock the delete horizon and the compaction lags use):
    `started` is the earliest it can have begun, `ended` when it was logged."""
    started: float
    ended: float
    cleaned_up_to: int
    removed: int


def cleaner_passes(broker, topic: str, partition: int = 0) -> list[Pass]:
    """Every cleaner pass over one partition, in order, from the broker's logs (all its runs)."""
    out = []
    for path in broker.log_paths:
        if not path.exists():
            continue
        for line in path.read_text(errors="replace").splitlines():
            m = PASS_LINE.match(line)
            if m and m.group(2) == f"{topic}-{partition}":
                ended = datetime.fromisoformat(m.group(1)).timestamp()
                out.append(Pass(ended - int(m.group(5)) / 1000 - 0.001, ended, int(m.group(3)), int(m.group(4))))
    return out


def recovery_checkpoint(broker, topic: str, partition: int = 0) -> int:
    """The offset the broker's recovery-point-offset-checkpoint (written after each
    log.flush.interval.ms flush) records for a partition: everything below it is on disk."""
    path = broker.data_dir / "recovery-point-offset-checkpoint"
    return json.loads(path.read_text()).get(f"{topic}-{partition}", -1)


def wait_flushed(broker, topic: str, end: int, timeout: float = 15.0) -> None:
    """Waits until the broker's recovery checkpoint covers the partition up to `end`."""
    wait_until(lambda: recovery_checkpoint(broker, topic) >= end, timeout, interval=0.05,
               what=f"{topic}-0 flushed up to {end} (recovery checkpoint)")


def create_witness(broker, admin: AdminClient, topic: str) -> str:
    """A compacted topic for cleaner_rounds: flush.messages=1 flushes every write before it
    is acknowledged, so what is produced to it is cleanable at once."""
    witness = f"{topic}-witness"
    create_topic(admin, witness, compact_config(**{"flush.messages": "1"}))
    return witness


def cleaner_rounds(broker, witness: str, rounds: int = 2) -> None:
    """Makes the cleaner pass `rounds` times over `witness`: each round adds two segments of
    dirty data and waits until tern_log_cleaner_passes_total advances and the witness's own
    pass is logged. With one cleaner thread, the claim that follows a pass comes before the
    next round's data exists: a partition that was due when a round's pass ended has its
    pass logged before the next round's. So after two rounds, a partition that was eligible
    before the first and has no pass logged was not due."""
    for _ in range(rounds):
        total, mine = passes_total(), len(cleaner_passes(broker, witness))
        produce_ok(broker.address, witness, filler_messages(FILLER_PER_SEGMENT * 2, f"witness-{mine}"))
        wait_until(lambda: passes_total() > total and len(cleaner_passes(broker, witness)) > mine, 20,
                   interval=0.05, what=f"a cleaner pass over {witness}")


def check_latest_kept(recs: list[tuple], latest: dict[bytes, tuple[int, dict]]) -> None:
    """Each key's one remaining record is its latest one: same offset as its delivery
    report, same value, headers and CreateTime."""
    by_key = {}
    for off, key, value, headers, ts in recs:
        if key in latest:
            assert key not in by_key, f"{key!r} still has two records: {by_key[key][0]} and {off}"
            by_key[key] = (off, value, headers, ts)
    assert set(by_key) == set(latest), f"keys missing after compaction: {sorted(set(latest) - set(by_key))[:5]}"
    for key, (off, m) in latest.items():
        got_off, value, headers, (ts_type, ts) = by_key[key]
        assert got_off == off, f"{key!r}: latest value at offset {got_off}, delivered at {off}"
        assert value == m["value"], f"{key!r} at {off}: not its latest value: {value[:30]!r}"
        assert headers == m["headers"], f"{key!r} at {off}: headers {headers} != {m['headers']}"
        assert ts_type == TIMESTAMP_CREATE_TIME, (key, ts_type)
        if m["timestamp"] is not None:
            assert ts == m["timestamp"], f"{key!r} at {off}: timestamp {ts} != {m['timestamp']}"


def check_all_kept(recs: list[tuple], msgs: list[dict], offsets: list[int]) -> None:
    """Every one of msgs (distinct keys) is still there, unchanged, at its offset."""
    at = {r[0]: r for r in recs}
    missing = [o for o in offsets if o not in at]
    assert not missing, f"{len(missing)} of {len(offsets)} distinct-key records gone, first offsets {missing[:5]}"
    for m, o in zip(msgs, offsets):
        assert (at[o][1], at[o][2]) == (m["key"], m["value"]), f"offset {o}: {at[o][1]!r} != {m['key']!r}"


def check_offsets_with_gaps(recs: list[tuple], wm: tuple[int, int]) -> None:
    """Offsets strictly increase, the log start is still 0, and records are missing in
    between (compaction leaves holes, it never renumbers)."""
    offsets = [r[0] for r in recs]
    assert all(a < b for a, b in zip(offsets, offsets[1:])), "offsets not strictly increasing"
    assert wm[0] == 0, f"compaction moved the log start offset to {wm[0]}"
    assert len(offsets) < wm[1] - wm[0], f"no gaps: {len(offsets)} records for offsets {wm}"
    assert offsets[0] > 0, "offset 0 (an overwritten key) is still there"


def seal_keyed_data(broker, topic: str, tag: str, segments: int = 3) -> tuple[list[dict], list[int]]:
    """Produces `segments` segments' worth of filler, so the keyed data before it is in
    sealed segments; checks that the partition really has that many segment files."""
    filler = filler_messages(FILLER_PER_SEGMENT * segments, tag)
    offsets = produce_ok(broker.address, topic, filler)
    n = len(segment_files(broker, topic))
    assert n >= segments, f"only {n} segment files after {segments} segments of filler: nothing is sealed"
    return filler, offsets


# ---------------------------------------------------------------------------- tests

N_KEYS, N_VALUES = 20, 6


@pytest.mark.timeout(120)
def test_compaction_keeps_latest_value_per_key_at_its_offset(broker, topic):
    """The basic promise, with librdkafka: after the cleaner passes, each key has exactly
    its latest record, at the offset of its delivery report, with its timestamp and headers;
    distinct-key filler is untouched; offsets keep their holes. The keyed data has 2023
    CreateTimes and retention runs every 200 ms: cleanup.policy=compact alone never
    deletes by age."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config())
    configs = describe_topic(admin, topic)
    assert (configs["cleanup.policy"].value, ConfigSource(configs["cleanup.policy"].source)) == \
        ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert configs["min.cleanable.dirty.ratio"].value == "0.01"
    assert ConfigSource(configs["min.cleanable.dirty.ratio"].source) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert configs["delete.retention.ms"].value == "86400000"
    assert configs["min.compaction.lag.ms"].value == "0"

    msgs = keyed_messages(N_KEYS, N_VALUES, "basic")
    offsets = produce_ok(broker.address, topic, msgs)
    assert offsets == list(range(len(msgs)))
    filler, filler_offsets = seal_keyed_data(broker, topic, "basic")

    recs, wm = wait_compacted(broker.address, topic, N_KEYS)
    assert wm == (0, len(msgs) + len(filler)), wm
    check_latest_kept(recs, latest_by_key(msgs, offsets))
    check_all_kept(recs, filler, filler_offsets)
    check_offsets_with_gaps(recs, wm)
    assert len(recs) == N_KEYS + len(filler), f"{len(recs)} records left, expected {N_KEYS} keys + filler"
    # A fetch from inside a hole (offset 1: an overwritten value) returns the next record kept.
    assert first_offset_from(broker.address, topic, 1) == recs[0][0]


@pytest.mark.timeout(150)
def test_tombstone_removes_key_then_goes_itself_after_delete_retention(broker, topic):
    """A null value deletes its key: the first pass leaves only the tombstone (the key's
    values are gone), and once delete.retention.ms (2 s) has passed a later pass removes
    the tombstone too. Later passes need fresh dirty data, so filler is added while waiting."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config(**{"delete.retention.ms": "2000"}))
    msgs = keyed_messages(N_KEYS, 3, "tomb")
    deleted = [f"key-{k:03d}".encode() for k in range(0, N_KEYS, 4)]
    tombstones = [{"key": k, "value": None, "timestamp": FIXED_TS + 10_000 + i} for i, k in enumerate(deleted)]
    offsets = produce_ok(broker.address, topic, msgs + tombstones)
    tomb_offset = dict(zip(deleted, offsets[len(msgs):]))
    seal_keyed_data(broker, topic, "tomb")

    # First pass: every key down to one record; a deleted key's one record is its tombstone.
    recs, _ = wait_compacted(broker.address, topic, N_KEYS)
    by_key = {r[1]: r for r in recs if r[1] in set(deleted)}
    for k in deleted:
        off, _, value, _, (_, ts) = by_key[k]
        assert (off, value) == (tomb_offset[k], None), f"{k!r}: {off}, {value!r}: not its tombstone"
        assert ts == FIXED_TS + 10_000 + deleted.index(k)
    kept_msgs = [(m, o) for m, o in zip(msgs, offsets) if m["key"] not in deleted]
    latest_kept = latest_by_key([m for m, _ in kept_msgs], [o for _, o in kept_msgs])
    check_latest_kept(recs, latest_kept)

    # Later passes (fed with a segment of filler per second) drop the tombstones.
    nudges = {"n": 0, "at": 0.0}
    extra_filler, extra_offsets = [], []

    def nudge():
        if time.monotonic() - nudges["at"] >= 1.0:
            batch = filler_messages(FILLER_PER_SEGMENT, f"tomb-nudge{nudges['n']}")
            extra_offsets.extend(produce_ok(broker.address, topic, batch))
            extra_filler.extend(batch)
            nudges["n"] += 1
            nudges["at"] = time.monotonic()

    last = {}

    def tombstones_gone():
        nudge()
        recs, wm = read_log(broker.address, topic)
        last["recs"] = recs
        return not (set(keyed_counts(recs)) & set(deleted))

    wait_until(tombstones_gone, 60, interval=0.5, what="tombstones removed after delete.retention.ms")
    # When, by the broker's clock: the first pass over the tombstones gives them their delete
    # horizon (its time + delete.retention.ms); no pass removes anything before the horizon,
    # and the one that removes them (exactly the tombstones: the filler's keys are its own)
    # starts at the horizon or later.
    passes = cleaner_passes(broker, topic)
    first = next(p for p in passes if p.cleaned_up_to > max(tomb_offset.values()))
    later = [p for p in passes if p.ended > first.ended]
    removal = next(p for p in later if p.removed > 0)
    assert removal.removed == len(deleted), f"the tombstones' pass removed {removal.removed} records: {passes}"
    assert removal.ended - first.started >= 2.0, \
        f"tombstones removed {removal.ended - first.started:.3f}s after their first pass (delete.retention.ms=2000)"
    recs = last["recs"]
    assert set(keyed_counts(recs)) == set(latest_kept), "a surviving key went with the tombstones"
    check_latest_kept(recs, latest_kept)
    check_all_kept(recs, extra_filler, extra_offsets)


def kp_producer(addr: str, **config) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=addr, request_timeout_ms=10000, max_block_ms=20000,
                         delivery_timeout_ms=30000, batch_size=2048, linger_ms=5, **config)


def kp_produce(addr: str, topic: str, msgs: list[dict], **config) -> list[int]:
    """Produces msgs with kafka-python; returns each one's offset (all on partition 0)."""
    p = kp_producer(addr, **config)
    try:
        futures = [p.send(topic, key=m["key"], value=m["value"], headers=m["headers"] or [],
                          timestamp_ms=m["timestamp"], partition=0) for m in msgs]
        p.flush(timeout=30)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        p.close(timeout=10)
    assert {m.partition for m in metas} == {0}
    return [m.offset for m in metas]


def kp_read_log(addr: str, topic: str) -> tuple[list[tuple], tuple[int, int]]:
    """Partition 0 from the beginning to its end offset with kafka-python (CRCs checked),
    as (offset, key, value, headers or None, (timestamp type, timestamp)) tuples."""
    c = KafkaConsumer(bootstrap_servers=addr, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=10000, check_crcs=True)
    try:
        tp = KpTopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        low = c.beginning_offsets([tp], timeout_ms=10000)[tp]
        high = c.end_offsets([tp], timeout_ms=10000)[tp]
        recs, pos = [], low
        deadline = time.monotonic() + 20
        while pos < high and time.monotonic() < deadline:
            for r in c.poll(timeout_ms=500).get(tp, []):
                recs.append((r.offset, r.key, r.value, list(r.headers) or None,
                             (TIMESTAMP_CREATE_TIME if r.timestamp_type == 0 else r.timestamp_type, r.timestamp)))
                pos = r.offset + 1
        assert pos >= high, f"kafka-python read stopped at {pos}, end offset {high}"
        return recs, (low, high)
    finally:
        c.close(autocommit=False)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_batches_are_compacted_kafka_python(broker, topic, codec):
    """kafka-python producing compressed batches: the cleaner has to open them to drop
    overwritten records, and what it writes back must still decode (CRCs checked) with
    each key's latest value, offset, timestamp and headers."""
    admin = KafkaAdminClient(bootstrap_servers=broker.address, request_timeout_ms=10000)
    try:
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1,
                                     "configs": compact_config()}}, timeout_ms=10000, wait_for_metadata=True)
    finally:
        admin.close()
    msgs = keyed_messages(N_KEYS, N_VALUES, f"kp-{codec}", null_header=False)
    offsets = kp_produce(broker.address, topic, msgs, compression_type=codec)
    assert offsets == list(range(len(msgs)))
    filler = filler_messages(FILLER_PER_SEGMENT * 3, f"kp-{codec}")
    for m in filler:
        m["headers"] = None
    filler_offsets = kp_produce(broker.address, topic, filler, compression_type=codec)
    assert len(segment_files(broker, topic)) >= 3, "nothing sealed: keyed data still in the active segment"

    last = {}

    def compacted():
        recs, wm = kp_read_log(broker.address, topic)
        last["recs"], last["wm"] = recs, wm
        counts = keyed_counts(recs)
        return len(counts) == N_KEYS and set(counts.values()) == {1}

    wait_until(compacted, COMPACT_WAIT_S, interval=0.5, what=f"one record per key ({codec} batches)")
    recs, wm = last["recs"], last["wm"]
    assert wm == (0, len(msgs) + len(filler)), wm
    check_latest_kept(recs, latest_by_key(msgs, offsets))
    check_all_kept(recs, filler, filler_offsets)
    check_offsets_with_gaps(recs, wm)
    # librdkafka reads the same cleaned batches identically.
    ck_recs, ck_wm = read_log(broker.address, topic)
    assert ck_wm == wm
    assert [r[:3] for r in ck_recs] == [r[:3] for r in recs]


def test_keyless_record_to_compacted_topic_is_refused(broker, topic):
    """A record without a key cannot be compacted: Kafka refuses the batch with
    INVALID_RECORD (87) and appends nothing of it, not even the keyed records next to the
    keyless one; the high watermark stays, and the next record gets the next offset."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config())
    assert produce_ok(broker.address, topic, [{"key": b"first", "value": b"v0"}]) == [0]
    no_retries = {"message.send.max.retries": 0, "compression.type": "none"}

    (_, err, _, _), = produce_all(broker.address, topic, [{"value": b"no key"}], no_retries)
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, \
        f"keyless record: expected INVALID_RECORD, got {err}"
    assert watermarks(broker.address, topic) == (0, 1)

    # One batch (linger 300 ms) of keyed, keyless, keyed: the whole request is refused.
    mixed = [{"key": b"a", "value": b"1"}, {"value": b"keyless"}, {"key": b"b", "value": b"2"}]
    reports = produce_all(broker.address, topic, mixed, {**no_retries, "linger.ms": 300})
    by_index = {i: err for i, err, _, _ in reports}
    assert by_index[1] is not None and by_index[1].code() == KafkaError.INVALID_RECORD, \
        f"keyless record in a batch: expected INVALID_RECORD, got {by_index[1]}"
    assert [by_index[i] is not None for i in range(3)] == [True] * 3, \
        f"part of the refused batch was appended: {by_index}"
    assert watermarks(broker.address, topic) == (0, 1)

    assert produce_ok(broker.address, topic, [{"key": b"next", "value": b"v1"}]) == [1]
    recs, wm = read_log(broker.address, topic)
    assert [(r[0], r[1], r[2]) for r in recs] == [(0, b"first", b"v0"), (1, b"next", b"v1")]


@pytest.mark.timeout(120)
def test_switching_cleanup_policy_to_compact_starts_compaction(broker, topic):
    """A delete-policy topic is never compacted, however dirty; IncrementalAlterConfigs
    SET cleanup.policy=compact on the existing topic makes the cleaner take it on."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config(**{"cleanup.policy": "delete", "retention.ms": "-1"}))
    msgs = keyed_messages(N_KEYS, N_VALUES, "switch")
    offsets = produce_ok(broker.address, topic, msgs)
    filler, filler_offsets = seal_keyed_data(broker, topic, "switch")
    total = len(msgs) + len(filler)

    # Flushed (so its sealed segments would be cleanable), then two cleaner rounds: the
    # cleaner never passes over it, and nothing is lost.
    wait_flushed(broker, topic, total)
    cleaner_rounds(broker, create_witness(broker, admin, topic))
    assert cleaner_passes(broker, topic) == [], "the cleaner passed over a delete-policy topic"
    recs, wm = read_log(broker.address, topic)
    assert wm == (0, total) and [r[0] for r in recs] == list(range(total)), \
        f"a delete-policy topic lost records: {len(recs)} of {total}"

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=10)[res].result(timeout=15)
    entry = describe_topic(admin, topic)["cleanup.policy"]
    assert (entry.value, ConfigSource(entry.source)) == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)

    recs, wm = wait_compacted(broker.address, topic, N_KEYS)
    assert wm == (0, total), wm
    check_latest_kept(recs, latest_by_key(msgs, offsets))
    check_all_kept(recs, filler, filler_offsets)
    check_offsets_with_gaps(recs, wm)


@pytest.mark.timeout(120)
def test_compact_delete_policy_also_deletes_by_age(broker, topic):
    """cleanup.policy=compact,delete: segments older than retention.ms (1 min) go whole,
    even holding keys that were never overwritten (compaction alone would keep them), and
    the log start offset moves; the newer keyed data is compacted as usual."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config(**{"cleanup.policy": "compact,delete", "retention.ms": "60000"}))
    assert describe_topic(admin, topic)["cleanup.policy"].value == "compact,delete"
    hour_ago = int(time.time() * 1000) - 3_600_000
    old = filler_messages(FILLER_PER_SEGMENT * 3, "aged", timestamp=hour_ago)
    old_offsets = produce_ok(broker.address, topic, old)
    msgs = keyed_messages(N_KEYS, N_VALUES, "cd", timestamp_base=None)
    offsets = produce_ok(broker.address, topic, msgs)
    filler, filler_offsets = seal_keyed_data(broker, topic, "cd", segments=3)

    last = {}

    def aged_out_and_compacted():
        recs, wm = read_log(broker.address, topic)
        last["recs"], last["wm"] = recs, wm
        counts = keyed_counts(recs)
        return wm[0] > 0 and len(counts) == N_KEYS and set(counts.values()) == {1}

    wait_until(aged_out_and_compacted, COMPACT_WAIT_S, interval=0.5,
               what="old segments deleted by age and the keyed data compacted")
    recs, (low, high) = last["recs"], last["wm"]
    assert high == len(old) + len(msgs) + len(filler)
    assert low <= offsets[0], f"log start {low} is past the first of the new (1 h younger) records at {offsets[0]}"
    assert all(r[0] >= low for r in recs), "a record below the log start offset was returned"
    survivors = [(m, o) for m, o in zip(old, old_offsets) if o >= low]
    assert len(survivors) < len(old), "no aged record went"
    check_all_kept(recs, [m for m, _ in survivors], [o for _, o in survivors])
    check_latest_kept(recs, latest_by_key(msgs, offsets))
    check_all_kept(recs, filler, filler_offsets)


def read_log_when_up(addr: str, topic: str, timeout: float = 20.0):
    """read_log, retried while a (re)started broker is still loading its logs."""
    out = {}

    def readable():
        out["v"] = read_log(addr, topic)
        return True

    wait_until(readable, timeout, interval=0.5, what=f"{topic} readable after a restart")
    return out["v"]


@pytest.mark.timeout(150)
def test_compacted_log_survives_clean_restart_and_kill9(broker, topic):
    """What the cleaner wrote (cleaned segments with holes) is what a restarted broker
    serves, through a clean restart, a kill -9, and one more clean restart (each start sees
    what the previous run left on disk): the same records at the same offsets, the log
    start offset still 0, an offset inside a hole still fetchable (a consumer committed
    there must not be reset), and later cleaner passes change nothing; new records
    continue at the old end."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config())
    msgs = keyed_messages(N_KEYS, N_VALUES, "restart")
    offsets = produce_ok(broker.address, topic, msgs)
    seal_keyed_data(broker, topic, "restart")
    before, wm = wait_compacted(broker.address, topic, N_KEYS)
    check_latest_kept(before, latest_by_key(msgs, offsets))
    assert wm[0] == 0 and before[0][0] > 1
    assert first_offset_from(broker.address, topic, 1) == before[0][0]
    wait_flushed(broker, topic, wm[1])  # the kill -9 below finds it all below the recovery checkpoint
    witness = create_witness(broker, admin, topic)

    def kill9_and_start():
        broker.kill9()
        broker.start()

    for how, bounce in [("clean restart", broker.restart), ("kill -9", kill9_and_start),
                        ("second clean restart", broker.restart)]:
        bounce()
        after, wm_after = read_log_when_up(broker.address, topic)
        assert wm_after == wm, f"after the {how}: watermarks {wm_after}, before {wm}"
        assert after == before, f"the {how} changed the compacted log"
        got = first_offset_from(broker.address, topic, 1)
        assert got == before[0][0], f"after the {how}: fetching offset 1 (a hole) gave {got}"
        cleaner_rounds(broker, witness)  # the cleaner has looked at the restarted clean log

    again, wm_again = read_log(broker.address, topic)
    assert (again, wm_again) == (before, wm), "a cleaner pass after the restarts changed a clean log"
    assert produce_ok(broker.address, topic, [{"key": b"key-000", "value": b"after restart"}]) == [wm[1]]


@pytest.mark.timeout(120)
def test_min_compaction_lag_holds_back_recent_records(broker, topic):
    """min.compaction.lag.ms=6000: records younger than that (by CreateTime) are not
    cleaned, however dirty the log; once they are old enough they are."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config(**{"min.compaction.lag.ms": "6000"}))
    started = time.time()
    msgs = keyed_messages(N_KEYS, N_VALUES, "minlag", timestamp_base=None)  # CreateTime = now
    offsets = produce_ok(broker.address, topic, msgs)
    filler, filler_offsets = seal_keyed_data(broker, topic, "minlag")

    recs, wm = wait_compacted(broker.address, topic, N_KEYS)
    # By the broker's clock: every record's CreateTime is >= `started`, so no segment is old
    # enough before started + 6 s, and no pass (the first one included) may start earlier;
    # together the passes removed exactly the overwritten values.
    passes = cleaner_passes(broker, topic)
    assert passes and passes[0].ended - started >= 6.0 - 0.002, \
        f"first pass {passes[0].ended - started:.3f}s after the records were written (min.compaction.lag.ms=6000)"
    assert sum(p.removed for p in passes) == len(msgs) - N_KEYS, passes
    check_latest_kept(recs, latest_by_key(msgs, offsets))
    check_all_kept(recs, filler, filler_offsets)


def active_segment_base(broker, topic: str) -> int:
    return max(int(p.stem) for p in segment_files(broker, topic))


@pytest.mark.timeout(120)
def test_max_compaction_lag_cleans_a_log_below_the_dirty_ratio(broker, topic):
    """min.cleanable.dirty.ratio=0.9: after a first clean pass, one more overwrite of every
    key leaves the log well below the ratio. With max.compaction.lag.ms=4000 the cleaner
    comes back anyway once the oldest dirty record (the first one of what was the active
    segment at the first pass) is 4 s old; a twin topic without the lag stays dirty."""
    admin = admin_for(broker)
    lagged, control = topic, f"{topic}-control"
    create_topic(admin, lagged, compact_config(**{"min.cleanable.dirty.ratio": "0.9",
                                                  "max.compaction.lag.ms": "4000"}))
    create_topic(admin, control, compact_config(**{"min.cleanable.dirty.ratio": "0.9"}))
    oldest_dirty_ms = {}
    for t in (lagged, control):
        produce_ok(broker.address, t, keyed_messages(N_KEYS, N_VALUES, "maxlag-1", timestamp_base=None))
        seal_keyed_data(broker, t, "maxlag-1")
    for t in (lagged, control):
        recs, _ = wait_compacted(broker.address, t, N_KEYS)  # a never-cleaned log is all dirty: ratio 1
        base = active_segment_base(broker, t)
        oldest_dirty_ms[t] = min(ts for off, _, _, _, (_, ts) in recs if off >= base)

    second = {}
    for t in (lagged, control):
        msgs = keyed_messages(N_KEYS, 1, "maxlag-2", timestamp_base=None)
        second[t] = (msgs, produce_ok(broker.address, t, msgs), *seal_keyed_data(broker, t, "maxlag-2", segments=2))

    recs, wm = wait_compacted(broker.address, lagged, N_KEYS)
    cleaned_at_ms = time.time() * 1000
    assert cleaned_at_ms >= oldest_dirty_ms[lagged] + 4000 - 300, \
        f"second pass {cleaned_at_ms - oldest_dirty_ms[lagged]:.0f} ms after the oldest dirty record (max.compaction.lag.ms=4000)"
    msgs, offsets, filler, filler_offsets = second[lagged]
    check_latest_kept(recs, latest_by_key(msgs, offsets))
    check_all_kept(recs, filler, filler_offsets)

    # The twin's oldest dirty record gets as old as the lag that forced the pass above (the
    # age is wall-clock time by design: this sleep is the stimulus), then two cleaner rounds
    # look at the twin: still not cleaned.
    time.sleep(max(0.0, (oldest_dirty_ms[control] + 4000) / 1000 - time.time()))
    cleaner_rounds(broker, create_witness(broker, admin, topic))
    recs, _ = read_log(broker.address, control)
    counts = keyed_counts(recs)
    assert set(counts.values()) == {2}, \
        f"the topic without max.compaction.lag.ms was cleaned below its dirty ratio: {sorted(Counter(counts.values()).items())}"


class KeptProducer:
    """One idempotent confluent-kafka Producer kept across compaction and restarts, so
    its producer id and sequence numbers carry on: the broker must still accept them."""

    def __init__(self, addr: str):
        from confluent_kafka import Producer
        self.p = Producer({"bootstrap.servers": addr, "enable.idempotence": True,
                           "message.timeout.ms": 30000, "socket.timeout.ms": 10000, **CK_SMALL_BATCHES})

    def send(self, topic: str, msgs: list[dict]) -> list[int]:
        reports = {}

        def cb_for(i):
            return lambda err, msg: reports.__setitem__(i, (err, msg.offset()))

        for i, m in enumerate(msgs):
            self.p.produce(topic, partition=0, on_delivery=cb_for(i),
                           **{k: v for k, v in m.items() if v is not None})
            self.p.poll(0)
        assert self.p.flush(40) == 0, "undelivered messages"
        errors = [(i, e) for i, (e, _) in reports.items() if e is not None]
        assert not errors, f"idempotent producer's delivery errors: {errors[:5]}"
        return [reports[i][1] for i in range(len(msgs))]


@pytest.mark.timeout(150)
def test_idempotent_producer_carries_on_after_its_batches_are_compacted(broker, topic):
    """Compaction rewrites (or empties) an idempotent producer's batches; the broker's
    producer state (id, epoch, last sequence) must survive that, and a restart reading the
    compacted log back: the same producer keeps writing with no sequence error, and no
    record is written twice."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config())
    kept = KeptProducer(broker.address)
    msgs = keyed_messages(N_KEYS, N_VALUES, "idem")
    offsets = kept.send(topic, msgs)
    assert offsets == list(range(len(msgs)))
    filler = filler_messages(FILLER_PER_SEGMENT * 3, "idem")
    filler_offsets = kept.send(topic, filler)
    wait_compacted(broker.address, topic, N_KEYS)

    more = keyed_messages(N_KEYS, 1, "idem-after-clean", timestamp_base=None)
    more_offsets = kept.send(topic, more)
    assert more_offsets == list(range(filler_offsets[-1] + 1, filler_offsets[-1] + 1 + N_KEYS))

    wait_flushed(broker, topic, more_offsets[-1] + 1)
    broker.restart()
    read_log_when_up(broker.address, topic)
    last = keyed_messages(N_KEYS, 1, "idem-after-restart", timestamp_base=None)
    last_offsets = kept.send(topic, last)
    assert last_offsets == list(range(more_offsets[-1] + 1, more_offsets[-1] + 1 + N_KEYS))

    recs, wm = read_log(broker.address, topic)
    assert wm[1] == last_offsets[-1] + 1, f"high watermark {wm[1]}: something was appended twice"
    check_all_kept(recs, filler, filler_offsets)
    check_all_kept(recs, more + last, more_offsets + last_offsets)


def lingering_swaps(log_dir, seconds: float = 1.0) -> list[str]:
    """Swap files present in every look over `seconds`. The restarted broker's own
    cleaner may be swapping a segment in while we look (its `*.swap` names live for
    milliseconds); one that recovery left behind stays."""
    seen = None
    deadline = time.monotonic() + seconds
    while True:
        now = {p.name for p in log_dir.rglob("*") if "swap" in p.name}
        seen = now if seen is None else seen & now
        if not seen or time.monotonic() > deadline:
            return sorted(seen)
        time.sleep(0.05)


@pytest.mark.timeout(180)
def test_kill9_at_random_moments_while_the_cleaner_works(broker, topic):
    """Rounds of overwrites and filler, each followed by kill -9 at a random moment (the
    cleaner may be mid-pass: rewriting segments, swapping them in, writing its checkpoint)
    and a restart. After every restart: each key's latest acknowledged record is there at
    its offset, every record read is one that was acknowledged at that offset (nothing
    half-swapped, CRCs checked), no swap file is left behind, and the high watermark is
    everything acknowledged. At the end the log compacts to one record per key."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config())
    rng = random.Random(20261202)
    acked: dict[int, tuple[bytes, bytes]] = {}  # offset -> (key, value)
    latest: dict[bytes, tuple[int, dict]] = {}
    for rnd in range(6):
        msgs = keyed_messages(N_KEYS, 2, f"crash-r{rnd}", timestamp_base=None)
        filler = filler_messages(FILLER_PER_SEGMENT * 2, f"crash-r{rnd}")
        offsets = produce_ok(broker.address, topic, msgs + filler)
        for m, o in zip(msgs + filler, offsets):
            acked[o] = (m["key"], m["value"])
        latest.update(latest_by_key(msgs + filler, offsets))
        time.sleep(rng.uniform(0.0, 1.5))  # the stimulus: a random moment of the cleaner's work
        broker.kill9()
        broker.start()

        recs, (low, high) = read_log_when_up(broker.address, topic)
        assert high == max(acked) + 1, f"round {rnd}: high watermark {high}, acknowledged up to {max(acked)}"
        for off, key, value, _, _ in recs:
            assert acked.get(off) == (key, value), f"round {rnd}: offset {off} holds {key!r}, never acknowledged there"
        at = {r[0] for r in recs}
        lost = sorted(o for o, _ in latest.values() if o not in at)
        assert not lost, f"round {rnd}: latest records lost at offsets {lost[:5]} (log start {low})"
        leftovers = lingering_swaps(broker.data_dir / f"{topic}-0")
        assert not leftovers, f"round {rnd}: swap files left after recovery: {leftovers}"

    recs, _ = wait_compacted(broker.address, topic, N_KEYS)
    check_latest_kept(recs, {k: v for k, v in latest.items() if k.startswith(b"key-")})


@pytest.mark.timeout(120)
def test_each_partition_is_compacted_on_its_own(broker, topic):
    """Three partitions, keys spread by the partitioner: every partition ends with its own
    keys' latest values, and no key shows up in a partition it was not produced to."""
    admin = admin_for(broker)
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1, config=compact_config())],
                        operation_timeout=10)[topic].result(timeout=15)
    msgs = keyed_messages(30, N_VALUES, "parts")
    reports = produce_all(broker.address, topic, msgs, CK_SMALL_BATCHES)
    assert not [r for r in reports if r[1] is not None], [r for r in reports if r[1] is not None][:5]
    where = {}
    for i, _, p, o in reports:
        where.setdefault(msgs[i]["key"], {"partition": p})["latest"] = max(o, where.get(msgs[i]["key"], {}).get("latest", -1))
        assert where[msgs[i]["key"]]["partition"] == p, "a key went to two partitions"
    assert len({w["partition"] for w in where.values()}) == 3, "30 keys did not reach all 3 partitions"
    for p in range(3):
        filler = filler_messages(FILLER_PER_SEGMENT * 3, f"parts-p{p}")
        for m in filler:
            m["partition"] = p
        assert all(r[1] is None for r in produce_all(broker.address, topic, filler, CK_SMALL_BATCHES))

    latest_value = {}
    for m in msgs:
        latest_value[m["key"]] = m["value"]

    def all_compacted():
        got, errors, _ = consume_all(broker.address, topic, timeout=20)
        assert not errors, [str(e) for e in errors]
        keyed = [(m.key(), m.partition(), m.offset(), m.value()) for m in got if m.key().startswith(b"key-")]
        return len(keyed) == len(where) and len({k for k, _, _, _ in keyed}) == len(where) and keyed

    keyed = wait_until(all_compacted, COMPACT_WAIT_S, interval=0.5, what="every partition compacted")
    for key, p, off, value in keyed:
        assert (p, off) == (where[key]["partition"], where[key]["latest"]), (key, p, off, where[key])
        assert value == latest_value[key], key


@pytest.mark.timeout(120)
def test_tombstone_kept_through_a_restart_until_its_delete_horizon(broker, topic):
    """The delete horizon a pass gives a tombstone (KIP-534: written into the batch) is
    on disk: right after a clean restart the tombstone is still there, the key's older
    values still gone, and the tombstone still goes once delete.retention.ms (5 s) passes."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config(**{"delete.retention.ms": "5000"}))
    msgs = keyed_messages(N_KEYS, 2, "tomb-restart")
    doomed = b"key-000"
    offsets = produce_ok(broker.address, topic, msgs + [{"key": doomed, "value": None}])
    tomb_offset = offsets[-1]
    seal_keyed_data(broker, topic, "tomb-restart")
    recs, wm = wait_compacted(broker.address, topic, N_KEYS)
    assert [(r[0], r[2]) for r in recs if r[1] == doomed] == [(tomb_offset, None)]
    wait_flushed(broker, topic, wm[1])

    broker.restart()
    recs, _ = read_log_when_up(broker.address, topic)
    # The old values never come back; the tombstone is there unless a pass removed it, which
    # the broker's pass times below must show was at its horizon or later.
    assert [(r[0], r[2]) for r in recs if r[1] == doomed] in ([(tomb_offset, None)], []), \
        "the old values came back across the restart"

    extra = {"n": 0}

    def tombstone_gone():
        extra["n"] += 1
        produce_ok(broker.address, topic, filler_messages(FILLER_PER_SEGMENT, f"tomb-restart-{extra['n']}"))
        recs, _ = read_log(broker.address, topic)
        return all(r[1] != doomed for r in recs)

    wait_until(tombstone_gone, 40, interval=1.0, what="the tombstone removed after the restart")
    passes = cleaner_passes(broker, topic)
    first = next(p for p in passes if p.cleaned_up_to > tomb_offset)
    removal = next(p for p in passes if p.ended > first.ended and p.removed > 0)
    assert removal.removed == 1, f"the tombstone's pass removed {removal.removed} records: {passes}"
    assert removal.ended - first.started >= 5.0, \
        f"tombstone removed {removal.ended - first.started:.3f}s after its first pass (delete.retention.ms=5000)"


def test_delete_records_refused_on_a_compact_only_topic(broker, topic):
    """Kafka refuses DeleteRecords on a topic whose cleanup.policy lacks delete
    (Partition.deleteRecordsOnLeader: POLICY_VIOLATION); with compact,delete it works."""
    admin = admin_for(broker)
    from confluent_kafka import KafkaException
    both = f"{topic}-cd"
    create_topic(admin, topic, compact_config())
    create_topic(admin, both, compact_config(**{"cleanup.policy": "compact,delete"}))
    for t in (topic, both):
        produce_ok(broker.address, t, [{"key": b"k%d" % i, "value": b"v"} for i in range(10)])

    (fut,) = admin.delete_records([TopicPartition(topic, 0, 5)], request_timeout=10).values()
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=15)
    assert ei.value.args[0].code() == KafkaError.POLICY_VIOLATION, ei.value
    assert watermarks(broker.address, topic) == (0, 10)

    (fut,) = admin.delete_records([TopicPartition(both, 0, 5)], request_timeout=10).values()
    assert fut.result(timeout=15).low_watermark == 5
    assert watermarks(broker.address, both) == (5, 10)


@pytest.mark.timeout(120)
def test_keyless_records_written_before_the_switch_to_compact_are_cleaned_away(broker, topic):
    """Keyless records written while the topic was delete-policy cannot be compacted by
    key; Kafka's cleaner drops them (LogCleaner.shouldRetainRecord: no key, not kept)
    rather than failing, and compacts the keyed records around them."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config(**{"cleanup.policy": "delete", "retention.ms": "-1"}))
    msgs = keyed_messages(N_KEYS, N_VALUES, "keyless-switch")
    for i in range(0, len(msgs), 7):
        msgs[i] = {"key": None, "value": b"keyless %d" % i, "headers": None, "timestamp": None}
    offsets = produce_ok(broker.address, topic, msgs)
    filler, filler_offsets = seal_keyed_data(broker, topic, "keyless-switch")
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res], request_timeout=10)[res].result(timeout=15)

    keyed = [(m, o) for m, o in zip(msgs, offsets) if m["key"] is not None]
    latest = latest_by_key([m for m, _ in keyed], [o for _, o in keyed])

    def cleaned():
        recs, _ = read_log(broker.address, topic)
        counts = keyed_counts(recs)
        return len(counts) == len(latest) and set(counts.values()) == {1} and recs

    recs = wait_until(cleaned, COMPACT_WAIT_S, interval=0.5, what="the switched topic compacted")
    check_latest_kept(recs, latest)
    check_all_kept(recs, filler, filler_offsets)
    keyless_left = [r[0] for r in recs if r[1] is None]
    assert not keyless_left, f"keyless records kept by the cleaner at offsets {keyless_left}"


def partition_state(cluster, topic: str, via=None) -> tuple[int, list[int]]:
    """(leader, in-sync replicas) of partition 0 as one broker's metadata has it."""
    p = cluster.metadata(via, topic).topics[topic].partitions[0]
    return p.leader, sorted(p.isrs)


@pytest.mark.timeout(240)
def test_a_replica_rebuilt_from_a_compacted_leader_serves_the_same_log(tmp_path, topic):
    """Three brokers, replication factor 3. After the leader has compacted, one follower
    loses its copy of the partition (kill -9, directory removed) and fetches it all again
    from offset 0, across the leader's holes; once it is back in the ISR the two others
    are stopped, it leads, and it serves the same records at the same offsets."""
    from test_cluster import Cluster
    cluster = Cluster(tmp_path, extra_args=["--log-cleaner-backoff-ms", "200", "--replica-lag-time-max-ms", "2000"])
    try:
        cluster.start()
        cluster.create_topic(topic, 1, 3, compact_config())
        wait_until(lambda: len(partition_state(cluster, topic)[1]) == 3, 20, what="3 in-sync replicas")
        msgs = keyed_messages(N_KEYS, N_VALUES, "replica")
        offsets = produce_ok(cluster.bootstrap(), topic, msgs, {"acks": "all"})
        filler = filler_messages(FILLER_PER_SEGMENT * 3, "replica")
        filler_offsets = produce_ok(cluster.bootstrap(), topic, filler, {"acks": "all"})
        before, wm = wait_compacted(cluster.bootstrap(), topic, N_KEYS)
        check_latest_kept(before, latest_by_key(msgs, offsets))

        leader = partition_state(cluster, topic)[0]
        rebuilt = next(n for n in cluster.brokers if n != leader)
        b = cluster.brokers[rebuilt]
        b.kill9()
        import shutil
        shutil.rmtree(b.data_dir / f"{topic}-0")
        b.start()
        wait_until(lambda: partition_state(cluster, topic, via=b)[1] == [1, 2, 3], 40,
                   what=f"broker {rebuilt} back in the ISR after fetching the compacted log")

        for n, other in cluster.brokers.items():
            if n != rebuilt:
                other.stop()
        wait_until(lambda: partition_state(cluster, topic, via=b)[0] == rebuilt, 30,
                   what=f"broker {rebuilt} leading")

        def same_high_watermark():
            return watermarks(b.address, topic)[1] == wm[1]

        wait_until(same_high_watermark, 20, what="the rebuilt leader's high watermark back at the old end")
        after, wm_after = read_log(b.address, topic)
        assert wm_after == wm, f"rebuilt replica's watermarks {wm_after}, the compacted leader's {wm}"
        assert after == before, "the rebuilt replica serves a different log"
        check_all_kept(after, filler, filler_offsets)
    finally:
        cluster.stop()


def markers_on_disk(broker, topic: str) -> int:
    """Control batches (transaction markers) in partition 0's segment files."""
    count = 0
    for seg in segment_files(broker, topic):
        data = seg.read_bytes()
        pos = 0
        while pos + 23 <= len(data):
            length = struct.unpack_from(">i", data, pos + 8)[0]
            if length <= 0 or pos + 12 + length > len(data):
                break
            attributes = struct.unpack_from(">h", data, pos + 21)[0]
            count += bool(attributes & 0x20)
            pos += 12 + length
    return count


@pytest.mark.timeout(120)
def test_a_compacted_topic_with_transactions_keeps_committed_values_and_drops_aborted_ones(broker, topic):
    """Transactions on a compacted topic: the cleaner removes aborted records (so even a
    read_uncommitted reader no longer sees them), keeps each key's latest committed
    value, keeps a marker while data of its transaction is left and removes the aborted
    transaction's marker once delete.retention.ms (1 s) has passed; the producer's later
    transactions still reach read_committed readers."""
    admin = admin_for(broker)
    create_topic(admin, topic, compact_config(**{"delete.retention.ms": "1000"}))
    p = Producer({"bootstrap.servers": broker.address, "transactional.id": f"{topic}-id", **CK_SMALL_BATCHES})
    p.init_transactions(30)

    def txn(pairs, commit: bool) -> None:
        p.begin_transaction()
        for k, v in pairs:
            p.produce(topic, key=k, value=v, partition=0)
        assert p.flush(15) == 0
        (p.commit_transaction if commit else p.abort_transaction)(30)

    def keyed(level: str) -> list[tuple[bytes, bytes]]:
        got, errors, _ = consume_all(broker.address, topic, partitions=[0], timeout=20,
                                     consumer_config={"isolation.level": level})
        assert not errors, errors
        return [(m.key(), m.value()) for m in got if m.key() in (b"k1", b"k2", b"k3", b"k4")]

    txn([(b"k1", b"v1-old"), (b"k2", b"v2")], commit=True)
    txn([(b"k1", b"aborted"), (b"k3", b"aborted")], commit=False)
    txn([(b"k1", b"v1")], commit=True)
    # EndTxn is answered once the commit is decided; the markers follow (as in Kafka).
    wait_until(lambda: markers_on_disk(broker, topic) == 3, 10, what="the three transactions' markers on disk")
    seal_keyed_data(broker, topic, "txn")
    nudges = {"n": 0}

    def cleaned() -> bool:
        # Each look adds a segment of filler: a pass after the first needs dirty data.
        produce_ok(broker.address, topic, filler_messages(FILLER_PER_SEGMENT, f"txn-nudge{nudges['n']}"))
        nudges["n"] += 1
        return (keyed("read_uncommitted") == [(b"k2", b"v2"), (b"k1", b"v1")]
                and markers_on_disk(broker, topic) == 2)

    wait_until(cleaned, 60, interval=0.5,
               what="aborted records and the aborted transaction's marker gone, committed markers kept")
    assert keyed("read_committed") == [(b"k2", b"v2"), (b"k1", b"v1")]
    txn([(b"k4", b"v4")], commit=True)
    assert keyed("read_committed") == [(b"k2", b"v2"), (b"k1", b"v1"), (b"k4", b"v4")]
