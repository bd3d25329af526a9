#!/usr/bin/env python3
"""The HTTP API benchmark (http_bench.py) against a three-broker cluster on a real etcd,
through broker 1 only: unkeyed messages stay on broker 1's partitions, keyed ones spread
over all partitions, so about two thirds are forwarded to their leaders (Produce
acks=all), and GET /message reads partitions led by all three brokers.

    .venv/bin/python bench/http_cluster_bench.py   # after `make deps` (etcd, the harness)

Bounded like http_bench.py (--messages, --timeout); the cluster is stopped at the end.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "compat"))
sys.path.insert(0, str(REPO / "bench"))

import http_bench  # noqa: E402

try:
    from test_cluster import Cluster  # the compat suite's harness (needs `make deps`)
except ImportError as e:
    Cluster = None
    MISSING = e


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=3000)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    if shutil.which("etcd") is None or Cluster is None:
        why = "etcd is not installed" if Cluster is not None else f"the test harness is not installed ({MISSING})"
        print(f"skipped: {why}; `make deps` installs it")
        return 0
    work = Path(tempfile.mkdtemp(prefix="tern-http-cluster-bench."))
    cluster = Cluster(work).start()
    failed = 0
    try:
        port = cluster.http(1).port
        for keyed in (False, True):
            run = argparse.Namespace(messages=args.messages, size=1024, threads=args.threads, partitions=12,
                                     timeout=args.timeout, keyed=keyed)
            failed |= http_bench.run("127.0.0.1", port, run)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
