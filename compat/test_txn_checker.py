"""The transactional copier checker (tools/txn_check.py), bounded: two copiers copy
numbered input exactly once through one fault of every kind and a few more; the
checker's verdict must pass (lost, duplicated, out-of-order, aborted reads: 0; every
partition stable). `make txn-chaos` runs it with 200 faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tern_harness import tern_bin

CHECKER = Path(__file__).resolve().parent.parent / "tools" / "txn_check.py"


def test_the_copier_processes_every_input_exactly_once_through_faults():
    out = subprocess.run(
        [sys.executable, str(CHECKER), "--messages", "6000", "--faults", "8", "--seconds", "120",
         "--finish-seconds", "180", "--binary", str(tern_bin())],
        capture_output=True, timeout=600)
    lines = [x for x in out.stdout.decode().splitlines() if x.startswith("{")]
    assert lines, f"no verdict (rc={out.returncode}):\n{out.stdout.decode()[-3000:]}\n{out.stderr.decode()[-3000:]}"
    verdict = json.loads(lines[-1])
    print(json.dumps(verdict))
    assert verdict["ok"], verdict
    assert len(verdict["fault_kinds"]) == 5, "one fault of every kind"
    assert out.returncode == 0
