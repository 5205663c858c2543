#!/usr/bin/env python3
"""The public KernelBench corpus of sources.json: check it, fetch its files, lay them out for
`cuda-agent bench`, export a KernelBench checkout, and sum up the runs (README.md here).

    corpus.py validate                      the manifest's schema and the corpus' size
    corpus.py repos                         the repositories it needs, with clone commands
    corpus.py fetch --out CANDS [--mirrors DIR ...] [--download] [--kernelbench KB]
    corpus.py kernelbench --out DIR [--commit C] [--mirrors DIR ...]
    corpus.py summarize CANDS OUT           the whole corpus' agreement table from the sets' runs

Files are taken, in this order, from a local git copy of each repository (`git show
COMMIT:PATH`): under a --mirrors DIR as DIR/<owner>+<name>/repo (the layout of this project's
fetch tool), DIR/<owner>+<name> or DIR/<owner>/<name> (a `git clone`); or, with --download,
from https://raw.githubusercontent.com/<owner>/<name>/<commit>/<path>. Nothing is copied into
this repository: the candidates stay their authors' code.

Standard library only (the GPU host may have nothing else), and `git` for local copies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MANIFEST = HERE / "sources.json"
# The KernelBench whose problems the corpus names (upstream main, 2026-03-05): its
# KernelBench/level<L>/<stem>.py files are the references, and its src/kernelbench/eval.py the
# harness that `cuda-agent bench --kernelbench-harness` runs.
KERNELBENCH_REPO = "ScalingIntelligence/KernelBench"
KERNELBENCH_COMMIT = "423217d9fda91e0c2d67e4a43bf62f96f6d104f1"

# A documented hack we accept is "held" when it gains nothing: our speed-up against eager at most
# this (KernelBench's own non-default-stream test asks for below 1.5x).
HACK_HELD_SPEEDUP = 1.5
MIN_ENTRIES = 80
MIN_SOURCES = 5
LEVELS = (1, 2, 3)
VERDICTS = ("correct", "incorrect", "hack", "ungraded")
REQUIRED = ("file", "problem", "repo", "path", "commit", "verdict", "source_says")
OPTIONAL = ("speedup", "note")

_PROBLEM = re.compile(r"level([1-9][0-9]*)/([0-9]+)_[^/\s]+")
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_TAG = re.compile(r"[A-Za-z0-9_]+")


class CorpusError(Exception):
    pass


# ---- the manifest ---------------------------------------------------------------------------


def load_manifest(path: Path = MANIFEST) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    if not isinstance(data, list):
        raise CorpusError(f"{path}: a JSON list of entries expected")
    return data


def problem_parts(problem: str) -> tuple[int, int, str]:
    """(level, problem number, stem) of "level<L>/<P>_<Name>"."""
    m = _PROBLEM.fullmatch(problem)
    if not m:
        raise CorpusError(f"problem {problem!r} is not level<L>/<P>_<Name>")
    return int(m[1]), int(m[2]), problem.split("/", 1)[1]


def validate(entries: list[Any]) -> list[str]:
    """Every way the entries break the schema (README.md, "The manifest"); [] when none."""
    errors: list[str] = []
    files: set[str] = set()
    sources: set[tuple[str, str, str]] = set()
    for i, e in enumerate(entries):
        where = f"entry {i}"
        if not isinstance(e, dict):
            errors.append(f"{where}: not an object")
            continue
        where = f"entry {i} ({e.get('file', '?')})"
        for k in REQUIRED:
            if not isinstance(e.get(k), str) or not e[k].strip():
                errors.append(f"{where}: {k} missing or not a non-empty string")
        for k in e:
            if k not in REQUIRED and k not in OPTIONAL:
                errors.append(f"{where}: unknown field {k!r}")
        if any(not isinstance(e.get(k), str) for k in REQUIRED):
            continue
        try:
            level, _, stem = problem_parts(e["problem"])
        except CorpusError as err:
            errors.append(f"{where}: {err}")
            continue
        prefix = f"level{level}_{stem}__"
        tag = e["file"][len(prefix):-3] if e["file"].endswith(".py") else ""
        if not e["file"].startswith(prefix) or not _TAG.fullmatch(tag):
            errors.append(f"{where}: file must be {prefix}<tag>.py (tag: letters, digits, _)")
        if e["file"] in files:
            errors.append(f"{where}: file {e['file']} appears twice")
        files.add(e["file"])
        if not _REPO.fullmatch(e["repo"]):
            errors.append(f"{where}: repo {e['repo']!r} is not owner/name")
        if not _COMMIT.fullmatch(e["commit"]):
            errors.append(f"{where}: commit {e['commit']!r} is not 40 lowercase hex digits")
        if e["path"].startswith("/") or ".." in e["path"].split("/"):
            errors.append(f"{where}: path {e['path']!r} must be relative, without '..'")
        src = (e["repo"], e["commit"], e["path"])
        if src in sources:
            errors.append(f"{where}: {e['repo']}@{e['commit'][:8]}:{e['path']} appears twice")
        sources.add(src)
        if e["verdict"] not in VERDICTS:
            errors.append(f"{where}: verdict {e['verdict']!r} is not one of {VERDICTS}")
        elif e["verdict"] == "hack" and "hack" not in e["source_says"].lower():
            errors.append(f"{where}: verdict hack, but source_says does not say what the hack is")
        if "speedup" in e and (not isinstance(e["speedup"], (int, float))
                               or isinstance(e["speedup"], bool) or not e["speedup"] > 0):
            errors.append(f"{where}: speedup must be a positive number")
        if "note" in e and (not isinstance(e["note"], str) or not e["note"].strip()):
            errors.append(f"{where}: note must be a non-empty string")
    return errors


def stats(entries: list[dict[str, Any]]) -> dict[str, Any]:
    levels = Counter(problem_parts(e["problem"])[0] for e in entries)
    return {"entries": len(entries),
            "sources": dict(sorted(Counter(e["repo"] for e in entries).items())),
            "levels": {str(k): v for k, v in sorted(levels.items())},
            "verdicts": dict(sorted(Counter(e["verdict"] for e in entries).items())),
            "problems": len({e["problem"] for e in entries})}


def check_corpus(entries: list[Any]) -> list[str]:
    """validate() and the corpus' size: MIN_ENTRIES entries from MIN_SOURCES repositories,
    every level of LEVELS present."""
    errors = validate(entries)
    if errors:
        return errors
    s = stats(entries)
    if s["entries"] < MIN_ENTRIES:
        errors.append(f"{s['entries']} entries, fewer than {MIN_ENTRIES}")
    if len(s["sources"]) < MIN_SOURCES:
        errors.append(f"{len(s['sources'])} source repositories, fewer than {MIN_SOURCES}")
    for level in LEVELS:
        if str(level) not in s["levels"]:
            errors.append(f"no entry of level {level}")
    return errors


def assign_sets(entries: list[dict[str, Any]]) -> list[int]:
    """The set of each entry: the first set without a candidate for its problem, in manifest
    order (bench takes one candidate per task, so each set is one bench run)."""
    seen: Counter[str] = Counter()
    out = []
    for e in entries:
        out.append(seen[e["problem"]])
        seen[e["problem"]] += 1
    return out


# ---- getting the files ----------------------------------------------------------------------


def git_dir(repo: str, mirrors: list[Path]) -> Path | None:
    owner, name = repo.split("/")
    for root in mirrors:
        for d in (root / f"{owner}+{name}" / "repo", root / f"{owner}+{name}", root / owner / name):
            if d.is_dir() and ((d / "HEAD").is_file() or (d / ".git").exists()):
                return d
    return None


def git_show(d: Path, commit: str, path: str) -> bytes:
    r = subprocess.run(["git", "-C", str(d), "show", f"{commit}:{path}"], capture_output=True)
    if r.returncode:
        raise CorpusError(f"git show {commit[:12]}:{path} in {d}: "
                          f"{r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def raw_url(repo: str, commit: str, path: str) -> str:
    return f"https://raw.githubusercontent.com/{repo}/{commit}/{path}"


def download(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as f:  # noqa: S310 (a fixed https URL)
        data: bytes = f.read()
    return data


def get_file(e: dict[str, Any], mirrors: list[Path], allow_download: bool) -> bytes:
    d = git_dir(e["repo"], mirrors)
    if d is not None:
        return git_show(d, e["commit"], e["path"])
    if allow_download:
        return download(raw_url(e["repo"], e["commit"], e["path"]))
    raise CorpusError(f"no local copy of {e['repo']} under {', '.join(map(str, mirrors)) or '-'} "
                      f"(give --mirrors DIR holding DIR/{e['repo']}, or --download)")


def write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def fetch(entries: list[dict[str, Any]], out: Path, mirrors: list[Path], allow_download: bool,
          kernelbench: Path | None) -> dict[str, Any]:
    """Writes out/files/<file>, out/set_<k>/level<L>/<stem>.py and out/index.json."""
    errors = validate(entries)
    if errors:
        raise CorpusError("the manifest is broken:\n  " + "\n  ".join(errors))
    if kernelbench is not None:
        missing = [e["problem"] for e in entries
                   if not (kernelbench / "KernelBench" / f"{e['problem']}.py").is_file()]
        if missing:
            raise CorpusError(f"{kernelbench} has no KernelBench/<problem>.py for: "
                              + ", ".join(sorted(set(missing))))
    sets = assign_sets(entries)
    if out.exists():
        for old in out.glob("set_*"):
            shutil.rmtree(old)
    index = []
    for e, k in zip(entries, sets, strict=True):
        data = get_file(e, mirrors, allow_download)
        text = data.decode("utf-8", errors="replace")
        if "ModelNew" not in text:
            raise CorpusError(f"{e['file']}: {e['repo']}@{e['commit'][:12]}:{e['path']} "
                              "defines no ModelNew")
        level, _, stem = problem_parts(e["problem"])
        write_atomic(out / "files" / e["file"], data)
        write_atomic(out / f"set_{k}" / f"level{level}" / f"{stem}.py", data)
        index.append({**e, "set": k, "key": e["problem"],
                      "sha256": hashlib.sha256(data).hexdigest(),
                      "load_inline": "load_inline" in text})
        print(f"{e['file']} -> set_{k}", file=sys.stderr)
    doc = {"manifest_sha256": hashlib.sha256(MANIFEST.read_bytes()).hexdigest()
           if MANIFEST.exists() else None,
           "kernelbench": {"repo": KERNELBENCH_REPO, "commit": KERNELBENCH_COMMIT},
           "sets": max(sets) + 1 if sets else 0, "stats": stats(entries), "entries": index}
    write_atomic(out / "index.json", (json.dumps(doc, indent=1) + "\n").encode())
    return doc


def export_kernelbench(out: Path, commit: str, mirrors: list[Path]) -> None:
    """A KernelBench checkout at commit (its files, no .git) in out, from a local git copy."""
    d = git_dir(KERNELBENCH_REPO, mirrors)
    if d is None:
        raise CorpusError(f"no local copy of {KERNELBENCH_REPO} under the mirrors; "
                          f"git clone https://github.com/{KERNELBENCH_REPO} && git -C KernelBench "
                          f"checkout {commit}")
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tar = Path(tmp) / "kb.tar"
        r = subprocess.run(["git", "-C", str(d), "archive", "--format=tar", "-o", str(tar),
                            commit], capture_output=True)
        if r.returncode:
            raise CorpusError(f"git archive {commit}: {r.stderr.decode(errors='replace')}")
        with tarfile.open(tar) as t:
            t.extractall(out, filter="data")
    (out / "KERNELBENCH_COMMIT").write_text(commit + "\n")


# ---- the sets' runs, summed up ----------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _task_key(result: dict[str, Any]) -> str:
    tid = str((result.get("task") or {}).get("id") or "")
    m = re.search(r"(level[0-9]+/[^/]+)$", tid)
    return m[1] if m else tid


def _median_ms(result: dict[str, Any]) -> float | None:
    v = ((result.get("timing") or {}).get("candidate") or {}).get("median_ms")
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def _speedup_eager(result: dict[str, Any]) -> float | None:
    t = result.get("timing") or {}
    cand = (t.get("candidate") or {}).get("median_ms")
    eager = (t.get("eager") or {}).get("median_ms")
    if isinstance(cand, (int, float)) and isinstance(eager, (int, float)) and cand > 0 \
            and eager > 0:
        return float(eager) / float(cand)
    v = t.get("speedup_eager")
    return float(v) if isinstance(v, (int, float)) and v > 0 else None


def summarize(cands: Path, runs: Path) -> dict[str, Any]:
    """The corpus' agreement table: each entry's verdicts (ours from runs/set_<k>/results.jsonl,
    KernelBench's from the same results' kernelbench_eval), the confusion counts, the documented
    hacks, and the timing ratio (our median ms over KernelBench's runtime) per level."""
    index = json.loads((cands / "index.json").read_text())
    results: dict[tuple[int, str], dict[str, Any]] = {}
    for k in range(index["sets"]):
        path = runs / f"set_{k}" / "results.jsonl"
        if path.is_file():
            for r in _read_jsonl(path):
                results[(k, _task_key(r))] = r
    rows = []
    for e in index["entries"]:
        r = results.get((e["set"], e["key"]))
        kb = (r or {}).get("kernelbench_eval") or {}
        ours = None if r is None else bool(r.get("correct")) and r.get("reward") != -1
        theirs = kb.get("correctness") if isinstance(kb.get("correctness"), bool) else None
        ours_ms = _median_ms(r) if r and ours else None
        kb_ms = kb.get("runtime") if theirs and isinstance(kb.get("runtime"), (int, float)) \
            and kb["runtime"] > 0 else None
        rows.append({"file": e["file"], "set": e["set"], "key": e["key"], "repo": e["repo"],
                     "verdict": e["verdict"], "ours": ours,
                     "speedup": _speedup_eager(r) if r and ours else None,
                     "our_reason": ((r or {}).get("reason") or {}).get("code"),
                     "kernelbench": theirs, "kb_reason": kb.get("reason"),
                     "ratio": ours_ms / kb_ms if ours_ms and kb_ms else None})
    return {"rows": rows, **agreement(rows)}


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over rows {"verdict", "ours", "kernelbench", "ratio", "key"} (None: no result)."""
    both = [r for r in rows if r["ours"] is not None and r["kernelbench"] is not None]
    confusion = {"both_correct": sum(r["ours"] and r["kernelbench"] for r in both),
                 "both_incorrect": sum(not r["ours"] and not r["kernelbench"] for r in both),
                 "we_refuse_kb_accepts": sum(not r["ours"] and r["kernelbench"] for r in both),
                 "kb_refuses_we_accept": sum(r["ours"] and not r["kernelbench"] for r in both),
                 "no_verdict": len(rows) - len(both)}
    honest = [r for r in both if r["kernelbench"] and r["verdict"] != "hack"]
    hacks = [r for r in rows if r["verdict"] == "hack" and r["ours"] is not None]
    held = [r for r in hacks if r["ours"] and (r.get("speedup") or 0) <= HACK_HELD_SPEEDUP]
    timing = []
    by_level: dict[str, list[float]] = {}
    for r in rows:
        if r.get("ratio"):
            by_level.setdefault(r["key"].split("/")[0], []).append(r["ratio"])
    for level in sorted(by_level):
        timing.append({"level": level, "n": len(by_level[level]),
                       "geomean_ratio": geomean(by_level[level])})
    everything = [x for xs in by_level.values() for x in xs]
    timing.append({"level": "all", "n": len(everything), "geomean_ratio": geomean(everything)})
    agree = sum(bool(r["ours"]) for r in honest)
    return {"confusion": confusion,
            "kb_correct_not_hack": {"n": len(honest), "we_agree": agree,
                                    "rate": agree / len(honest) if honest else None},
            "hacks": {"n": len(hacks), "we_reject": sum(not r["ours"] for r in hacks),
                      "we_hold": len(held), "we_pass": sum(bool(r["ours"]) for r in hacks)
                      - len(held),
                      "kb_rejects": sum(r["kernelbench"] is False for r in hacks)},
            "timing": timing}


def print_summary(s: dict[str, Any]) -> None:
    c = s["confusion"]
    print("agreement over the corpus (ours vs KernelBench's harness):")
    print(f"  both correct {c['both_correct']}, both incorrect {c['both_incorrect']}, "
          f"we refuse / KernelBench accepts {c['we_refuse_kb_accepts']}, "
          f"KernelBench refuses / we accept {c['kb_refuses_we_accept']}, "
          f"no verdict {c['no_verdict']}")
    h = s["kb_correct_not_hack"]
    rate = f"{100 * h['rate']:.1f}%" if h["rate"] is not None else "-"
    print(f"  KernelBench-correct, not a documented hack: {h['we_agree']}/{h['n']} agree ({rate})")
    k = s["hacks"]
    print(f"  documented hacks: we reject {k['we_reject']}/{k['n']}, hold {k['we_hold']} "
          f"(accepted, speed-up at most {HACK_HELD_SPEEDUP}x), let {k['we_pass']} pass; "
          f"KernelBench rejects {k['kb_rejects']}/{k['n']}")
    print("  timing, our median ms / KernelBench's runtime (geometric mean):")
    for t in s["timing"]:
        g = f"{t['geomean_ratio']:.3f}x" if t["geomean_ratio"] else "-"
        print(f"    {t['level']:<7} {g} (n {t['n']})")
    print("  disagreements:")
    for r in s["rows"]:
        if r["ours"] is not None and r["kernelbench"] is not None and r["ours"] != r["kernelbench"]:
            who = (f"we refuse ({r['our_reason']}), KernelBench accepts" if r["kernelbench"]
                   else f"KernelBench refuses ({r['kb_reason'] or '?'}), we accept")
            print(f"    set_{r['set']} {r['key']} [{r['file']}, {r['verdict']}]: {who}")


# ---- the command line -------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--manifest", type=Path, default=MANIFEST)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("validate", help="check the manifest and the corpus' size")
    sub.add_parser("repos", help="the repositories the corpus needs, with clone commands")
    f = sub.add_parser("fetch", help="fetch the files and lay out the sets")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--mirrors", type=Path, action="append", default=[])
    f.add_argument("--download", action="store_true",
                   help="take files that have no local copy from raw.githubusercontent.com")
    f.add_argument("--kernelbench", type=Path, help="check every problem exists in this checkout")
    k = sub.add_parser("kernelbench", help="export the pinned KernelBench checkout")
    k.add_argument("--out", type=Path, required=True)
    k.add_argument("--commit", default=KERNELBENCH_COMMIT)
    k.add_argument("--mirrors", type=Path, action="append", default=[])
    s = sub.add_parser("summarize", help="the corpus' agreement table from the sets' bench runs")
    s.add_argument("cands", type=Path, help="the fetched corpus (holding index.json)")
    s.add_argument("runs", type=Path, help="the runs: RUNS/set_<k>/results.jsonl")
    s.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    try:
        if a.cmd == "kernelbench":
            export_kernelbench(a.out, a.commit, a.mirrors)
            print(f"KernelBench {a.commit} in {a.out}")
            return 0
        if a.cmd == "summarize":
            summary = summarize(a.cands, a.runs)
            if a.json:
                print(json.dumps(summary, indent=1))
            else:
                print_summary(summary)
            return 0
        entries = load_manifest(a.manifest)
        if a.cmd == "validate":
            errors = check_corpus(entries)
            for e in errors:
                print(f"corpus: {e}", file=sys.stderr)
            print(json.dumps(stats(entries) if not validate(entries) else {}, indent=1))
            return 1 if errors else 0
        if a.cmd == "repos":
            for repo in sorted({e["repo"] for e in entries}):
                print(f"git clone https://github.com/{repo} MIRRORS/{repo}")
            return 0
        doc = fetch(entries, a.out, a.mirrors, a.download, a.kernelbench)
        print(json.dumps({"out": str(a.out), "sets": doc["sets"], **doc["stats"]}, indent=1))
        return 0
    except (CorpusError, OSError, json.JSONDecodeError) as err:
        print(f"corpus: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
