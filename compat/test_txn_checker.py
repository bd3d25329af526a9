"""The transactional copier checker (tools/txn_check.py), bounded: two copiers copy
numbered input exactly once through one fault of every kind and a few more; the
checker's verdict must pass (lost, duplicated, out-of-order, aborted reads: 0; every
partition stable). `make txn-chaos` runs it with 200 faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tern_harness import tern_bin

CHECKER = Path(__file__).resolve().parent.parent / "tools" / "txn_check.py"


@pytest.mark.timeout(420)
def test_the_copier_processes_every_input_exactly_once_through_faults():
    # Typically under a minute; the bound is the run's own: 120 s of faults at most, 180 s
    # to finish the copy, the stability wait and the audit.
    out = subprocess.run(
        [sys.executable, str(CHECKER), "--messages", "6000", "--faults", "8", "--seconds", "120",
         "--finish-seconds", "180", "--binary", str(tern_bin())],
        capture_output=True, timeout=400)
    lines = [x for x in out.stdout.decode().splitlines() if x.startswith("{")]
    assert lines, f"no verdict (rc={out.returncode}):\n{out.stdout.decode()[-3000:]}\n{out.stderr.decode()[-3000:]}"
    verdict = json.loads(lines[-1])
    print(json.dumps(verdict))
    assert verdict["ok"], verdict
    assert len(verdict["fault_kinds"]) == 5, "one fault of every kind"
    assert out.returncode == 0


# ---- the verdict's own check: each assertion shown failing (no broker runs) ----------

sys.path.insert(0, str(CHECKER.parent))


def _txn_check():
    import txn_check
    return txn_check


def _clean_run():
    """A passing synthetic run: every input copied once, in order, nothing aborted seen."""
    sent = {p: [b"%012d" % (p + 6 * i) for i in range(5)] for p in range(6)}
    got = {p: list(v) for p, v in sent.items()}
    reader = type("Reader", (), {"aborted_reads": 0, "duplicates": 0})()
    facts = {"copied": True, "unstable_partitions": [], "panics": [], "replica_mismatches": 0,
             "crc_errors": 0, "torn_bytes": 0, "gaps": 0, "records_checked": 60}
    return sent, got, reader, facts


def test_a_clean_synthetic_run_passes_the_verdict(monkeypatch):
    monkeypatch.delenv("TXN_CHECK_INJECT", raising=False)
    verdict = _txn_check().judge(*_clean_run())
    assert verdict["ok"], verdict


FAILS_AS = {"lost": "lost", "duplicate": "duplicated", "disorder": "out_of_order_partitions",
            "aborted_in_final_read": "aborted_in_final_read", "aborted_read": "aborted_reads",
            "reader_duplicate": "reader_duplicates", "not_copied": "copy did not finish",
            "unstable": "unstable_partitions", "panic": "panics", "replica_diff": "replica_mismatches"}


def test_every_injectable_condition_is_shown_failing_here():
    assert set(FAILS_AS) == set(_txn_check().INJECTABLE)


def test_the_verdict_fails_on_each_injected_condition(monkeypatch):
    for condition, failure in FAILS_AS.items():
        monkeypatch.setenv("TXN_CHECK_INJECT", condition)
        verdict = _txn_check().judge(*_clean_run())
        assert not verdict["ok"], condition
        assert failure in verdict["failures"], (condition, verdict["failures"])


def test_an_audit_that_read_nothing_fails_the_verdict(monkeypatch):
    monkeypatch.delenv("TXN_CHECK_INJECT", raising=False)
    sent, got, reader, facts = _clean_run()
    facts["records_checked"] = 0
    assert "replica audit read nothing" in _txn_check().judge(sent, got, reader, facts)["failures"]


def test_the_audit_finds_an_output_replica_that_differs(tmp_path):
    """The audit txn_check runs reads real segment files of `output` and `input`: one
    replica with a changed value (CRC valid) is a mismatch."""
    from test_checker import batch
    tc = _txn_check()
    dirs = {}
    for node in (1, 2, 3):
        data = tmp_path / f"node-{node}"
        for topic in (tc.INPUT, tc.OUTPUT):
            for p in range(tc.PARTITIONS):
                d = data / f"{topic}-{p}"
                d.mkdir(parents=True)
                value = b"changed" if (node == 3 and topic == tc.OUTPUT and p == 2) else b"value"
                (d / ("%020d.log" % 0)).write_bytes(batch(0, [b"first", value]))
        dirs[node] = data
    marks = {tc.OUTPUT: {p: (0, 2) for p in range(tc.PARTITIONS)}}
    result = tc.audit(dirs, marks)
    assert result["records_checked"] > 0
    assert result["replica_mismatches"] == 1, result["mismatch_details"]
    assert result["mismatch_details"][0]["topic"] == tc.OUTPUT
