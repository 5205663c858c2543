#!/usr/bin/env python3
"""Include-graph check for src/ (docs/architecture.md, "Which way dependencies point").

Reads every `#include "dir/name.h"` under src/ and fails (exit 1) when
  - modules include each other in a circle (a module is a header with its .c file: x/y.h,
    x/y.c and a private x/y_int.h are one node), or
  - a folder's includes run back up: the folders form a circle (task -> store -> task), or a
    folder includes one on a higher floor of FLOORS.
Prints the graph's numbers and every circle or back arrow it finds. Usage:
  scripts/check_includes.py [--root DIR] [--quiet]
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from pathlib import Path

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)

# The floors of the house, lowest first: a folder may include its own floor and the ones below.
FLOORS: list[set[str]] = [
    {"util"},
    {"tensor", "protocol", "device"},
    {"task", "build", "bridge", "sandbox", "store"},
    {"worker", "eval", "import"},
    {"report", "bench", "workspace", "agent", "synth"},
    {"serve"},
    {"cli"},
]


def floor_of(folder: str) -> int | None:
    for i, f in enumerate(FLOORS):
        if folder in f:
            return i
    return None


def module_of(path: str) -> str:
    """x/y.c and x/y.h are module x/y; x/y_int.h, y's private header, is part of it too."""
    stem = path.rsplit(".", 1)[0]
    return stem.removesuffix("_int")


def read_graph(src: Path) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for f in sorted(src.rglob("*")):
        if f.suffix not in (".c", ".h", ".cu") or not f.is_file():
            continue
        rel = f.relative_to(src).as_posix()
        me = module_of(rel)
        graph[me]  # every module is a node
        for inc in INCLUDE.findall(f.read_text(errors="replace")):
            if "/" not in inc or not (src / inc).is_file():
                continue  # generated or system-like headers (cuda_agent/abi.h, ...)
            other = module_of(inc)
            if other != me:
                graph[me].add(other)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    src = Path(args.root) / "src"
    if not src.is_dir():
        print(f"no src/ under {args.root}", file=sys.stderr)
        return 2
    graph = read_graph(src)
    problems: list[str] = []
    for comp in circles(graph):
        problems.append("include circle: " + " -> ".join(comp))
    folders: dict[str, set[str]] = defaultdict(set)
    why: dict[tuple[str, str], str] = {}
    for mod, deps in graph.items():
        a = mod.split("/")[0]
        folders[a]
        for d in deps:
            b = d.split("/")[0]
            if a != b:
                folders[a].add(b)
                why.setdefault((a, b), f"{mod} includes {d}")
    for comp in circles(folders):
        arrows = [why[(a, b)] for a in comp for b in comp if (a, b) in why]
        shown = "; ".join(arrows[:8]) + ("; ..." if len(arrows) > 8 else "")
        problems.append("folder circle " + " <-> ".join(comp) + ": " + shown)
    for a, deps in sorted(folders.items()):
        fa = floor_of(a)
        if fa is None:
            here = Path(__file__).name
            problems.append(f"folder {a}/ is on no floor (add it to FLOORS in {here})")
            continue
        for b in sorted(deps):
            fb = floor_of(b)
            if fb is not None and fb > fa:
                problems.append(f"back arrow {a}/ -> {b}/ (a higher floor): {why[(a, b)]}")
    if not args.quiet:
        edges = sum(len(d) for d in graph.values())
        print(f"{len(graph)} modules, {edges} includes between them, {len(folders)} folders")
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    if not args.quiet:
        print("no include circles, no back arrows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
