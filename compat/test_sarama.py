"""Sarama 1.22 (Debian's golang-github-shopify-sarama-dev, built with Debian's Go) against
tern, with config.Version = V2_2_0_0 as a Debian Go Kafka stack sets it.

compat/sarama/main.go does what Sarama's users and a Sarama-based lag monitor do:
ClusterAdmin.CreateTopic (CreateTopics v2) and ListTopics (Metadata v0 + DescribeConfigs v0),
a SyncProducer (Produce v7, acks=all), a consumer group whose offset manager commits with
OffsetCommit v1 (Consumer.Offsets.Retention left at 0), then ListOffsets v0 and
OffsetFetch v0/v1 per partition to compute the lag. Kafka 4.0 removed those versions
(KIP-896); before tern served them, the broker closed the connection on each and the
program failed at ListTopics.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tern_harness import GROUP_ARGS

HERE = Path(__file__).resolve().parent
GO = shutil.which("go")
GOPATH = Path("/usr/share/gocode")
SARAMA = GOPATH / "src/github.com/Shopify/sarama"
pytestmark = [
    pytest.mark.skipif(GO is None, reason="Debian's Go not installed (apt-get install golang-go)"),
    pytest.mark.skipif(not SARAMA.is_dir(),
                       reason="Sarama not installed (apt-get install golang-github-shopify-sarama-dev)"),
    pytest.mark.broker_args(*GROUP_ARGS),
]


@pytest.fixture(scope="module")
def sarama_program(tmp_path_factory) -> Path:
    """Builds compat/sarama GOPATH-style against Debian's /usr/share/gocode, offline."""
    out = tmp_path_factory.mktemp("sarama")
    binary = out / "sarama-compat"
    env = dict(os.environ, GOPATH=str(GOPATH), GO111MODULE="off", GOFLAGS="", GOPROXY="off",
               GOCACHE=str(out / "gocache"), CGO_ENABLED="1")
    p = subprocess.run([GO, "build", "-o", str(binary), "."], cwd=HERE / "sarama", env=env,
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, f"go build failed:\n{p.stderr}"
    return binary


def run(program: Path, broker, *args: str, timeout: float = 120) -> dict:
    p = subprocess.run([str(program), "-brokers", broker.address, *args],
                       capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"sarama program failed ({p.returncode}):\n{p.stderr[-4000:]}"
    return json.loads(p.stdout)


@pytest.mark.timeout(240)
def test_sarama_admin_produce_group_commit_and_lag(sarama_program, broker, topic):
    n = 90
    report = run(sarama_program, broker, "-topic", topic, "-group", f"{topic}-group", "-n", str(n),
                 "-partitions", "3")

    # ListTopics: Metadata + DescribeConfigs v0; Sarama keeps only non-default configs, so
    # this is exactly the override (is_default right for every other config).
    assert report["listed_partitions"] == 3
    assert report["listed_configs"] == {"retention.ms": "3600000"}

    assert report["produced"] == n
    per_partition = {int(p): c for p, c in report["produced_per_partition"].items()}
    assert sum(per_partition.values()) == n
    assert report["consumed_unique"] == n
    assert report["consumed"] >= n

    rows = report["partitions"]
    assert sorted(r["partition"] for r in rows) == [0, 1, 2]
    for r in rows:
        produced = per_partition.get(r["partition"], 0)
        # A fresh topic: the log end is what was produced there, by v0 as by v1.
        assert r["newest_v0"] == produced == r["newest_v1"], r
        assert r["earliest_v0"] == 0, r
        # Kafka's legacy list: the log end, then each segment's first offset (one segment).
        assert r["newest_list_v0"] == ([produced, 0] if produced else [0]), r
        # The offset manager's OffsetCommit v1 landed, with Sarama's metadata, and reads
        # back the same through v0 and v1.
        assert r["committed_v1"] == produced, r
        assert r["committed_v0"] == produced, r
        if produced:
            assert r["metadata"] == "sarama-compat", r
        assert r["lag"] == 0, r
    assert report["total_lag"] == 0
