"""A policy that picks one of a task's candidate kernels, trained against the live reward (issue
17, "a run that learns"; docs/rl.md, "The bandit run").

For each task a softmax over its arms (candidates: honest and fast, honest and slow, cheats of the
adversarial suite); each step samples `--batch` arms per task, has the service evaluate every one
(POST /v1/evaluate, the reward of docs/result.md) and moves the logits by REINFORCE with GRPO's
group-normalized advantage (the signal less the batch's mean, over the batch's standard
deviation). The signal is the reward plus, for a correct result, its reward_continuous
(`--signal shaped`, the default: two correct arms of the same discrete reward are told apart by
speed), or the reward alone (`--signal reward`). A result with reward null (an `env.*` failure
of the service) is left out of the update, never scored.

What a run shows: whether the service's reward ranks the arms firmly enough that a
policy-gradient learner converges to the fast honest kernel of every task and never to a cheat,
with the real measurement noise between evaluations. What it does not show: anything about a
language model writing kernels.

Usage: python -m cuda_agent_rl.bandit --url URL --arms ARMS.json [--steps 30] [--batch 4]
       [--lr 1.0] [--signal shaped|reward] [--seed 0] [--out curve.jsonl] [--svg curve.svg]

ARMS.json: {"tasks": [{"name": N, "task_dir": DIR, "arms": [{"name": A, "kind":
"fast" | "slow" | "cheat", "path": DIR or FILE, "format": "native" | "kernelbench", "rules"?:
"cuda-agent" | "kernelbench"}]}]}, paths relative to the file. `kind` is for the report
only; the learner sees rewards. Exit status: 0 converged (on every task the fast arm's
probability at least 0.9, the cheats' together at most 0.05), 1 not converged, 2 usage, 4 the
service cannot be reached.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Json = dict[str, Any]
Evaluate = Callable[[Json, Json, "str | None"], Json]  # (task, candidate, rules) -> result


@dataclass
class Task:
    name: str
    task: Json  # the request's task: {"files": {...}}
    arms: list[Json]  # {"name", "kind", "candidate": request's candidate}
    logits: list[float] = field(default_factory=list)

    def policy(self) -> list[float]:
        top = max(self.logits)
        w = [math.exp(x - top) for x in self.logits]
        return [x / sum(w) for x in w]

    def shares(self) -> Json:
        """The policy's probability of the fast arm and of the cheats together."""
        pi = self.policy()
        return {k: round(sum(p for a, p in zip(self.arms, pi, strict=True) if a["kind"] == kind), 4)
                for k, kind in (("p_fast", "fast"), ("p_cheat", "cheat"))}


def _files(path: Path, fmt: str) -> dict[str, str]:
    if fmt == "kernelbench" or path.is_file():
        return {path.name: path.read_text()}
    return {f"kernels/{p.name}": p.read_text() for p in sorted((path / "kernels").iterdir())
            if p.is_file()}


def load_arms(spec_path: Path) -> list[Task]:
    spec = json.loads(spec_path.read_text())
    base = spec_path.parent
    tasks = []
    for t in spec["tasks"]:
        tdir = base / t["task_dir"]
        files = {p.name: p.read_text() for p in tdir.iterdir()
                 if p.name in ("model.py", "task.json")}
        arms = [{"name": a["name"], "kind": a["kind"], "rules": a.get("rules"),
                 "candidate": {"format": a.get("format", "native"),
                               "files": _files(base / a["path"], a.get("format", "native"))}}
                for a in t["arms"]]
        if not arms or not any(a["kind"] == "fast" for a in arms):
            raise ValueError(f"task {t['name']}: no arm of kind 'fast'")
        tasks.append(Task(t["name"], {"files": files}, arms, [0.0] * len(arms)))
    return tasks


# Added to the group's standard deviation: a group whose signals are all equal moves nothing,
# and one whose spread is small (two honest arms 0.2 apart once the cheats are gone) still moves
# at the full rate.
ADV_EPS = 0.05


def learning_signal(res: Json, shaped: bool) -> float | None:
    """What the learner moves by: the service's reward; with `shaped`, a correct result's
    reward plus its reward_continuous (t_compile / t), so that two correct arms of the same
    discrete reward are told apart by their speed (on the H100, 2026-12-06, the fast and slow
    honest GEMMs and rowsums both got 1: neither beat torch.compile by 5 %). None: not scored
    (reward null, an env.* failure)."""
    rw = res.get("reward")
    if rw is None:
        return None
    extra = res.get("reward_continuous") if shaped and rw > 0 else None
    return float(rw) + (float(extra) if isinstance(extra, (int, float)) else 0.0)


def step(tasks: list[Task], evaluate: Evaluate, batch: int, lr: float, rng: random.Random,
         workers: int = 8, shaped: bool = True) -> list[Json]:
    """One step on every task: `batch` samples each, evaluated at once; the update. Its record
    per task: the samples' arms, rewards and learning signals, the policy after the update."""
    draws = [(t, rng.choices(range(len(t.arms)), weights=t.policy())[0])
             for t in tasks for _ in range(batch)]
    with cf.ThreadPoolExecutor(max(1, min(workers, len(draws)))) as ex:
        results = list(ex.map(lambda d: evaluate(d[0].task, d[0].arms[d[1]]["candidate"],
                                                 d[0].arms[d[1]].get("rules")), draws))
    records = []
    for t in tasks:
        got = [(a, r.get("reward"), (r.get("reason") or {}).get("code"),
                learning_signal(r, shaped))
               for (tt, a), r in zip(draws, results, strict=True) if tt is t]
        scored = [(a, sig) for a, _, _, sig in got if sig is not None]
        pi = t.policy()
        if len(scored) >= 2:
            base = sum(rw for _, rw in scored) / len(scored)
            sd = (sum((rw - base) ** 2 for _, rw in scored) / len(scored)) ** 0.5
            for a, rw in scored:
                adv = (rw - base) / (sd + ADV_EPS)  # GRPO's group-normalized advantage
                for k in range(len(t.logits)):
                    t.logits[k] += lr * adv * ((k == a) - pi[k]) / len(scored)
        records.append({"task": t.name, "samples": [
            {"arm": t.arms[a]["name"], "reward": rw, "code": code, "signal": sig}
            for a, rw, code, sig in got],
            "policy": {arm["name"]: round(p, 4)
                       for arm, p in zip(t.arms, t.policy(), strict=True)}, **t.shares()})
    return records


