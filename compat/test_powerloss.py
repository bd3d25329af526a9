"""The power-loss emulation itself (tools/powerloss_shim.c, tools/powerloss.py): a process
under the shim writes, syncs some of it, and is killed; applying the power loss keeps
exactly what was synced — so the durability tests that use it can fail."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import powerloss  # noqa: E402

PROBE = textwrap.dedent("""
    import os, sys
    d = sys.argv[1]
    fd = os.open(f"{d}/synced", os.O_CREAT | os.O_WRONLY)
    os.write(fd, b"A" * 100); os.fsync(fd); os.write(fd, b"B" * 50); os.close(fd)
    fd = os.open(f"{d}/never-synced", os.O_CREAT | os.O_WRONLY); os.write(fd, b"C" * 10); os.close(fd)
    dfd = os.open(d, os.O_RDONLY); os.fsync(dfd); os.close(dfd)
    os.makedirs(f"{d}/unsynced-dir")
    fd = os.open(f"{d}/unsynced-dir/inner", os.O_CREAT | os.O_WRONLY); os.write(fd, b"E"); os.fsync(fd); os.close(fd)
    fd = os.open(f"{d}/tmp", os.O_CREAT | os.O_WRONLY); os.write(fd, b"D" * 7); os.fsync(fd); os.close(fd)
    os.rename(f"{d}/tmp", f"{d}/renamed")  # no directory fsync after it
    os.kill(os.getpid(), 9)
""")


def test_a_power_loss_keeps_exactly_what_was_synced(tmp_path):
    data, shadow = tmp_path / "data", tmp_path / "shadow"
    data.mkdir()
    (data / "before").write_bytes(b"old")  # there before the process: durable
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    run = subprocess.run([sys.executable, str(probe), str(data)],
                         env=powerloss.environment(data, shadow), timeout=60)
    assert run.returncode == -9
    assert {p.name for p in data.iterdir()} == {"before", "synced", "never-synced", "unsynced-dir", "renamed"}
    lost = powerloss.apply(data, shadow)
    assert sorted(p.name for p in data.iterdir()) == ["before", "never-synced", "synced"]
    assert (data / "synced").read_bytes() == b"A" * 100, "only the synced prefix survives"
    assert (data / "never-synced").read_bytes() == b"", "its entry was synced, its bytes never"
    assert (data / "before").read_bytes() == b"old"
    assert lost["bytes_dropped"] == 50 + 10 + 1 + 7, lost
