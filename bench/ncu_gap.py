"""Where does our timing of a single-kernel candidate differ from ncu's gpu__time_duration?

Evaluates one candidate with --keep, then re-runs the kept worker plan directly with variants of
the timing protocol (L2 flush factor) and reports, per variant, the worker's median, its CUDA-event
median and its host median (each with its calibrated overhead removed) next to:
  - ncu gpu__time_duration of the same kernel (with ncu's own cache flush, and without);
  - the CUPTI kernel duration our own `profile` command measures.
This attributes the gap: kernel time itself (CUPTI vs ncu) or our accounting (events, host).
Usage: bench/ncu_gap.py [--task DIR] [--solution DIR] [--build DIR]; writes ncu_gap.json to $OUT.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BIG_SOL, BIG_TASK, ROOT, cli, ncu_kernel_times  # noqa: E402


def worker_timing(build: Path, plan: dict, run_dir: str, env: dict[str, str]) -> dict:
    """Runs the worker on a copy of the plan; returns its timing event."""
    path = os.path.join(run_dir, "plan-variant.json")
    with open(path, "w") as f:
        json.dump(plan, f)
    proc = subprocess.run([str(build / "cuda-agent-worker"), path], input="continue\n", env=env,
                          capture_output=True, text=True, timeout=600)
    for line in proc.stdout.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "timing":
            return ev
    raise RuntimeError(f"worker gave no timing event (exit {proc.returncode}): "
                       f"{proc.stdout[-1500:]} {proc.stderr[-1500:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--task", type=Path, default=BIG_TASK)
    ap.add_argument("--solution", type=Path, default=BIG_SOL)
    args = ap.parse_args()
    out_dir = Path(os.environ.get("OUT", "."))
    cache = Path(tempfile.mkdtemp(prefix="ca-ncugap-"))
    env = dict(os.environ, CUDA_AGENT_CACHE=str(cache), CUDA_AGENT_LOG="quiet")
    report: dict = {}

    res, _ = cli(args.build, ["eval", "--json", "--keep", str(args.task), str(args.solution)], env)
    run_dir = res[0]["run_dir"]
    report["eval_timing"] = {k: v for k, v in res[0]["timing"]["candidate"].items()
                             if not isinstance(v, list)}
    plan = json.load(open(os.path.join(run_dir, "plan.json")))
    variants = []
    for factor in (2.0, 0.0, 8.0, 2.0):
        p = json.loads(json.dumps(plan))
        p["timing"]["protocol"]["l2_flush_factor"] = factor
        ev = worker_timing(args.build, p, run_dir, env)
        row = {"flush_factor": factor}
        row.update({k: ev.get(k) for k in ("median_ms", "event_median_ms", "host_median_ms",
                                           "overhead_ms", "event_overhead_ms", "samples", "rse")})
        variants.append(row)
        print(json.dumps(row), flush=True)
    report["variants"] = variants
    ncu_all = ncu_kernel_times(args.build, run_dir, env)
    ncu_none = ncu_kernel_times(args.build, run_dir, env, ["--cache-control", "none"])
    report["ncu_cache_all_median_ms"] = statistics.median(ncu_all) if ncu_all else None
    report["ncu_cache_none_median_ms"] = statistics.median(ncu_none) if ncu_none else None
    prof, _ = cli(args.build, ["profile", "--json", "--task", str(args.task), str(args.solution)],
                  env)
    report["cupti_profile"] = prof[0].get("profile")
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    (out_dir / "ncu_gap.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "cupti_profile"}, indent=1))
    kernels = (report["cupti_profile"] or {}).get("kernels") or []
    for k in kernels:
        print("cupti:", json.dumps(k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
