#!/usr/bin/env python3
"""import_graph: the module graph of src/ from its `crate::` and `super::` paths, and its cycles.

Reads every non-test line of every file under src/ (a file's `#[cfg(test)] mod tests` at the
bottom is left out: tests may reach anywhere), resolves each `crate::a::b::…` and
`super::…` path to the file that defines the module it names, and prints

  * the folder graph (src/log/, src/cluster/, src/config.rs, … as nodes) and its cycles,
  * the file graph and its cycles (strongly connected components of more than one file).

A parent's `mod.rs` declaring its children (`mod segment;`) is not an import; a child
naming an item its parent re-exports from a sibling counts as importing that sibling
only when the path names it. Exit status 1 when any cycle exists and `--check` is given.

    python3 tools/import_graph.py            # summary
    python3 tools/import_graph.py --check    # the lint `make lint` runs
    python3 tools/import_graph.py --edges    # every edge, for reading
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import defaultdict

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")

PATH = re.compile(r"(?<!::)\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")
USE_GROUP = re.compile(r"\buse\s+(crate|super|self)::([^;]*);", re.S)
CHILD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;", re.M)
INLINE_MOD = re.compile(r"\bmod\s+([a-z_][a-z0-9_]*)\s*\{")


def module_files() -> dict[tuple[str, ...], str]:
    """Module path (('log', 'segment')) -> file path, for every module file under src/."""
    modules: dict[tuple[str, ...], str] = {}
    for root, _, files in os.walk(SRC):
        for name in files:
            if not name.endswith(".rs"):
                continue
            full = os.path.join(root, name)
            rel = os.path.relpath(full, SRC)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel == ["main"] or "tests" in rel:
                continue  # the binary crate: it imports the library, never the reverse
            if rel == ["lib"]:
                rel = []
            modules[tuple(rel)] = full
    return modules


def strip_tests(text: str) -> str:
    """The file without its trailing `#[cfg(test)] mod … { … }` blocks and comments."""
    out = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("#[cfg(test)]"):
            # Skip the attribute and the item after it (a mod block or a single item).
            j = i + 1
            depth = 0
            started = False
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                if "{" in lines[j]:
                    started = True
                if started and depth <= 0:
                    break
                if not started and lines[j].rstrip().endswith(";"):
                    break
                j += 1
            i = j + 1
            continue
        stripped = line.split("//", 1)[0]
        out.append(stripped)
        i += 1
    return "\n".join(out)


def expand_group(prefix: list[str], body: str) -> list[list[str]]:
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]] (paths only, `as` dropped)."""
    body = body.strip()
    results = []
    depth = 0
    part = ""
    parts = []
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    for p in parts:
        p = p.strip()
        if not p:
            continue
        if "{" in p:
            head, rest = p.split("{", 1)
            head_parts = [x for x in head.strip().rstrip(":").split("::") if x]
            results.extend(expand_group(prefix + head_parts, rest.rsplit("}", 1)[0]))
        else:
            p = p.split(" as ")[0].strip()
            results.append(prefix + [x for x in p.split("::") if x])
    return results


def resolve(path: list[str], modules: dict[tuple[str, ...], str]) -> str | None:
    """The file of the longest module prefix of `path` (an item path)."""
    for n in range(len(path), -1, -1):
        key = tuple(path[:n])
        if key in modules:
            return modules[key]
    return None


def inline_modules(text: str) -> list[tuple[int, int, str]]:
    """The `mod name { … }` blocks of a file: (start, end, name), outermost first."""
    spans = []
    for m in INLINE_MOD.finditer(text):
        depth = 0
        for end in range(m.end() - 1, len(text)):
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            if depth == 0:
                break
        spans.append((m.start(), end, m.group(1)))
    return spans


def inline_path(spans: list[tuple[int, int, str]], pos: int) -> list[str]:
    """The inline modules around `pos`: a `super::` or `self::` there starts from them."""
    return [name for start, end, name in spans if start < pos < end]


def file_module(file: str) -> list[str]:
    rel = os.path.relpath(file, SRC)[:-3].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        rel = []
    return rel


