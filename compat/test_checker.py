"""The durability checker's verdict (tools/tern_check.py judge(), issue 24): it must fail on
every condition it claims to catch. Each test builds a small synthetic run -- a history,
three replicas' real segment files (v2 batches with their CRC32C), checkpoints and broker
logs -- that passes, then makes the checker see one condition through TERN_CHECK_INJECT
(the same hook a real run honours) or by planting it, and checks that the verdict fails
for that reason. No broker runs here: the whole file takes about a second.
"""

from __future__ import annotations

import json
import struct
import sys
from array import array
from pathlib import Path

import crc32c
import pytest

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))

import tern_check  # noqa: E402

PER_PARTITION = 8  # messages per partition, in batches of 2


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def batch(base: int, values: list[bytes], leader_epoch: int = 0, pid: int = 1000, pepoch: int = 0) -> bytes:
    """A v2 record batch, uncompressed, as Kafka lays it out (CRC32C from the attributes on)."""
    records = b""
    for delta, v in enumerate(values):
        body = b"\0" + varint(0) + varint(delta) + varint(-1) + varint(len(v)) + v + varint(0)
        records += varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, 0, 0, pid, pepoch, base, len(values)) + records
    head = struct.pack(">iB", leader_epoch, 2)
    crc = crc32c.crc32c(after_crc)
    body = head + struct.pack(">I", crc) + after_crc
    return struct.pack(">qi", base, len(body)) + body


def synthetic_run(tmp_path: Path, layout=None) -> dict:
    """A passing run: PER_PARTITION messages per partition, all acknowledged, on three
    identical replicas. `layout(p, values) -> [(base, [values], pid, pepoch)]` changes the
    batches (every replica alike), e.g. to re-send under a bumped epoch."""
    n = tern_check.PARTITIONS * PER_PARTITION
    status, part, off = array("b"), array("b"), array("q")
    for _ in range(n):
        status.append(tern_check.ACKED)
        part.append(-1)
        off.append(-1)
    got, marks = {}, {}
    segments = {}
    for p in range(tern_check.PARTITIONS):
        values = [i for i in range(n) if i % tern_check.PARTITIONS == p]
        batches = layout(p, values) if layout else [(k, values[k:k + 2], 1000, 0) for k in range(0, len(values), 2)]
        data, records = b"", []
        for base, vs, pid, pepoch in batches:
            data += batch(base, [tern_check.value_of(v) for v in vs], pid=pid, pepoch=pepoch)
            for d, v in enumerate(vs):
                records.append((base + d, tern_check.value_of(v)))
                part[v], off[v] = p, base + d  # acknowledged at its last copy
        segments[p] = data + bytes(4096)  # preallocated tail
        got[p] = records
        marks[p] = (0, records[-1][0] + 1)
    data_dirs, logs = {}, []
    for node in (1, 2, 3):
        d = tmp_path / f"node-{node}" / "data"
        for p, data in segments.items():
            (d / f"{tern_check.TOPIC}-{p}").mkdir(parents=True)
            (d / f"{tern_check.TOPIC}-{p}" / f"{0:020d}.log").write_bytes(data)
        (d / "replication-offset-checkpoint").write_text(json.dumps(
            {f"{tern_check.TOPIC}-{p}": m[1] for p, m in marks.items()}))
        data_dirs[node] = d
        log = tmp_path / f"node-{node}" / "logs" / "tern-1.log"
        log.parent.mkdir(parents=True)
        log.write_text("INFO tern: listening\nINFO tern: shut down cleanly\n")
        logs.append(log)
    return {
        "seed": 7, "fault_seconds": 10.0, "rate": 100, "claimed": ["kill_leader", "power_loss"],
        "injected": {"kill_leader": 1, "power_loss": 2}, "skipped": {}, "fault_windows": [(2.0, 5.0), (8.0, 9.0)],
        "unrecovered": 0, "isr_not_full": 0, "broker_exits": [], "unclean_stops": [], "log_paths": logs,
        "status": status, "part": part, "off": off, "fatal": [], "producer_errors": {},
        "producer_exception": None, "epoch_bumps": [], "got": got, "marks": marks, "read_complete": True,
        "final_in_sync": True,
        "final_partitions": {p: {"leader": 1, "isr": [1, 2, 3]} for p in range(tern_check.PARTITIONS)},
        "data_dirs": data_dirs, "work_dir": str(tmp_path),
    }


def test_a_clean_synthetic_run_passes_and_its_records_are_audited(tmp_path):
    s = tern_check.judge(synthetic_run(tmp_path))
    assert s["failures"] == [], s["failures"]
    n = tern_check.PARTITIONS * PER_PARTITION
    assert (s["acknowledged"], s["read"], s["records_checked"]) == (n, n, 3 * n), s


# condition -> what the failure says
CONDITIONS = {
    "panic": "panicked",
    "broker_exit": "exited by themselves",
    "unclean_stop": "did not stop cleanly",
    "fatal": "fatal producer errors",
    "pending": "pending after the final flush",
    "isr_short": "final ISR below the replication factor",
    "unrecovered": "not recovered",
    "missing_kind": "never injected",
    "lost": "lost",
    "duplicate": "duplicates",
    "disorder": "out of order",
    "unknown_value": "unknown",
    "unexplained_bump": "epoch bumps no fault explains",
    "acks_without_offset": "acknowledgements without an offset",
    "read_incomplete": "did not reach every high watermark",
    "crc": "CRC32C does not match",
    "replica_diff": "broker 1's replica disagrees with the history",
    "torn": "torn bytes",
    "gap": "gaps between batches",
}


