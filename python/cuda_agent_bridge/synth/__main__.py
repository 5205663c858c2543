"""`python -m cuda_agent_bridge.synth STEP --dir DIR ...` (what `cuda-agent synth` runs;
docs/synth.md). Every step reads and writes files in DIR and can be interrupted and run again:
it goes on from what is already there.

  crawl                 DIR/catalog.json: the operators found (synth/catalog.py)
  compose -n N          DIR/tasks.jsonl: N tasks (synth/compose.py); --seed S; --measured RUN
                        (repeatable): size them with the slowdowns measured in an earlier
                        filter run's directory on a GPU (compose.slowdowns)
  filter                DIR/verdicts.jsonl: each task's verdict (synth/filters.py);
                        --kernelbench PATH (decontamination), --no-compile, --jobs J
  export                DIR/ops.jsonl (+ ops.parquet with pyarrow): the kept tasks as Ops-6K
                        rows {code, ops, data_source}; DIR/funnel.json, DIR/funnel.html (SVG
                        charts) and a table on stdout
  llm-prompts -n N      DIR/llm_prompts.jsonl: N prompts for an LLM (synth/llm.py); the
                        C side (`cuda-agent synth compose --llm-url`) sends them and writes
                        DIR/llm_replies.jsonl
  kb-corpus             DIR/kernelbench_corpus.json: --kernelbench's fingerprints (what the
                        sandboxed filter reads instead of the tree)
  llm-ingest            the replies' code (parsed, never run) appended to DIR/tasks.jsonl, or
                        to DIR/llm_rejected.jsonl with the reason

Exit status: 0 done, 2 usage or a missing input file, 3 a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

Json = dict[str, Any]


class Progress:
    """One line on stderr, rewritten: done/total, rate, ETA."""

    def __init__(self, what: str, total: int, start: int = 0) -> None:
        self.what, self.total, self.start = what, total, start
        self.t0 = time.monotonic()
        self.last = 0.0

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last < 0.5 and done < self.total:
            return
        self.last = now
        rate = (done - self.start) / max(now - self.t0, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else float("inf")
        eta_s = f"{eta:.0f} s" if eta != float("inf") else "?"
        end = "\n" if done >= self.total else ""
        sys.stderr.write(f"\r{self.what}: {done}/{self.total} ({rate:.1f}/s, ETA {eta_s})   {end}")
        sys.stderr.flush()


def read_jsonl(path: Path) -> list[Json]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            break  # a line cut by an interruption: what follows it is redone
    return out


def reopen_jsonl(path: Path) -> list[Json]:
    """The rows of a JSONL file, the file rewritten without a cut last line (an interrupted
    write), so that rows appended next follow whole ones."""
    rows = read_jsonl(path)
    if path.exists():
        # a new file: the staged copy of a sandboxed step belongs to the caller, and the
        # sandbox's uid may not write it in place
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))
    return rows


def read_redrawn(d: Path) -> dict[str, int]:
    """compose's draws made again, by why (DIR/compose_stats.json), or {} when there is none."""
    try:
        return dict(json.loads((d / "compose_stats.json").read_text()).get("redrawn", {}))
    except (OSError, ValueError):
        return {}


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def append_jsonl(path: Path, rows: list[Json]) -> None:
    with path.open("a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def step_crawl(d: Path) -> int:
    """The catalog, one source at a time: each source's entries are kept in DIR/crawl_parts/
    as it ends, so that an interrupted crawl goes on from the next source."""
    import shutil

    from . import catalog

    out = d / "catalog.json"
    if out.exists():
        print(f"{out} exists (remove it to crawl again)")
        return 0
    parts_dir = d / "crawl_parts"
    parts_dir.mkdir(exist_ok=True)
    totals = {s: len(src.candidates()) for s, src in catalog.SOURCES.items()}
    parts: dict[str, list[Json]] = {}
    for s in catalog.SOURCES:
        f = parts_dir / f"{s}.json"
        if f.exists():
            try:
                parts[s] = json.loads(f.read_text())
            except ValueError:
                pass  # cut by an interruption: crawled again
    base = sum(totals[s] for s in parts)
    prog = Progress("crawl: candidates", sum(totals.values()), base)
    for s in catalog.SOURCES:
        if s in parts:
            continue
        def tick(k: int, _total: int, b: int = base) -> None:
            prog(b + k)

        parts[s] = catalog.crawl_source(s, tick)
        write_atomic(parts_dir / f"{s}.json", json.dumps(parts[s]))
        base += totals[s]
    cat = catalog.assemble(parts)
    write_atomic(out, json.dumps(cat, indent=1))
    shutil.rmtree(parts_dir, ignore_errors=True)
    print(f"crawl: {len(cat['entries'])} operators ({cat['usable']} usable: deterministic, "
          f"batch dimension free) by source {cat['counts']} -> {out}")
    return 0


def step_compose(d: Path, n: int, seed: int, measured: list[Path] | None = None) -> int:
    from . import compose

    cat = json.loads((d / "catalog.json").read_text())
    slow: dict[str, float] = {}
    if measured:
        for m in measured:
            if not ((m / "tasks.jsonl").is_file() and (m / "verdicts.jsonl").is_file()):
                print(f"compose: --measured {m}: not the directory of an earlier `synth filter` "
                      f"run (it holds tasks.jsonl and verdicts.jsonl)", file=sys.stderr)
                return 2
        try:
            slow = compose.slowdowns([(read_jsonl(m / "tasks.jsonl"),
                                       read_jsonl(m / "verdicts.jsonl")) for m in measured])
        except (KeyError, TypeError) as exc:
            print(f"compose: --measured: a task without its {exc}", file=sys.stderr)
            return 2
        top = sorted(slow.items(), key=lambda kv: -kv[1])[:5]
        print(f"compose: {len(slow)} operators ran slower than the roofline in "
              f"{', '.join(str(m) for m in measured)}; the slowest: "
              + ", ".join(f"{op} {f:.3g}x" for op, f in top), file=sys.stderr)
    path = d / "tasks.jsonl"
    have = reopen_jsonl(path)
    rng = random.Random(seed)
    for _ in range(len(have) * 3):  # the stream of draws as it was, then on
        rng.random()
    prog = Progress("compose", n, len(have))
    batch: list[Json] = []
    stats_path = d / "compose_stats.json"
    # a resumed compose adds to what the first part drew
    redrawn: Counter[str] = Counter(read_redrawn(d) if have else {})
    k = len(have)
    blocks = any(any(m in e["id"] for m in compose.BLOCK_MARKERS) for e in compose.usable(cat))
    while k < n:
        kind = compose.draw_kind(rng)
        if kind == "block" and not blocks:
            continue  # the catalog has no transformer block: the mix renormalizes
        t = None
        for _ in range(100):  # operators drawn again, for this kind
            t = compose.compose_one(cat, random.Random(rng.getrandbits(64)), k, kind, redrawn,
                                    slow)
            if t is not None:
                break
        if t is None:
            print(f"compose: no task of kind {kind} could be made", file=sys.stderr)
            return 3
        batch.append(t)
        k += 1
        if len(batch) >= 20 or k == n:
            append_jsonl(path, batch)
            write_atomic(stats_path, json.dumps({"redrawn": dict(sorted(redrawn.items())),
                                                 "measured": [str(m) for m in measured or []],
                                                 "slowed_operators": len(slow)}))
            batch = []
        prog(k)
    mix = Counter(t["kind"] for t in read_jsonl(path))
    print(f"compose: {k} tasks in {path}; mix {dict(sorted(mix.items()))}; draws redrawn "
          f"{sum(redrawn.values())} {dict(sorted(redrawn.items()))}")
    return 0


def step_filter(d: Path, kernelbench: Path | None, do_compile: bool, jobs: int) -> int:
    from . import filters, similarity

    tasks = read_jsonl(d / "tasks.jsonl")
    path = d / "verdicts.jsonl"
    done = reopen_jsonl(path)
    kb = similarity.corpus(kernelbench) if kernelbench else {}
    if kernelbench and not kb:
        print(f"filter: no KernelBench program under {kernelbench}", file=sys.stderr)
        return 2
    deco = filters.Decontaminator(kb)
    by_id = {t["id"]: t for t in tasks}
    for v in done:  # the kept set as it was
        if v.get("kept"):
            deco.kept[tuple(by_id[v["id"]]["ops"])] = v["id"]
    seen = {v["id"] for v in done}
    todo = [t for t in tasks if t["id"] not in seen]  # verdicts come in the order they finish
    prog = Progress("filter", len(tasks), len(done))
    wall0 = time.monotonic()
    for t, v in filters.run_parallel(todo, do_compile, jobs, lambda k: prog(len(done) + k)):
        if v["stage"] is None:
            t0 = time.perf_counter()
            failed = deco.check(t)
            v.setdefault("seconds", {})["decontamination"] = round(time.perf_counter() - t0, 3)
            if failed:
                v["stage"], v["why"], info = failed
                v.update(info)
        v["kept"] = v["stage"] is None
        append_jsonl(path, [v])  # each as it comes: an interruption loses none
    verdicts = read_jsonl(path)
    kept = sum(1 for v in verdicts if v.get("kept"))
    shown = Path(os.environ.get("CUDA_AGENT_SYNTH_DIR", str(d))) / path.name  # not the staging
    print(f"filter: {kept} of {len(verdicts)} kept -> {shown}"
          + ("" if kernelbench else " (no --kernelbench: not decontaminated)"))
    if todo:
        print(time_report(read_jsonl(path)[len(done):], time.monotonic() - wall0, jobs))
    return 0


def time_report(verdicts: list[Json], wall_s: float, jobs: int) -> str:
    """Where this run's time went: the seconds its tasks spent in each stage (summed over the
    tasks), and the rate each part allows (the checks and torch.compile in `jobs` processes;
    the GPU timing and the decontamination one task at a time)."""
    total: dict[str, float] = {}
    for v in verdicts:
        for k, x in (v.get("seconds") or {}).items():
            total[k] = total.get(k, 0.0) + float(x)
    parallel = total.get("checks", 0.0) + total.get("compile", 0.0)
    bounds = {"CPU checks and torch.compile": parallel / max(jobs, 1),
              "GPU timing": total.get("timing", 0.0),
              "decontamination": total.get("decontamination", 0.0)}
    worst = max(bounds, key=lambda k: bounds[k])
    parts = ", ".join(f"{k} {x:.1f} s" for k, x in sorted(total.items()))
    rate = len(verdicts) / max(wall_s, 1e-9)
    return (f"filter: {len(verdicts)} tasks in {wall_s:.1f} s ({rate:.2f}/s); task-seconds "
            f"by stage: {parts or 'none'}; the largest share: {worst} "
            f"({bounds[worst]:.1f} s of the wall time at {jobs} process(es))")


def step_kb_corpus(d: Path, kernelbench: Path | None) -> int:
    """DIR/kernelbench_corpus.json: the fingerprints of the KernelBench tree (parsed, never run),
    so that a sandboxed `filter` needs no access to the tree."""
    from . import similarity

    if kernelbench is None:
        print("synth kb-corpus: --kernelbench PATH is needed", file=sys.stderr)
        return 2
    kb = similarity.corpus(kernelbench)
    if not kb:
        print(f"synth kb-corpus: no KernelBench program under {kernelbench}", file=sys.stderr)
        return 2
    out = d / "kernelbench_corpus.json"
    write_atomic(out, json.dumps(kb))
    return 0


def step_llm_prompts(d: Path, n: int, seed: int) -> int:
    from . import llm

    cat = json.loads((d / "catalog.json").read_text())
    path = d / "llm_prompts.jsonl"
    have = reopen_jsonl(path)
    if len(have) < n:
        append_jsonl(path, llm.prompts(cat, n - len(have), seed, first=len(have)))
    print(f"llm: {max(n, len(have))} prompts in {path}")
    return 0


def step_llm_ingest(d: Path) -> int:
    from . import llm

    prompts = read_jsonl(d / "llm_prompts.jsonl")
    replies = {r["id"]: r for r in read_jsonl(d / "llm_replies.jsonl")}
    tasks_path, rej_path = d / "tasks.jsonl", d / "llm_rejected.jsonl"
    tasks = reopen_jsonl(tasks_path)
    rejected = reopen_jsonl(rej_path)
    seen = {t["id"] for t in tasks} | {r["id"] for r in rejected}
    new, rej = [], []
    for p in prompts:
        if p["id"] in seen or p["id"] not in replies:
            continue
        task, why = llm.ingest(p, replies[p["id"]])
        if task:
            new.append(task)
        else:
            rej.append({"id": p["id"], "why": why})
    append_jsonl(tasks_path, new)
    append_jsonl(rej_path, rej)
    top = Counter(r["why"].split(":")[0][:60] for r in rej).most_common(3)
    print(f"llm: {len(new)} tasks from {len(new) + len(rej)} new replies -> {tasks_path}"
          + (f"; {len(rej)} rejected ({'; '.join(f'{w} ({k})' for w, k in top)})" if rej else ""))
    return 0


def llm_summary(d: Path) -> Json | None:
    """What became of the LLM's prompts (the funnel's part before `filter`)."""
    prompts = read_jsonl(d / "llm_prompts.jsonl")
    if not prompts:
        return None
    replies = read_jsonl(d / "llm_replies.jsonl")
    rejected = read_jsonl(d / "llm_rejected.jsonl")
    return {"prompts": len(prompts), "replies": sum(1 for r in replies if "error" not in r),
            "failed_requests": sum(1 for r in replies if "error" in r),
            "rejected": len(rejected),
            "top_reasons": Counter(r["why"].split(":")[0][:60] for r in rejected).most_common(3)}


def funnel(tasks: list[Json], verdicts: list[Json], redrawn: dict[str, int] | None = None
           ) -> Json:
    """The funnel; `redrawn`: compose's draws made again, by why (compose_stats.json)."""
    from .filters import STAGES

    dropped = Counter(v["stage"] for v in verdicts if not v.get("kept"))
    why: dict[str, Counter[str]] = {}
    for v in verdicts:
        if not v.get("kept"):
            why.setdefault(v["stage"], Counter())[v["why"].split(":")[0][:60]] += 1
    by_id = {t["id"]: t for t in tasks}
    kept = [by_id[v["id"]] for v in verdicts if v.get("kept")]
    left, rows = len(verdicts), []
    for s in STAGES:
        left -= dropped.get(s, 0)
        rows.append({"stage": s, "dropped": dropped.get(s, 0), "left": left,
                     "top_reasons": why.get(s, Counter()).most_common(3)})
    runtimes = [v["runtime_ms"] for v in verdicts if v.get("kept") and "runtime_ms" in v]
    return {"composed": len(tasks), "filtered": len(verdicts), "kept": len(kept),
            "redrawn_at_compose": dict(redrawn or {}),
            "stages": rows,
            "mix": dict(sorted(Counter(t["kind"] for t in kept).items())),
            "ops": Counter(op for t in kept for op in t["ops"]).most_common(30),
            "runtime_ms": runtimes,
            "runtime_measured": all(v.get("measured") for v in verdicts if v.get("kept"))}


def step_export(d: Path) -> int:
    tasks = read_jsonl(d / "tasks.jsonl")
    order = {t["id"]: i for i, t in enumerate(tasks)}
    # in task order: the filter writes verdicts in the order they finish
    verdicts = sorted(read_jsonl(d / "verdicts.jsonl"), key=lambda v: order.get(v["id"], -1))
    by_id = {t["id"]: t for t in tasks}
    rows = [{"code": by_id[v["id"]]["code"], "ops": by_id[v["id"]]["ops"],
             "data_source": "cuda-agent-synth-llm" if by_id[v["id"]].get("source") == "llm"
             else "cuda-agent-synth"} for v in verdicts if v.get("kept")]
    out = d / "ops.jsonl"
    write_atomic(out, "".join(json.dumps(r) + "\n" for r in rows))
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), d / "ops.parquet")
        parquet = f" and {d / 'ops.parquet'}"
    except ImportError:
        parquet = " (no pyarrow: no parquet)"
    from .report import render

    redrawn = read_redrawn(d)
    f = funnel(tasks, verdicts, redrawn)
    f["llm"] = llm_summary(d)
    (d / "funnel.json").write_text(json.dumps(f, indent=1))
    (d / "funnel.html").write_text(render(f))
    print(f"export: {len(rows)} tasks -> {out}{parquet}")
    if f["llm"]:
        g = f["llm"]
        print(f"LLM: {g['prompts']} prompts, {g['replies']} replies, {g['failed_requests']} "
              f"failed requests, {g['rejected']} replies not a task"
              + "".join(f"; {w} ({k})" for w, k in g["top_reasons"]))
    if redrawn:
        print(f"compose drew {sum(redrawn.values())} operator sets again before these tasks: "
              + ", ".join(f"{w} {n}" for w, n in sorted(redrawn.items())))
    print(f"{'stage':<16}{'dropped':>9}{'left':>8}  top reasons")
    print(f"{'composed':<16}{'':>9}{f['filtered']:>8}")
    for r in f["stages"]:
        reasons = "; ".join(f"{w} ({n})" for w, n in r["top_reasons"])
        print(f"{r['stage']:<16}{r['dropped']:>9}{r['left']:>8}  {reasons}")
    total = max(1, f["kept"])
    mix = ", ".join(f"{k}: {100 * v / total:.1f} %" for k, v in f["mix"].items())
    print(f"op-count mix of the kept tasks: {mix}")
    rt = sorted(f["runtime_ms"])
    if rt:
        q = [rt[int(p * (len(rt) - 1))] for p in (0.1, 0.5, 0.9)]
        print(f"eager runtime ({'measured' if f['runtime_measured'] else 'estimated'}): "
              f"p10 {q[0]:.2f} ms, p50 {q[1]:.2f} ms, p90 {q[2]:.2f} ms")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cuda-agent synth", description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=["crawl", "compose", "filter", "export", "llm-prompts",
                                     "llm-ingest", "kb-corpus"])
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kernelbench", type=Path)
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--measured", type=Path, action="append", default=[])
    a = ap.parse_args(argv)
    if a.measured and a.step != "compose":
        print("synth: --measured is compose's option", file=sys.stderr)
        return 2
    needs = {"compose": "catalog.json", "filter": "tasks.jsonl", "export": "verdicts.jsonl",
             "llm-prompts": "catalog.json", "llm-ingest": "llm_prompts.jsonl"}
    if a.step in needs and not (a.dir / needs[a.step]).exists():
        print(f"synth {a.step}: {a.dir / needs[a.step]} is missing (run the step before)",
              file=sys.stderr)
        return 2
    a.dir.mkdir(parents=True, exist_ok=True)
    if a.step == "crawl":
        return step_crawl(a.dir)
    if a.step == "compose":
        return step_compose(a.dir, a.n, a.seed, a.measured)
    if a.step == "filter":
        return step_filter(a.dir, a.kernelbench, not a.no_compile, a.jobs)
    if a.step == "llm-prompts":
        return step_llm_prompts(a.dir, a.n, a.seed)
    if a.step == "llm-ingest":
        return step_llm_ingest(a.dir)
    if a.step == "kb-corpus":
        return step_kb_corpus(a.dir, a.kernelbench)
    return step_export(a.dir)


if __name__ == "__main__":
    sys.exit(main())
