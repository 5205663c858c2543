"""Where does our timing of a single-kernel candidate differ from ncu's gpu__time_duration?

Evaluates one candidate and reports its median, the claims' median (CUDA events in the
candidate's process less their calibrated overhead) and the supervisor's outside bound
(docs/protocol.md, "The sample"), next to:
  - ncu gpu__time_duration of the same kernel (with ncu's own cache flush, and without);
  - the CUPTI kernel duration our own `profile` command measures.
This attributes the gap: kernel time itself (CUPTI vs ncu) or our accounting (events, outside).
Usage: bench/ncu_gap.py [--task DIR] [--solution DIR] [--build DIR]; writes ncu_gap.json to $OUT.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import BIG_SOL, BIG_TASK, ROOT, cli, ncu_kernel_times


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

    cli(args.build, ["eval", "--json", str(args.task), str(args.solution)], env)  # baselines
    res, _ = cli(args.build, ["eval", "--json", str(args.task), str(args.solution)], env)
    report["eval_timing"] = {k: v for k, v in res[0]["timing"]["candidate"].items()
                             if not isinstance(v, list)}
    ncu_all = ncu_kernel_times(args.build, args.task, args.solution, env)
    ncu_none = ncu_kernel_times(args.build, args.task, args.solution, env,
                                ["--cache-control", "none"])
    report["ncu_cache_all_median_ms"] = statistics.median(ncu_all) if ncu_all else None
    report["ncu_cache_none_median_ms"] = statistics.median(ncu_none) if ncu_none else None
    prof, _ = cli(args.build, ["profile", "--json", "--task", str(args.task), str(args.solution)],
                  env)
    report["cupti_profile"] = prof[0].get("profile")
    shutil.rmtree(cache, ignore_errors=True)
    (out_dir / "ncu_gap.json").write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "cupti_profile"}, indent=1))
    kernels = (report["cupti_profile"] or {}).get("kernels") or []
    for k in kernels:
        print("cupti:", json.dumps(k))
    return 0


if __name__ == "__main__":
    sys.exit(main())
