"""What the other evaluations on a GPU were doing while one held it (docs/service.md, "Scheduling").

Reads the files that CUDA_AGENT_TIMELINE and CUDA_AGENT_LOOP_TRACE wrote during a service run
(every worker appends to the same two files; docs/protocol.md says their lines) and reports:
- each hold of the GPU's lock (`gpu_held`) split by how much of it overlapped other workers'
  process starts (`processes`: from the spawn to the hello of the candidate's process and of a
  reference process started with it, when CUDA contexts are made) and builds (`build`), with the mean hold in each group;
- every step's count, mean and p90 (the steps of `seconds`, and the finer ones that only the
  timeline has: per verification trial trial.fill, .setup, .ready, .call, .audited_call,
  .check; finish.quit, .exit; processes; gpu_held);
- the timed windows of the loop (calibration, verification, timing), split by whether another
  worker was starting its processes or building when the window began: their count, the share
  whose first probe was slow (the GPU was not the window's alone), and the mean and p90 window.

Usage: python3 bench/timeline.py TIMELINE LOOP_TRACE
"""
from __future__ import annotations

import bisect
import statistics
import sys
from collections import defaultdict

Span = tuple[float, float]


def read_timeline(path: str) -> dict[str, list[tuple[int, float, float]]]:
    spans: dict[str, list[tuple[int, float, float]]] = defaultdict(list)
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) == 4:
                spans[p[1]].append((int(p[0]), float(p[2]), float(p[3])))
    return spans


def overlap(a: Span, others: list[Span]) -> float:
    """Seconds of a covered by the union of others (sorted by start)."""
    cover, end = 0.0, a[0]
    for s, e in others:
        if e <= end or s >= a[1]:
            continue
        s = max(s, end)
        e = min(e, a[1])
        if e > s:
            cover += e - s
            end = e
    return cover


def describe(xs: list[float]) -> str:
    if not xs:
        return "none"
    s = sorted(xs)
    return (f"{len(s)}, mean {1e3 * statistics.fmean(s):.2f} ms, "
            f"p90 {1e3 * s[int(0.9 * (len(s) - 1))]:.2f} ms")


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    tl = read_timeline(sys.argv[1])
    busy = {k: sorted(tl.get(k, []), key=lambda x: x[1]) for k in ("processes", "build")}
    print("steps (all workers): count, mean, p90")
    for name in sorted(tl):
        print(f"  {name:20s} {describe([e - b for _, b, e in tl[name]])}")
    holds = tl.get("gpu_held", [])
    print(f"{len(holds)} holds, {len(busy['processes'])} process starts, "
          f"{len(busy['build'])} builds")
    groups: dict[str, list[float]] = defaultdict(list)
    for pid, a, b in holds:
        starts = [(s, e) for q, s, e in busy["processes"] if q != pid]
        frac = overlap((a, b), starts) / max(b - a, 1e-9)
        groups["starts over < 10 % of it" if frac < 0.1 else
               "starts over 10-50 %" if frac < 0.5 else "starts over >= 50 %"].append(b - a)
    for k in sorted(groups):
        print(f"  holds with other workers' {k}: {describe(groups[k])}")
    # windows: kind, answer, window, probes, first probe, probes, ev_ms, pid, start
    win: dict[str, list[tuple[float, float]]] = defaultdict(list)
    by_kind = {k: [(s, e) for _, s, e in busy[k]] for k in busy}
    pids = {k: [q for q, _, _ in busy[k]] for k in busy}
    starts_of = {k: [s for s, _ in by_kind[k]] for k in busy}
    slow_first = 200e-6
    with open(sys.argv[2]) as f:
        for line in f:
            p = line.split()
            if len(p) != 9:
                continue
            w, first, pid, t0 = float(p[2]), float(p[4]), int(p[7]), float(p[8])
            tags = []
            for k in ("processes", "build"):
                i = bisect.bisect_right(starts_of[k], t0)
                if any(by_kind[k][j][1] > t0 and pids[k][j] != pid
                       for j in range(max(0, i - 16), i)):
                    tags.append(k)
            key = "+".join(tags) if tags else "nothing"
            win[key].append((w, first))
    for k in sorted(win):
        ws = [w for w, _ in win[k]]
        firsts = [fp for _, fp in win[k]]
        slow = sum(1 for fp in firsts if fp > slow_first)
        print(f"  windows while others ran {k}: {describe(ws)}; first probe mean "
              f"{1e6 * statistics.fmean(firsts):.0f} us, over {1e6 * slow_first:.0f} us: "
              f"{100 * slow / len(ws):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
