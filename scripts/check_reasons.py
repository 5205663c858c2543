#!/usr/bin/env python3
"""Reason codes on every side agree with the one registry (src/protocol/reasons.c).

Fails (exit 1) when
  - a C source under src/ or a Python source under python/cuda_agent_bridge/ names a reason code
    (a string literal such as "hack.torch_compute") that the registry does not have;
  - docs/result.md's table of reason codes lists a code the registry does not have, misses one it
    has, or gives a reward that disagrees with the code's class (-1 for the candidate's failures,
    null for the task's, the environment's and our own);
  - the registry has a code twice.
Usage: scripts/check_reasons.py [--root DIR]
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PREFIXES = ("abi", "fault", "verify", "hack", "candidate", "worker", "profile", "env", "task",
            "build", "sandbox", "baseline")
CODE = re.compile(r'"((?:' + "|".join(PREFIXES) + r')\.[a-z_]+)"')
ROW = re.compile(r'^\s*\{"([a-z_.]+)",\s*(\w+),\s*(true|false),')
# Literals with a code's shape that are no codes: file names, and prefixes the worker matches.
NOT_CODES = {
    "task.json": "a task's file",
    "candidate.so": "the built library's name",
    "bench.sqlite": "the results database's name",
    "abi.forward": "worker/gpu.c: a prefix of abi.forward_failed",
    "abi.setup": "worker/gpu.c: a prefix of abi.setup_failed",
}
CLASSES = {"C": "candidate", "REASON_CANDIDATE": "candidate", "T": "task", "REASON_TASK": "task",
           "E": "env", "REASON_ENV": "env", "REASON_OK": "ok", "REASON_INTERNAL": "internal"}


def registry(root: Path, problems: list[str]) -> dict[str, str]:
    table: dict[str, str] = {}
    for line in (root / "src/protocol/reasons.c").read_text().splitlines():
        m = ROW.match(line)
        if not m:
            continue
        code, cls = m.group(1), CLASSES.get(m.group(2), "?")
        if code in table:
            problems.append(f"reasons.c: {code} is registered twice")
        table[code] = cls
    if len(table) < 10:
        problems.append("reasons.c: the registry's table was not found")
    return table


def scan(files: list[Path], root: Path, table: dict[str, str], problems: list[str]) -> int:
    seen = 0
    for f in files:
        if f.name == "reasons.c":
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for code in CODE.findall(line):
                seen += 1
                if code not in table and code not in NOT_CODES:
                    rel = f.relative_to(root)
                    problems.append(f"{rel}:{n}: {code} is not in src/protocol/reasons.c")
    return seen


def docs(root: Path, table: dict[str, str], problems: list[str]) -> int:
    text = (root / "docs/result.md").read_text()
    listed: dict[str, str] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        for code in re.findall(r"`([a-z_.]+)`", cells[0]):
            listed[code] = cells[2]
    for code, reward in listed.items():
        cls = table.get(code)
        if cls is None:
            problems.append(f"docs/result.md lists {code}, which is not registered")
            continue
        want = {"candidate": "-1", "task": "null", "env": "null", "internal": "null"}.get(cls)
        if want and reward != want and not (code == "baseline.compile_failed"):
            problems.append(f"docs/result.md: {code} has reward '{reward}', its class ({cls}) "
                            f"gives {want}")
    for code in table:
        if code not in listed:
            problems.append(f"docs/result.md's table misses {code}")
    return len(listed)


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--root", default=str(Path(__file__).resolve().parent.parent))
    args = ap.parse_args()
    root = Path(args.root)
    problems: list[str] = []
    table = registry(root, problems)
    c_files = sorted(p for p in (root / "src").rglob("*") if p.suffix in (".c", ".h", ".cu"))
    py_files = sorted((root / "python/cuda_agent_bridge").rglob("*.py"))
    n_c = scan(c_files, root, table, problems)
    n_py = scan(py_files, root, table, problems)
    n_doc = docs(root, table, problems)
    print(f"{len(table)} registered codes; {n_c} code literals in C, {n_py} in Python; "
          f"{n_doc} codes in docs/result.md")
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("every code is registered and documented")
    return 0


if __name__ == "__main__":
    sys.exit(main())