@pytest.mark.parametrize("condition", sorted(CONDITIONS))
def test_the_verdict_fails_on_each_injected_condition(tmp_path, monkeypatch, condition):
    monkeypatch.setenv("TERN_CHECK_INJECT", condition)
    s = tern_check.judge(synthetic_run(tmp_path))
    assert s["result"] == "FAIL", f"{condition} was not seen: {s}"
    assert any(CONDITIONS[condition] in why for why in s["failures"]), (condition, s["failures"])


def test_every_injectable_condition_is_shown_failing_here():
    assert set(tern_check.INJECTABLE) == set(CONDITIONS) | {"no_hw_checkpoint", "resent_flood"}


def test_a_missing_high_watermark_checkpoint_does_not_make_the_audit_a_no_op(tmp_path, monkeypatch):
    f = synthetic_run(tmp_path)
    f["marks"] = None  # no read-back either (as in --recheck): the shortest log's end
    monkeypatch.setenv("TERN_CHECK_INJECT", "no_hw_checkpoint")
    s = tern_check.judge(f)
    assert s["failures"] == [] and s["missing_hw_checkpoints"] == 3 * tern_check.PARTITIONS, s
    assert s["records_checked"] == 3 * tern_check.PARTITIONS * PER_PARTITION
    monkeypatch.setenv("TERN_CHECK_INJECT", "no_hw_checkpoint,replica_diff")
    f = synthetic_run(tmp_path / "again")
    f["marks"] = None
    s = tern_check.judge(f)
    assert any("disagrees with the history" in why for why in s["failures"]), s["failures"]


def resend_layout(p, values):
    """The first two messages written under epoch 0, the client bumps its epoch (no answer
    for them) and re-sends both before the rest under epoch 1."""
    first = [(0, values[:2], 1000, 0)]
    rest = [(2 + k, values[k:k + 2], 1000, 1) for k in range(0, len(values), 2)]
    return first + rest


def test_copies_re_sent_after_an_epoch_bump_are_counted_explained_and_bounded(tmp_path, monkeypatch):
    f = synthetic_run(tmp_path, resend_layout)
    f["epoch_bumps"] = [{"t": 4.0, "reason": "message timeout of in-flight requests", "to": "PID{Id:1000,Epoch:1}"}]
    s = tern_check.judge(f)
    assert s["failures"] == [], s["failures"]
    assert (s["resent_after_epoch_bump"], s["duplicates"], s["epoch_bumps_in_data"]) == \
        (2 * tern_check.PARTITIONS, 0, 1), s
    assert s["epoch_bump_reasons"] == ["message timeout of in-flight requests"]
    # The same bump at a time no fault covers is unexplained.
    f = synthetic_run(tmp_path / "late", resend_layout)
    f["epoch_bumps"] = [{"t": 100.0, "reason": "x", "to": "y"}]
    assert any("no fault explains" in why for why in tern_check.judge(f)["failures"])
    # More re-sent copies than the bumps can explain (no rate: a bound of 0).
    monkeypatch.setenv("TERN_CHECK_INJECT", "resent_flood")
    s = tern_check.judge(synthetic_run(tmp_path / "flood", resend_layout))
    assert any("more than 1 bumps explain" in why for why in s["failures"]), s["failures"]


def test_a_first_copy_that_overtakes_under_a_later_epoch_is_out_of_order(tmp_path):
    """Across incarnations the first copies keep send order: message 3 written first under
    epoch 1 after message 5 under epoch 0 is disorder, although each epoch alone is sorted."""
    A = tern_check.ACKED
    status, part, off = array("b", [A] * 6), array("b", [0] * 6), array("q", range(6))
    got = {0: [(0, b"%012d" % 0), (1, b"%012d" % 1), (2, b"%012d" % 2), (3, b"%012d" % 5),
               (4, b"%012d" % 3), (5, b"%012d" % 4)]}
    off[5], off[3], off[4] = 3, 4, 5
    c = tern_check.check_history(status, part, off, got, lambda p, o: (1000, 0) if o < 4 else (1000, 1))
    assert c["out_of_order"] == 2 and c["lost"] == 0 and c["inconsistent"] == 0, c


def write_history(work: Path, f: dict) -> None:
    with open(work / "history.jsonl", "w") as h:
        h.write(json.dumps({"ev": "start", "seed": f["seed"], "faults": f["claimed"], "rate": f["rate"], "t": 0}) + "\n")
        for i in range(len(f["status"])):
            h.write(json.dumps({"ev": "send", "v": i, "t": 0.1}) + "\n")
        for kind, count in f["injected"].items():
            for _ in range(count):
                h.write(json.dumps({"ev": "fault", "kind": kind, "secs": 1.0, "t": 3.0}) + "\n")
        for i in range(len(f["status"])):
            h.write(json.dumps({"ev": "ack", "v": i, "p": f["part"][i], "o": f["off"][i], "t": 0.2}) + "\n")


def test_recheck_fails_on_replicas_that_differ(tmp_path):
    f = synthetic_run(tmp_path)
    write_history(tmp_path, f)
    assert tern_check.main(["--recheck", str(tmp_path)]) == 0
    # A value byte of broker 2's partition 3, CRC fixed: only reading records sees it.
    seg = tmp_path / "node-2" / "data" / f"{tern_check.TOPIC}-3" / f"{0:020d}.log"
    buf = bytearray(seg.read_bytes())
    end = 12 + struct.unpack_from(">i", buf, 8)[0]
    buf[end - 2] ^= 0x01
    struct.pack_into(">I", buf, 17, crc32c.crc32c(bytes(buf[21:end])))
    seg.write_bytes(bytes(buf))
    assert tern_check.main(["--recheck", str(tmp_path)]) == 1
