"""Splits ctx_contention's call latencies by what other processes were doing when each call began.

Usage: python3 bench/ctx_contention.py CALLS [WINDOWS...]   (files written by ctx_contention)
"""
from __future__ import annotations

import bisect
import statistics
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        calls = [(float(a), float(b)) for a, b in (line.split() for line in f)]
    wins: dict[str, list[tuple[float, float]]] = {"create": [], "exit": []}
    for path in sys.argv[2:]:
        with open(path) as f:
            for line in f:
                kind, a, b = line.split()
                wins[kind].append((float(a), float(b)))
    starts = {k: sorted(w) for k, w in wins.items()}

    def inside(t: float, kind: str) -> bool:
        w = starts[kind]
        i = bisect.bisect_right(w, (t, float("inf")))
        return any(w[j][1] >= t for j in range(max(0, i - 4), i))

    groups: dict[str, list[float]] = {"create": [], "exit": [], "neither": []}
    for t, us in calls:
        groups["create" if inside(t, "create") else "exit" if inside(t, "exit") else
               "neither"].append(us)
    print(f"calls {len(calls)}, median {statistics.median(us for _, us in calls):.1f} us")
    for k, v in groups.items():
        if v:
            v.sort()
            n = len(v)
            what = {"create": "made", "exit": "ended", "neither": "neither made nor ended"}[k]
            print(f"  while others {what} a context: "
                  f"{n} calls, p50 {v[n // 2]:.1f} p90 {v[n * 9 // 10]:.1f} "
                  f"p99 {v[n * 99 // 100]:.1f} max {v[-1]:.1f} us")
    for k, w in wins.items():
        if w:
            print(f"  {k} windows: {len(w)}, mean {1e3 * statistics.fmean(b - a for a, b in w):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
