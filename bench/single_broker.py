"""One `tern serve` on loopback for a bench script: a fresh data dir, free ports, no
HTTP listener unless asked, ended (by its PID) and cleaned up on exit.

    with single_broker(["--group-share-auto-offset-reset", "earliest"], "share") as broker:
        ...  # broker is "127.0.0.1:PORT"
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def single_broker(extra_args: list[str], name: str) -> Iterator[str]:
    """Starts a broker with `extra_args`, waits (30 s at most) for its Kafka port."""
    tern = os.environ.get("TERN_BIN", str(ROOT / "target/release/tern"))
    work = Path(tempfile.mkdtemp(prefix=f"tern-{name}-bench-"))
    port = free_port()
    log = open(work / "tern.log", "w")
    proc = subprocess.Popen([tern, "serve", "--data-dir", str(work / "data"), "--listen", f"127.0.0.1:{port}",
                             "--metrics", f"127.0.0.1:{free_port()}", "--http-enable", "false", *extra_args],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