def edges() -> dict[str, set[str]]:
    modules = module_files()
    graph: dict[str, set[str]] = defaultdict(set)
    for file in sorted(set(modules.values())):
        with open(file, encoding="utf-8") as f:
            text = strip_tests(f.read())
        me = file_module(file)
        is_mod_file = file.endswith("mod.rs") or file.endswith("lib.rs")
        # Each path with the inline modules it sits in (`mod testing { use super::X; }`).
        paths: list[tuple[list[str], list[str]]] = []
        if is_mod_file:
            # A parent names its children without a prefix: `use segment::Segment;`,
            # `compaction::run(…)`. Those are imports of the child like any other.
            for child in CHILD.findall(text):
                for m in re.finditer(r"\buse\s+" + child + r"::([^;]*);", text, re.S):
                    paths.extend([(["self", child] + p, []) for p in expand_group([], m.group(1))])
                for m in re.finditer(r"(?<!::)(?<!mod )\b" + child + r"((?:::[A-Za-z_][A-Za-z0-9_]*)+)", text):
                    paths.append((["self", child] + [x for x in m.group(1).split("::") if x], []))
        spans = inline_modules(text)
        for m in USE_GROUP.finditer(text):
            root, rest = m.group(1), m.group(2)
            inside = inline_path(spans, m.start())
            paths.extend([([root] + p, inside) for p in expand_group([], rest)])
        text_no_use = USE_GROUP.sub("", text)
        spans = inline_modules(text_no_use)
        for m in PATH.finditer(text_no_use):
            root, rest = m.group(1), m.group(2)
            if rest == "::{":
                continue
            paths.append(([root] + [x for x in rest.split("::") if x], inline_path(spans, m.start())))
        for p, inside in paths:
            if p[0] == "crate":
                absolute = p[1:]
            elif p[0] == "self":
                absolute = me + inside + p[1:]
            else:
                base = me + inside
                i = 0
                while i < len(p) and p[i] == "super":
                    base = base[:-1]
                    i += 1
                absolute = base + p[i:]
            target = resolve(absolute, modules)
            if target and target != file:
                graph[file].add(target)
    return graph


def folder_of(file: str) -> str:
    rel = os.path.relpath(file, SRC)
    parts = rel.split(os.sep)
    return "src/" + (parts[0] + "/" if len(parts) > 1 else parts[0])


def sccs(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one node."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]
    nodes = set(graph) | {t for ts in graph.values() for t in ts}
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def rel(file: str) -> str:
    return "src/" + os.path.relpath(file, SRC)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true", help="exit 1 on any cycle")
    ap.add_argument("--edges", action="store_true", help="print every edge")
    args = ap.parse_args()
    graph = edges()
    folders: dict[str, set[str]] = defaultdict(set)
    for a, ts in graph.items():
        for b in ts:
            fa, fb = folder_of(a), folder_of(b)
            if fa != fb:
                folders[fa].add(fb)
    file_cycles = sccs(graph)
    folder_cycles = sccs(folders)
    if args.edges:
        for a in sorted(graph):
            for b in sorted(graph[a]):
                print(f"{rel(a)} -> {rel(b)}")
    n_edges = sum(len(v) for v in graph.values())
    n_folder_edges = sum(len(v) for v in folders.values())
    print(f"files: {len({*graph, *(t for v in graph.values() for t in v)})}, file edges: {n_edges}, "
          f"folder edges: {n_folder_edges}")
    print(f"folder cycles: {len(folder_cycles)}")
    for c in folder_cycles:
        print("  " + " <-> ".join(c))
        members = set(c)
        for a in sorted(folders):
            if a in members:
                for b in sorted(folders[a] & members):
                    why = sorted(rel(x) + " -> " + rel(y) for x in graph for y in graph[x]
                                 if folder_of(x) == a and folder_of(y) == b)
                    print(f"    {a} -> {b}: {', '.join(why[:4])}{' …' if len(why) > 4 else ''}")
    print(f"file cycles: {len(file_cycles)}")
    for c in file_cycles:
        print("  " + ", ".join(rel(x) for x in c))
    if args.check and (file_cycles or folder_cycles):
        print("import_graph: cycles found", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
