"""Why a baseline's time moved between processes (bench/RESULTS.md, protocol 4): one process,
three tasks, eager and torch.compile, each call timed with CUDA events two ways.

  sync:   L2 flush, synchronize, start event, the call, end event, synchronize (protocol 3:
          the GPU idles while the host launches, so the host's launch overhead is in the time);
  prearm: the same with a GPU wait queued before the start event (torch.cuda._sleep), as the
          supervisor's hold does from its own context under protocol 4.

Also the host time of the call itself (perf_counter around it, no synchronize). Prints one JSON
line of medians; run it in several fresh processes and compare (the variance is between
processes, not within one). Needs a CUDA GPU.
Usage: python3 bench/host_overhead.py [SLEEP_CYCLES]   (default 400000, about 200 us)
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F


def measure(fn: Callable[..., torch.Tensor], args: list[torch.Tensor], flush: torch.Tensor,
            cycles: int) -> dict[str, float]:
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    out: dict[str, float] = {}
    for mode in ("sync", "prearm"):
        times, host = [], []
        for i in range(200):
            flush.fill_(float(i))
            torch.cuda.synchronize()
            if mode == "prearm":
                torch.cuda._sleep(cycles)
            start.record()
            t0 = time.perf_counter()
            fn(*args)
            t1 = time.perf_counter()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
            host.append((t1 - t0) * 1e3)
        out[mode] = round(statistics.median(times), 5)
        out[mode + "_host"] = round(statistics.median(host), 5)
    return out


def main() -> int:
    cycles = int(sys.argv[1]) if len(sys.argv) > 1 else 400_000
    torch.manual_seed(0)
    dev = "cuda"
    l2 = int(torch.cuda.get_device_properties(0).L2_cache_size)
    flush = torch.empty(2 * l2 // 4, device=dev)
    tasks: dict[str, tuple[Callable[..., torch.Tensor], list[torch.Tensor]]] = {
        "gelu8192": (lambda x: F.gelu(x) * 1.5, [torch.randn(8192, 8192, device=dev)]),
        "mm2048": (lambda a, b: a @ b, [torch.randn(2048, 2048, device=dev),
                                        torch.randn(2048, 2048, device=dev)]),
        "softmax1k": (lambda x: torch.softmax(x, dim=-1) * 2.0,
                      [torch.randn(1024, 1024, device=dev)]),
    }
    report: dict[str, dict[str, float]] = {}
    for name, (fn, args) in tasks.items():
        for kind, f in (("eager", fn), ("compile", torch.compile(fn))):
            for _ in range(20):
                f(*args)
            torch.cuda.synchronize()
            report[f"{name}/{kind}"] = measure(f, args, flush, cycles)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
