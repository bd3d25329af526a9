"""Power loss below the broker: build tools/powerloss_shim.c, run a process under it, and
after a SIGKILL rewrite its directory tree to what it had made durable. The model (and
what a real power loss can do that it does not, e.g. torn sectors or unsynced bytes that
happen to survive) is in the shim's header comment. Used by compat/test_crash.py,
compat/test_powerloss.py and tools/tern_check.py's power_loss fault.

    env = powerloss.environment(data_dir, shadow_dir)   # for subprocess.Popen(env=...)
    ... kill -9 the process ...
    report = powerloss.apply(data_dir, shadow_dir)     # what the power loss took

apply() rebuilds the tree from the shadow alone, from the root directory's durable
listing down: each durable entry gets its inode's durable bytes (a file synced and then
renamed without a directory fsync is back under its old name; one unlinked without a
directory fsync is back; one whose bytes were never synced is empty), and nothing else
is kept.
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
        tmp = LIBRARY.with_name(f"{LIBRARY.name}.{os.getpid()}")
        subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-Wno-format-truncation", "-shared", "-fPIC", "-o", str(tmp),
                        str(SOURCE), "-ldl", "-lpthread"], check=True)
        os.replace(tmp, LIBRARY)  # atomic: a concurrent user never loads half a library
    return LIBRARY


def environment(data_dir: Path, shadow_dir: Path, base: dict | None = None) -> dict:
    """The environment that runs a process under the shim, watching `data_dir`."""
    env = dict(os.environ if base is None else base)
    env["LD_PRELOAD"] = str(library())
    env["TERN_POWERLOSS_ROOT"] = str(Path(data_dir).resolve())
    env["TERN_POWERLOSS_SHADOW"] = str(Path(shadow_dir).resolve())
    return env


def _listing(shadow: Path, key: str) -> list[tuple[str, str, str]]:
    """The durable entries (kind, key, name) of the directory `key`; none if never synced."""
    path = shadow / "dirs" / key
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        kind, child, name = line.split("\t", 2)
        out.append((kind, child, name))
    return out


def durable_tree(shadow_dir: Path) -> dict[str, bytes | None]:
    """{relative path: durable bytes, or None for a directory}, as the shadow has it."""
    shadow = Path(shadow_dir)
    tree: dict[str, bytes | None] = {}
    seen_dirs = set()

    def walk(key: str, prefix: str) -> None:
        seen_dirs.add(key)
        for kind, child, name in _listing(shadow, key):
            rel = f"{prefix}{name}"
            if kind == "d":
                if child in seen_dirs:
                    continue  # one directory under two durable names: keep the first
                tree[rel] = None
                walk(child, rel + "/")
            else:
                content = shadow / "ino" / child
                tree[rel] = content.read_bytes() if content.exists() else b""

    walk((shadow / "root").read_text().strip(), "")
    return tree


def _current_tree(data_dir: Path) -> dict[str, bytes | None]:
    tree: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(data_dir):
        rel = os.path.relpath(dirpath, data_dir)
        prefix = "" if rel == "." else rel + "/"
        for d in dirnames:
            tree[prefix + d] = None
        for f in filenames:
            tree[prefix + f] = Path(dirpath, f).read_bytes()
    return tree


def apply(data_dir: Path, shadow_dir: Path) -> dict:
    """Rewrites `data_dir` (whose process is dead) to its durable state and removes the
    shadow. Returns what the power loss did: `removed` (paths not durable), `restored`
    (paths back from an undone rename or unlink), `rewritten` (files whose bytes changed),
    `bytes_dropped` (data bytes lost: of a removed file its content, of a rewritten one
    from the first byte that differs to its last non-zero byte -- zeros a preallocation
    added are not data)."""
    data_dir, shadow = Path(data_dir).resolve(), Path(shadow_dir).resolve()
    durable = durable_tree(shadow)
    current = _current_tree(data_dir)
    report = {"removed": [], "restored": [], "rewritten": [], "bytes_dropped": 0}
    for rel, content in sorted(current.items()):
        if rel not in durable or (durable[rel] is None) != (content is None):
            report["removed"].append(rel)
            report["bytes_dropped"] += len((content or b"").rstrip(b"\0"))
        elif content is not None and content != durable[rel]:
            report["rewritten"].append(rel)
            report["bytes_dropped"] += _lost(content, durable[rel])
    report["restored"] = sorted(rel for rel in durable if rel not in current)
    # Replace the root's children (the root itself, a mount point perhaps, stays).
    for child in data_dir.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    for rel, content in sorted(durable.items()):  # parents sort before their children
        path = data_dir / rel
        if content is None:
            path.mkdir(exist_ok=True)
        else:
            path.write_bytes(content)
    shutil.rmtree(shadow, ignore_errors=True)
    return report


def _lost(current: bytes, durable: bytes) -> int:
    """Data bytes of `current` a power loss takes when the file goes back to `durable`:
    from the first byte that differs to the last non-zero byte of `current`."""
    n = min(len(current), len(durable))
    at, step = 0, 1 << 16
    while at < n and current[at:at + step] == durable[at:at + step]:
        at += step
    while at < n and current[at] == durable[at]:
        at += 1
    return max(0, len(current.rstrip(b"\0")) - at)
