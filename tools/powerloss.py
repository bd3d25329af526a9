"""Power loss below the broker: build tools/powerloss_shim.c, run a process under it, and
after a SIGKILL rewrite its directory tree to what it had made durable (see the shim's
header for the model). Used by compat/test_crash.py and compat/test_powerloss.py.

    env = powerloss.environment(data_dir, shadow_dir)   # for subprocess.Popen(env=...)
    ... kill -9 the process ...
    report = powerloss.apply(data_dir, shadow_dir)     # dropped files/bytes
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "tools" / "powerloss_shim.c"
LIBRARY = ROOT / "target" / "powerloss" / "libpowerloss.so"


def library() -> Path:
    """The shim, built with gcc when missing or older than its source."""
    if not LIBRARY.exists() or LIBRARY.stat().st_mtime < SOURCE.stat().st_mtime:
        LIBRARY.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-Wno-format-truncation", "-shared", "-fPIC", "-o", str(LIBRARY),
                        str(SOURCE), "-ldl", "-lpthread"], check=True)
    return LIBRARY


def environment(data_dir: Path, shadow_dir: Path, base: dict | None = None) -> dict:
    """The environment that runs a process under the shim, watching `data_dir`."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = str(library())
    env["TERN_POWERLOSS_ROOT"] = str(Path(data_dir).resolve())
    env["TERN_POWERLOSS_SHADOW"] = str(Path(shadow_dir).resolve())
    return env


def _listing(shadow: Path, directory: Path) -> list[tuple[str, int, str]] | None:
    escaped = str(directory).replace("/", "%2F")
    path = shadow / "dirs" / escaped
    if not path.exists():
        return None
    out = []
    for line in path.read_text().splitlines():
        kind, ino, name = line.split("\t", 2)
        out.append((kind, int(ino), name))
    return out


def apply(data_dir: Path, shadow_dir: Path) -> dict:
    """Rewrites `data_dir` (whose process is dead) to its durable state. Returns what the
    power loss took: files removed, files whose bytes changed, bytes dropped."""
    data_dir, shadow = Path(data_dir).resolve(), Path(shadow_dir).resolve()
    report = {"removed": [], "rewritten": [], "bytes_dropped": 0}

    def restore(directory: Path) -> None:
        durable = _listing(shadow, directory) or []
        keep = {name: (kind, ino) for kind, ino, name in durable}
        for entry in sorted(directory.iterdir()):
            if entry.name not in keep:
                report["removed"].append(str(entry.relative_to(data_dir)))
                report["bytes_dropped"] += _size(entry)
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
        for name, (kind, ino) in keep.items():
            path = directory / name
            if kind == "d":
                if path.is_dir():
                    restore(path)
                continue
            if not path.exists():
                continue  # gone by a durable-but-later unlink is not modelled; keep absent
            content = shadow / "ino" / str(ino)
            durable_bytes = content.read_bytes() if content.exists() else b""
            current = path.read_bytes()
            if current != durable_bytes:
                report["rewritten"].append(str(path.relative_to(data_dir)))
                report["bytes_dropped"] += max(0, len(current) - len(durable_bytes))
                path.write_bytes(durable_bytes)

    restore(data_dir)
    shutil.rmtree(shadow, ignore_errors=True)
    return report


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
