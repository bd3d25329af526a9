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

# Renames and unlinks of files that were durable before the process started (the tree
# at load counts as durable), writes through a shared mapping, and a durable rename.
NAMES_PROBE = textwrap.dedent("""
    import mmap, os, sys
    d = sys.argv[1]
    def fsync_dir(path):
        fd = os.open(path, os.O_RDONLY); os.fsync(fd); os.close(fd)
    # Atomic replace without the directory fsync: the old bytes come back.
    fd = os.open(f"{d}/replace.tmp", os.O_CREAT | os.O_WRONLY); os.write(fd, b"new"); os.fsync(fd); os.close(fd)
    os.rename(f"{d}/replace.tmp", f"{d}/replaced")
    # Unlinked, then its inode (perhaps) reused by a new synced file, no directory fsync.
    os.unlink(f"{d}/unlinked")
    fd = os.open(f"{d}/reuser", os.O_CREAT | os.O_WRONLY); os.write(fd, b"R" * 5); os.fsync(fd); os.close(fd)
    # A directory renamed without an fsync of its parent goes back.
    os.rename(f"{d}/dir-a", f"{d}/dir-b")
    # A durable rename: the file synced, renamed, the directory fsynced.
    fd = os.open(f"{d}/kept.tmp", os.O_CREAT | os.O_WRONLY); os.write(fd, b"K" * 3); os.fsync(fd); os.close(fd)
    os.rename(f"{d}/kept.tmp", f"{d}/sub/kept")
    fsync_dir(f"{d}/sub")
    # Shared mapping: the first page msync'ed, a store on the second page not.
    fd = os.open(f"{d}/mapped", os.O_RDWR)
    m = mmap.mmap(fd, 8192)
    m[0:1] = b"X"; m[4096:4097] = b"Y"
    m.flush(0, 4096)
    # Truncated after its last sync: the truncation is not durable.
    fd2 = os.open(f"{d}/truncated", os.O_RDWR); os.ftruncate(fd2, 1)
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


def test_undone_renames_and_unlinks_bring_back_the_old_names_with_their_durable_bytes(tmp_path):
    data, shadow = tmp_path / "data", tmp_path / "shadow"
    data.mkdir()
    (data / "replaced").write_bytes(b"old")
    (data / "unlinked").write_bytes(b"U" * 4)
    (data / "dir-a").mkdir()
    (data / "dir-a" / "inner").write_bytes(b"I" * 2)
    (data / "sub").mkdir()
    (data / "mapped").write_bytes(b"\0" * 8192)
    (data / "truncated").write_bytes(b"T" * 9)
    probe = tmp_path / "probe.py"
    probe.write_text(NAMES_PROBE)
    run = subprocess.run([sys.executable, str(probe), str(data)],
                         env=powerloss.environment(data, shadow), timeout=60)
    assert run.returncode == -9
    assert (data / "replaced").read_bytes() == b"new" and not (data / "dir-a").exists()
    lost = powerloss.apply(data, shadow)
    names = sorted(str(p.relative_to(data)) for p in data.rglob("*"))
    assert names == ["dir-a", "dir-a/inner", "mapped", "replaced", "sub", "sub/kept", "truncated", "unlinked"], names
    assert (data / "replaced").read_bytes() == b"old", "a rename over a file without a directory fsync is undone"
    assert (data / "unlinked").read_bytes() == b"U" * 4, "an unlink without a directory fsync is undone"
    assert (data / "dir-a" / "inner").read_bytes() == b"I" * 2, "a directory rename without an fsync is undone"
    assert (data / "sub" / "kept").read_bytes() == b"K" * 3, "a synced file renamed, directory fsynced, stays"
    mapped = (data / "mapped").read_bytes()
    assert (mapped[0:1], mapped[4096:4097], len(mapped)) == (b"X", b"\0", 8192), "msync'ed range only"
    assert (data / "truncated").read_bytes() == b"T" * 9, "an unsynced truncate is undone"
    assert sorted(lost["restored"]) == ["dir-a", "dir-a/inner", "unlinked"], lost
    assert sorted(lost["removed"]) == ["dir-b", "dir-b/inner", "reuser"], lost