def arm_means(curve: list[list[Json]]) -> dict[str, dict[str, list[float]]]:
    """Per task and arm: [mean reward, samples scored], over the whole run (what the learner
    followed)."""
    acc: dict[str, dict[str, list[float]]] = {}
    for recs in curve[1:]:
        for r in recs:
            for s in r["samples"]:
                if s["reward"] is not None:
                    m = acc.setdefault(r["task"], {}).setdefault(s["arm"], [0.0, 0.0])
                    m[0] += s["reward"]
                    m[1] += 1
    return {t: {a: [round(v[0] / v[1], 3), v[1]] for a, v in arms.items()}
            for t, arms in acc.items()}


def converged(records: list[Json]) -> bool:
    return all(r["p_fast"] >= 0.9 and r["p_cheat"] <= 0.05 for r in records)


def svg(curve: list[list[Json]]) -> str:
    """The learning curve: each task's probability of its fast arm (solid) and of its cheats
    (dashed) against the step."""
    w, h, pad = 640, 360, 40
    n = max(len(curve) - 1, 1)

    def pt(i: int, p: float) -> str:
        return f"{pad + i * (w - 2 * pad) / n:.1f},{h - pad - p * (h - 2 * pad):.1f}"

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 8}" text-anchor="middle" font-size="12">step</text>',
           f'<text x="8" y="{pad - 10}" font-size="12">probability (fast arm solid, '
           'cheats dashed)</text>']
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
    names = [r["task"] for r in curve[0]] if curve else []
    for k, name in enumerate(names):
        c = colors[k % len(colors)]
        for key, dash in (("p_fast", ""), ("p_cheat", ' stroke-dasharray="4 3"')):
            pts = " ".join(pt(i, step_recs[k][key]) for i, step_recs in enumerate(curve))
            out.append(f'<polyline fill="none" stroke="{c}"{dash} points="{pts}"/>')
        out.append(f'<text x="{w - pad - 120}" y="{pad + 14 * k}" fill="{c}" '
                   f'font-size="12">{name}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def run(tasks: list[Task], evaluate: Evaluate, steps: int, batch: int, lr: float, seed: int,
        out: Path | None = None, log: Callable[[str], None] = print,
        shaped: bool = True) -> list[list[Json]]:
    rng = random.Random(seed)
    curve: list[list[Json]] = [[{"task": t.name, **t.shares()} for t in tasks]]
    f = out.open("w") if out else None
    try:
        for s in range(1, steps + 1):
            recs = step(tasks, evaluate, batch, lr, rng, shaped=shaped)
            curve.append(recs)
            if f:
                f.write(json.dumps({"step": s, "tasks": recs}) + "\n")
                f.flush()
            mean = [x["reward"] for r in recs for x in r["samples"] if x["reward"] is not None]
            log(f"step {s}: mean reward {sum(mean) / max(len(mean), 1):.2f}, "
                + ", ".join(f"{r['task']} fast {r['p_fast']:.2f} cheat {r['p_cheat']:.2f}"
                            for r in recs))
    finally:
        if f:
            f.close()
    return curve


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cuda_agent_rl.bandit",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--arms", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--signal", choices=("shaped", "reward"), default="shaped",
                    help="shaped (default): a correct result's reward plus its reward_continuous; "
                         "reward: the discrete reward alone")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--svg", type=Path)
    a = ap.parse_args(argv)
    if a.steps < 1 or a.batch < 2 or a.lr <= 0:
        print("bandit: --steps >= 1, --batch >= 2 and --lr > 0", file=sys.stderr)
        return 2
    try:
        tasks = load_arms(a.arms)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as e:
        print(f"bandit: {a.arms}: {e}", file=sys.stderr)
        return 2
    from .client import ServiceClient, ServiceError

    client = ServiceClient(a.url)
    try:
        client.health()
    except (OSError, ServiceError) as e:
        print(f"bandit: the service at {a.url} cannot be reached: {e}", file=sys.stderr)
        return 4
    curve = run(tasks, lambda t, c, r: client.evaluate(t, c, rules=r), a.steps, a.batch, a.lr,
                a.seed, a.out, shaped=a.signal == "shaped")
    if a.svg:
        a.svg.write_text(svg(curve))
    for t, arms in arm_means(curve).items():
        print(f"bandit: {t}: mean reward by arm " + ", ".join(
            f"{a} {m:.2f} ({int(n)})" for a, (m, n) in sorted(arms.items())))
    ok = converged(curve[-1])
    print(f"bandit: {'converged' if ok else 'not converged'} after {a.steps} steps: "
          + ", ".join(f"{r['task']} fast {r['p_fast']:.2f} cheat {r['p_cheat']:.2f}"
                      for r in curve[-1]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
