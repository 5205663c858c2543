"""The stopwatch around one call (docs/protocol.md, "The timed loop"), shared by the bridge's
baselines (``bench_empty``, ``bench_call``) and the PyTorch runner (``empty``, ``call``).

Contract: ``Stopwatch(device)``: ``start()`` records a start CUDA event on the current stream
(on the CPU: reads ``time.perf_counter``); ``stop()`` records the end event, synchronizes the
whole device (work on any stream of this process is finished) and returns the milliseconds
between the two events, floored at 0; ``tiny()`` launches the smallest kernel (a one-element
add), the "empty launch" of the calibration. The loop (warm-up, stopping rule, checked calls,
which number becomes the sample) is the supervisor's (src/protocol/loop.c): a time measured here
is a claim the supervisor bounds with its own clock. ``l2_bytes(device)`` is the L2 size torch
reports (a default when it does not).
"""

from __future__ import annotations

import time

import torch

DEFAULT_L2_BYTES = 64 << 20  # when torch does not report the L2 size


def l2_bytes(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    props = torch.cuda.get_device_properties(device)
    return int(getattr(props, "L2_cache_size", 0)) or DEFAULT_L2_BYTES


class Stopwatch:
    """Events (CUDA) or the host clock (CPU) around work on one device."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"
        self._t0 = 0.0
        self._tiny = torch.zeros(1, device=device)
        if self.is_cuda:
            self._start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            self._end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        if self.is_cuda:
            self._start.record()
        else:
            self._t0 = time.perf_counter()

    def tiny(self) -> None:
        # a fill: one of the two torch kernels the candidate's process keeps under the cuda-agent
        # rules (torch_view.py), so the runner's calibration call runs there too
        self._tiny.fill_(1.0)

    def stop(self) -> float:
        if not self.is_cuda:
            return max(0.0, (time.perf_counter() - self._t0) * 1e3)
        self._end.record()
        torch.cuda.synchronize(self.device)
        return max(0.0, float(self._start.elapsed_time(self._end)))
