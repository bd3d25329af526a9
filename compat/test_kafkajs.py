"""kafkajs 2.2.4 against tern, through compat/kafkajs/run.js.

Producing uses kafkajs's public producer. Reading back uses kafkajs's real consumer (a
consumer-group member in a fresh group, fromBeginning, up to the high watermarks); see
kafkajs/FINDINGS.md. kafkajs group members (failover, commit / resume) are in test_groups.py.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "kafkajs"
NODE = shutil.which("node")
pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node not installed"),
    pytest.mark.skipif(not (HERE / "node_modules" / "kafkajs").is_dir(),
                       reason="run scripts/install-test-deps.sh (npm ci in compat/kafkajs)"),
]

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
FIXED_TS = 1_700_000_000_789


def run(mode: str, args: dict, timeout: float = 75) -> dict:
    p = subprocess.run([NODE, str(HERE / "run.js"), mode, json.dumps(args)], cwd=HERE,
                       capture_output=True, timeout=timeout,
                       env={**os.environ, "KAFKAJS_NO_PARTITIONER_WARNING": "1"})
    stderr = p.stderr.decode(errors="replace")
    lines = [x for x in p.stdout.decode().splitlines() if x.strip()]
    assert lines, f"run.js printed nothing (rc={p.returncode}); stderr:\n{stderr[-4000:]}"
    out = json.loads(lines[-1])
    assert p.returncode == 0 and "error" not in out, f"run.js {mode} failed: {out}\nstderr:\n{stderr[-4000:]}"
    return out


def b(s):
    return None if s is None else base64.b64decode(s)


def check_roundtrip(out: dict, count: int):
    sent = out["sent"]
    assert len(sent) == count
    # Every send acknowledged without error; single partition, offsets advance from 0.
    assert all(int(m["errorCode"]) == 0 for m in out["metadata"]), out["metadata"]
    per_send = -(-count // 4)  # run.js sends the messages in 4 produce calls
    assert sorted(int(m["baseOffset"]) for m in out["metadata"]) == list(range(0, count, per_send)), out["metadata"]
    assert list(out["partitions"]) == ["0"], list(out["partitions"])
    part = out["partitions"]["0"]
    assert (part["logStartOffset"], part["highWatermark"]) == ("0", str(count)), part
    recs = part["records"]
    assert len(recs) == count, f"read {len(recs)} of {count}"
    for i, (r, s) in enumerate(zip(recs, sent)):
        assert int(r["offset"]) == i
        assert b(r["key"]) == b(s["key"]), i
        assert b(r["value"]) == b(s["value"]), i
        assert {k: b(v) for k, v in r["headers"].items()} == {k: b(v) for k, v in s["headers"].items()}, i
        ts = int(r["timestamp"])
        if s["timestamp"] is not None:
            assert ts == int(s["timestamp"]), (i, ts)
        else:
            assert out["before"] - 5000 <= ts <= out["after"] + 5000, (i, ts)


def test_codecs_available():
    """gzip is built in; snappy/lz4/zstd come from the plugins in package.json."""
    out = run("codecs", {})
    assert out["available"] == CODECS


@pytest.mark.parametrize("codec", CODECS)
def test_default_producer_each_codec(broker, topic, codec):
    count = 40
    out = run("produce", {"broker": broker.address, "topic": topic, "compression": codec,
                          "idempotent": False, "count": count, "fixedTimestamp": FIXED_TS})
    check_roundtrip(out, count)


@pytest.mark.parametrize("codec", ["none", "gzip", "zstd"])
def test_idempotent_producer(broker, topic, codec):
    count = 40
    out = run("produce", {"broker": broker.address, "topic": topic, "compression": codec,
                          "idempotent": True, "count": count, "fixedTimestamp": FIXED_TS})
    check_roundtrip(out, count)


def test_admin(broker, topic):
    out = run("admin", {"broker": broker.address, "topic": topic})
    assert out["created"] is True
    assert out["createdAgain"] is False, "createTopics on an existing topic must not report it created"
    (md,) = out["metadata"]["topics"]
    assert md["name"] == topic
    assert sorted(p["partitionId"] for p in md["partitions"]) == [0, 1, 2]
    assert all(p["leader"] == 1 for p in md["partitions"]), md
    (res,) = out["configs"]
    assert res["errorCode"] == 0 and res["resourceName"] == topic
    entries = {e["name"]: e["value"] for e in res["entries"]}
    assert entries.get("retention.ms") == "3600000", entries
    (md5,) = out["metadataAfterCreatePartitions"]["topics"]
    assert sorted(p["partitionId"] for p in md5["partitions"]) == [0, 1, 2, 3, 4]
    assert sorted(o["partition"] for o in out["offsets"]) == [0, 1, 2, 3, 4]
    assert all(o["offset"] == "0" and o["low"] == "0" and o["high"] == "0" for o in out["offsets"]), out["offsets"]
    assert topic in out["topicsBeforeDelete"]
    assert topic not in out["topicsAfterDelete"]
