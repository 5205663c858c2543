"""Flip rate at the reward's thresholds (issue 13; needs a GPU).

An honest kernel (tests/adversarial/honest/grid_stride_scale_add) is slowed by a device-side
delay launched after it on the given stream, so that its speed-up against eager lands where we
want it relative to the reward's threshold (1/0.95 = x1.0526). A survey first measures a grid of
delays (--passes evaluations each, interleaved, the median kept: one evaluation of such a kernel
moves by a few per cent); three kernels whose median speed-up lies 2-5 % below or above
the threshold (both sides where the survey found both) are then evaluated N times each in one
warm session. A flip is an evaluation whose reward differs from that kernel's most common one. Prints one JSON object: the survey, and
for each picked kernel its speed-ups, rewards and flips.

Usage: python3 bench/flip_rate.py [--build build] [--n 10] [--passes 3] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ADV = ROOT / "tests/adversarial"
THRESHOLD = 1 / 0.95
SPIN = r"""
__global__ void ca_bench_delay(long long ns)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while ((long long)(t - t0) < ns);
}
"""


def kernel(work: Path, ns: int) -> Path:
    src = (ADV / "honest/grid_stride_scale_add/kernels/grid_stride.cu").read_text()
    src = src.replace("} // namespace", SPIN + "\n} // namespace", 1)
    launch = f"\\1\\n\\tif ({ns} > 0) ca_bench_delay<<<1, 1, 0, stream>>>({ns}LL);"
    src, n = re.subn(r"(affine<<<[^;]*;)", launch, src, count=1)
    assert n == 1, "the launch was not found"
    d = work / f"k{ns}"
    (d / "kernels").mkdir(parents=True, exist_ok=True)
    (d / "kernels/grid_stride.cu").write_text(src)
    return d


def evaluate(build: Path, dirs: list[Path]) -> list[dict[str, Any]]:
    p = subprocess.run([str(build / "cuda-agent"), "eval", "--json", "--task",
                        str(ADV / "tasks/scale_add")] + [str(d) for d in dirs],
                       capture_output=True, text=True, timeout=1800, check=False)
    return [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]


def speedup(r: dict[str, Any]) -> float | None:
    v = (r.get("timing") or {}).get("speedup_eager")
    return float(v) if isinstance(v, (int, float)) else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=ROOT / "build")
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--passes", type=int, default=3, help="survey evaluations per delay")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ca-flip-"))
    try:
        probe = evaluate(a.build, [kernel(work, 0)])[0]
        eager = probe["timing"]["eager"]["median_ms"]
        base = probe["timing"]["candidate"]["median_ms"]
        # the delays that would put the speed-up at 0.93-1.09 of the threshold, every 1 %
        grid = [int(1e6 * max(0.0, eager / (THRESHOLD * f) - base))
                for f in [0.93 + 0.01 * k for k in range(17)]]
        runs = evaluate(a.build, [kernel(work, ns) for ns in grid] * a.passes)
        survey: list[dict[str, Any]] = []
        for k, ns in enumerate(grid):
            mine = runs[k::len(grid)]
            sp = [x for x in (speedup(r) for r in mine) if x]
            survey.append({"delay_ns": ns, "speedup": statistics.median(sp) if sp else None,
                           "speedups": sp, "rewards": [r.get("reward") for r in mine]})
        print(json.dumps({"survey": survey}), file=sys.stderr, flush=True)
        below = [x for x in survey if x["speedup"] and 0.95 <= x["speedup"] / THRESHOLD <= 0.98]
        above = [x for x in survey if x["speedup"] and 1.02 <= x["speedup"] / THRESHOLD <= 1.05]
        # three kernels, both sides where the survey found both, each nearest the band's middle
        def mid(x: dict[str, Any]) -> float:
            return abs(abs(x["speedup"] / THRESHOLD - 1) - 0.035)

        below.sort(key=mid)
        above.sort(key=mid)
        picks = below[:2] + above[:1] if below and above else (below + above)[:3]
        picks += [x for x in sorted(below + above, key=mid) if x not in picks][:3 - len(picks)]
        results: list[dict[str, Any]] = []
        flips, evaluations = 0, 0
        for p in picks:
            rs = evaluate(a.build, [kernel(work, int(p["delay_ns"]))] * a.n)
            rewards = [r.get("reward") for r in rs]
            mode = Counter(rewards).most_common(1)[0][0] if rewards else None
            sp = [speedup(r) for r in rs]
            m = statistics.median([x for x in sp if x]) / THRESHOLD if any(sp) else None
            results.append({"delay_ns": p["delay_ns"], "survey_speedup": p["speedup"],
                            "speedups": sp, "median_vs_threshold": m,
                            "within_2_5_pct": m is not None and 0.02 <= abs(m - 1) <= 0.05,
                            "rewards": rewards, "flips": sum(1 for x in rewards if x != mode)})
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
            flips += sum(1 for x in rewards if x != mode)
            evaluations += len(rewards)
        report = {"eager_ms": eager, "undelayed_ms": base, "threshold": THRESHOLD,
                  "survey": survey, "picked": results,
                  "flips": flips, "evaluations": evaluations}
        if a.out:
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / "flip_rate.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
