"""The durability checker (tools/tern_check.py, issue 11's "Tests"): a bounded run of about
90 s of faults against three real brokers on a real etcd must lose no acknowledged
message, move none, duplicate none, keep per-partition order and leave identical replicas.

Two smaller tests first show that the checker can fail: its history check finds a planted
loss, a moved message and a duplicate, and its segment parser reads a real tern log the
way the broker wrote it.

DURABILITY_SECONDS and DURABILITY_SEED change the bounded run (`make chaos` is the long
one). Run with -s to see the checker's table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from array import array
from pathlib import Path

import pytest

import ck

TOOLS = Path(__file__).resolve().parent.parent / "tools"
sys.path.insert(0, str(TOOLS))

import tern_check  # noqa: E402

FAULT_SECONDS = float(os.environ.get("DURABILITY_SECONDS", "90"))
SEED = os.environ.get("DURABILITY_SEED")


def history(entries):
    """status/partition/offset arrays from [(status, partition, offset)]."""
    status, part, off = array("b"), array("b"), array("q")
    for s, p, o in entries:
        status.append(s)
        part.append(p)
        off.append(o)
    return status, part, off


def v(i: int) -> bytes:
    return tern_check.value_of(i)


def test_the_history_check_finds_a_loss_a_moved_message_a_duplicate_and_disorder():
    A, F = tern_check.ACKED, tern_check.FAILED
    # Six messages: 0..3 acknowledged on partition 0 at offsets 0..3, 4 failed, 5 acked on p1 at 0.
    status, part, off = history([(A, 0, 0), (A, 0, 1), (A, 0, 2), (A, 0, 3), (F, 0, -1), (A, 1, 0)])
    clean = {0: [(0, v(0)), (1, v(1)), (2, v(2)), (3, v(3)), (4, v(4))], 1: [(0, v(5))]}
    ok = tern_check.check_history(status, part, off, clean)
    assert (ok["lost"], ok["inconsistent"], ok["duplicates"], ok["out_of_order"], ok["unknown"]) == (0, 0, 0, 0, 0)
    assert ok["unacked_present"] == 1, "a failed send that was written anyway is allowed, and counted"
    # Message 2 gone; 5 read at offset 1 instead of 0 (and 0 holding another message); 1 twice;
    # 3 read before 1 on partition 0; one value never sent.
    bad = {0: [(0, v(0)), (1, v(3)), (2, v(1)), (3, v(1)), (4, b"junk")], 1: [(0, v(4)), (1, v(5))]}
    got = tern_check.check_history(status, part, off, bad)
    assert got["lost"] == 1, got
    # 1 (acked at 1, read at 2), 2 (lost, and its offset holds 1), 3 (acked at 3, read at 1)
    # and 5 (acked at p1/0, read at p1/1).
    assert got["inconsistent"] == 4, got
    assert got["duplicates"] == 1, got
    assert got["out_of_order"] == 2, "both reads of 1 come after 3"
    assert got["unknown"] == 1, got


def test_a_copy_under_a_bumped_producer_epoch_is_a_client_resend_not_a_broker_duplicate():
    """Message 1 acknowledged at offset 2, also stored at 1: under producer epochs 0 and 1 it is
    the client's re-send after an epoch bump (the broker can only deduplicate within an epoch);
    under one epoch it is the broker's failure to deduplicate."""
    A = tern_check.ACKED
    status, part, off = history([(A, 0, 0), (A, 0, 2)])
    got = {0: [(0, v(0)), (1, v(1)), (2, v(1))]}
    bumped = tern_check.check_history(status, part, off, got, lambda p, o: 0 if o < 2 else 1)
    assert (bumped["duplicates"], bumped["resent_after_epoch_bump"], bumped["inconsistent"]) == (0, 1, 0), bumped
    same = tern_check.check_history(status, part, off, got, lambda p, o: 0)
    assert (same["duplicates"], same["resent_after_epoch_bump"]) == (1, 0), same


