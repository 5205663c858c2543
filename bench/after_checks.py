"""The claims of the calls right after a checked call against the others, per evaluation.

Reads `cuda-agent eval --json` results (JSON lines; other lines are skipped) and prints, for each
timed evaluation, the median claim of the calls within --after calls of a checked call and of
the rest, their difference, and the pattern (S: a claim more than --slow above the evaluation's
lowest decile, C: a checked call). bench/RESULTS.md, 2026-12-06 seventh session, says why: on an
H100 the two or three calls after each check claimed 27 us more (src/util/cpu_latency.h).

  python3 bench/after_checks.py RESULTS.jsonl [...] [--after 3] [--slow 0.05]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def analyse(result: dict, after: int, slow: float) -> dict | None:
    """The split of one result's claims, or None when it was not timed."""
    timing = result.get("timing") or {}
    cand = timing.get("candidate") or {}
    claims = cand.get("samples_ms") or []
    if not claims:
        return None
    checked = {c["call"] for c in (timing.get("checks") or {}).get("calls", [])
               if isinstance(c.get("call"), int)}
    near = {i for i in range(len(claims)) if any(0 < i - c <= after for c in checked)}
    rest = [i for i in range(len(claims)) if i not in near]
    floor = sorted(claims)[len(claims) // 10]
    pattern = "".join("S" if x > floor * (1 + slow) else "." for x in claims)
    marks = "".join("C" if i in checked else "-" for i in range(len(claims)))
    med = (lambda idx: statistics.median(claims[i] for i in idx) if idx else None)
    return {"median_ms": cand.get("median_ms"), "bound": cand.get("bound"),
            "after_check_ms": med(sorted(near)), "others_ms": med(rest), "calls": len(claims),
            "cpu_latency_us": cand.get("cpu_latency_us"), "pattern": pattern, "checks": marks}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--after", type=int, default=3, help="calls after a check (default 3)")
    ap.add_argument("--slow", type=float, default=0.05,
                    help="S: a claim this fraction above the lowest decile (default 0.05)")
    args = ap.parse_args()
    for path in args.files:
        for line in path.read_text().splitlines():
            if not line.startswith("{"):
                continue
            a = analyse(json.loads(line), args.after, args.slow)
            if a is None:
                continue
            diff = (a["after_check_ms"] - a["others_ms"]) * 1e3 \
                if a["after_check_ms"] is not None and a["others_ms"] is not None else None
            print(f"{path.name}: median {a['median_ms']:.4f} ms ({a['bound']}), after a check "
                  f"{a['after_check_ms'] or float('nan'):.4f}, others "
                  f"{a['others_ms'] or float('nan'):.4f}, difference "
                  f"{'-' if diff is None else f'{diff:+.1f} us'}, {a['calls']} calls, "
                  f"cpu_latency_us {a['cpu_latency_us']}")
            print(f"  {a['pattern'][:100]}\n  {a['checks'][:100]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