def test_order_is_checked_within_each_producer_epoch():
    """Messages 0..3 written under epoch 0, then 1 and 2 re-sent under epoch 1 after 3:
    not disorder (the idempotent producer orders within an epoch). The same reads under a
    single epoch are."""
    A = tern_check.ACKED
    status, part, off = history([(A, 0, 0), (A, 0, 4), (A, 0, 5), (A, 0, 3)])
    got = {0: [(0, v(0)), (1, v(1)), (2, v(2)), (3, v(3)), (4, v(1)), (5, v(2))]}
    bumped = tern_check.check_history(status, part, off, got, lambda p, o: 0 if o < 4 else 1)
    assert (bumped["out_of_order"], bumped["resent_after_epoch_bump"]) == (0, 2), bumped
    same = tern_check.check_history(status, part, off, got, lambda p, o: 0)
    assert same["out_of_order"] == 2, same


def test_the_segment_parser_reads_a_real_tern_log(broker, topic):
    """One broker, 40 separate batches: the parser finds exactly them, contiguous, at offsets 0..N-1."""
    reports = []
    for i in range(40):
        reports += ck.produce_all(broker.address, topic, [{"value": b"x" * (i + 1), "partition": 0}] * (i % 3 + 1),
                                  {"acks": "all", "linger.ms": 100})
    assert all(err is None for _, err, _, _ in reports)
    total = len(reports)
    broker.stop()
    batches, torn = tern_check.parse_segments(broker.data_dir / f"{topic}-0")
    assert torn == 0
    # librdkafka may split a call's messages over two batches, never merge two calls.
    assert 40 <= len(batches) <= total, batches[:5]
    assert batches[0][0] == 0
    for (base, delta, _, _), (nxt, _, _, _) in zip(batches, batches[1:]):
        assert nxt == base + delta + 1, "batches are contiguous"
    last_base, last_delta, _, _ = batches[-1]
    assert last_base + last_delta + 1 == total
    assert {epoch for _, _, epoch, _ in batches} == {0}, "one leader epoch on a single broker"
    assert len({crc for *_, crc in batches}) == len(batches), "every batch has its own CRC"


@pytest.mark.timeout(int(FAULT_SECONDS) + 420)
def test_a_bounded_chaos_run_loses_nothing_and_leaves_identical_replicas(tmp_path):
    cmd = [sys.executable, str(TOOLS / "tern_check.py"), "--seconds", str(FAULT_SECONDS),
           "--work-dir", str(tmp_path / "check")]
    if SEED:
        cmd += ["--seed", SEED]
    proc = subprocess.run(cmd, capture_output=True, timeout=FAULT_SECONDS + 400)
    out = proc.stdout.decode("utf-8", "replace")
    (tmp_path / "tern-check.stderr").write_bytes(proc.stderr)
    print(out)
    summary_lines = [line for line in out.splitlines() if line.startswith('{"tern_check"')]
    assert summary_lines, f"no summary line (exit {proc.returncode})\n" + proc.stderr.decode()[-4000:]
    s = json.loads(summary_lines[-1])
    where = f"seed {s['seed']}; work dir {s['work_dir']}"
    assert s["faults_total"] >= max(3, int(FAULT_SECONDS / 30)), f"faults were injected ({where}): {s['faults']}"
    assert s["acknowledged"] > 0, f"something was acknowledged ({where}): {s['producer_errors']}"
    assert s["pending_after_flush"] == 0, f"messages still pending after the final flush ({where})"
    assert s["acknowledged"] + s["failed"] == s["sent"], where
    assert not s["unclean_stops"], \
        f"brokers that panicked, exited by themselves or stopped uncleanly: {s['unclean_stops']} ({where})"
    assert s["lost"] == 0, f"acknowledged messages lost ({where}): {s['examples']}"
    assert s["inconsistent"] == 0, f"acknowledged at one offset, found at another ({where}): {s['examples']}"
    assert s["duplicates"] == 0, where
    assert s["out_of_order"] == 0, where
    assert s["unknown"] == 0, where
    assert s["replica_mismatches"] == 0, f"replicas differ below the high watermark ({where}): " \
                                         f"{s['mismatch_details']}"
    assert s["read_complete"], where
    assert not s["faults_missing"], f"claimed fault kinds never injected ({where}): {s['faults_missing']}"
    assert not s["failures"], f"the checker's verdict ({where}): {s['failures']}"
    assert proc.returncode == 0, f"exit {proc.returncode} ({where})"
