"""The shared timing protocol (version 1, docs/protocol.md) applied to the bridge's baselines.

Contract: ``run_protocol(call, sets, protocol, clock, rng_seed)`` times ``call(args)`` over the
input sets ``sets`` (rotated) and returns the protocol's report: ``median_ms``,
``event_median_ms``, ``host_median_ms``, ``overhead_ms``, ``rse``, ``samples``, ``samples_ms``,
``warmup_calls``, ``budget_exhausted``, ``l2_flush_bytes`` (plus ``ok`` and ``method``).

Per call (warm-up calls too), untimed first: rotate to the next set, multiply its
floating-point tensors in place by ``1 + perturb_scale * u`` (u uniform in [-1, 1], never 0, one
draw per call from a ``random.Random(rng_seed)``), flush L2 by reading a buffer of
``l2_flush_factor`` times its size, synchronize. Then on CUDA: CUDA events on the current stream
plus the host clock around the call and ``torch.cuda.synchronize()``; the sample is
max(event - event_overhead, host - overhead), the overheads being the medians of a tiny kernel
launch measured the same way, calibrated before warm-up. On the CPU: host time only, the
"flush" reads a 64 MiB buffer. Differences from the worker: the model allocates fresh outputs on every call, so
there is nothing to re-poison, and there are no checked calls (those are the worker's). Every
caller runs with TF32 off (``tasks.disable_tf32``) and otherwise torch's default settings.
"""

from __future__ import annotations

import bisect
import math
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial

import torch

CPU_FLUSH_BYTES = 64 << 20
DEFAULT_L2_BYTES = 64 << 20  # when torch does not report the L2 size
CALIBRATION_CALLS = 50
RSE_FACTOR = 1.2533  # sqrt(pi/2): standard error of the median of a normal sample
_INT_FIELDS = frozenset({"version", "warmup_min_calls", "min_samples", "max_samples", "checks"})


@dataclass(frozen=True)
class Protocol:
    """The timing protocol object; missing keys take these defaults."""

    version: int = 1
    warmup_min_calls: int = 3
    warmup_min_ms: float = 25.0
    min_samples: int = 10
    max_samples: int = 2000
    target_rse: float = 0.005
    budget_s: float = 2.0
    l2_flush_factor: float = 2.0
    perturb_scale: float = 0.0009765625
    checks: int = 2

    @classmethod
    def from_json(cls, obj: object) -> Protocol:
        """Validates a protocol object; raises ValueError with a one-line reason."""
        if not isinstance(obj, dict):
            raise ValueError("protocol must be a JSON object")
        values: dict[str, float] = {}
        for f in fields(cls):
            if f.name not in obj:
                continue
            v = obj[f.name]
            is_int = isinstance(v, int) and not isinstance(v, bool)
            ok = is_int if f.name in _INT_FIELDS else is_int or isinstance(v, float)
            if not ok or v < 0 or not math.isfinite(v):
                kind = "integer" if f.name in _INT_FIELDS else "number"
                raise ValueError(f"protocol.{f.name} must be a non-negative {kind}")
            values[f.name] = v
        proto = cls(**values)  # type: ignore[arg-type]
        if proto.version != 1:
            raise ValueError(f"protocol.version {proto.version} is not supported (only 1)")
        if proto.min_samples < 1 or proto.max_samples < proto.min_samples:
            raise ValueError("protocol needs 1 <= min_samples <= max_samples")
        return proto


def median_rse(samples: Sequence[float]) -> float:
    """1.2533 * stdev / sqrt(n) / median; inf when undefined (n < 2 or median <= 0)."""
    n = len(samples)
    med = statistics.median(samples) if n else 0.0
    if n < 2 or med <= 0:
        return math.inf
    return RSE_FACTOR * statistics.stdev(samples) / math.sqrt(n) / med


class _Stats:
    """Running median (sorted list) and sample stdev (Welford) for the stopping rule."""

    def __init__(self) -> None:
        self.sorted: list[float] = []
        self.mean = 0.0
        self.m2 = 0.0

    def add(self, x: float) -> None:
        bisect.insort(self.sorted, x)
        n = len(self.sorted)
        delta = x - self.mean
        self.mean += delta / n
        self.m2 += delta * (x - self.mean)

    def rse(self) -> float:
        n = len(self.sorted)
        if n < 2:
            return math.inf
        mid = n // 2
        med = self.sorted[mid] if n % 2 else (self.sorted[mid - 1] + self.sorted[mid]) / 2
        if med <= 0:
            return math.inf
        return RSE_FACTOR * math.sqrt(self.m2 / (n - 1)) / math.sqrt(n) / med


class Clock:
    """Synchronizes, flushes and times calls on one device (CUDA events + host, or host only)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.l2_bytes = 0
        if self.is_cuda:
            props = torch.cuda.get_device_properties(device)
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0)) or DEFAULT_L2_BYTES
        self._flush_buffer: torch.Tensor | None = None

    def flush_bytes(self, factor: float) -> int:
        """Bytes written per flush: factor * L2 on CUDA, 64 MiB on the CPU, 0 if factor is 0."""
        if factor <= 0:
            return 0
        return int(factor * self.l2_bytes) if self.is_cuda else CPU_FLUSH_BYTES

    def flush(self, nbytes: int) -> None:
        """Empties the cache of earlier data by reading a buffer of nbytes (written once).

        Reading, not writing: dirty lines left by the previous call and the perturbation are
        written back during the flush, and the cache is left holding clean lines, so the timed
        call pays for no one else's write-back (the worker does the same for candidates).
        """
        if nbytes <= 0:
            return
        nbytes -= nbytes % 8
        if self._flush_buffer is None or self._flush_buffer.numel() != nbytes // 8:
            self._flush_buffer = None
            self._flush_buffer = torch.empty(nbytes // 8, dtype=torch.int64, device=self.device)
            self._flush_buffer.fill_(0x5A5A5A5A)
        self._flush_buffer.sum()

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def calibrate(self) -> tuple[float, float]:
        """(host, event) overheads in ms: medians of a tiny launch measured like a call.

        Host: launch plus synchronize (CUDA) or an empty call (CPU). Event: the time between the
        start and end events around the tiny launch (0 on the CPU). Both are subtracted from
        every sample, as the worker does for candidates.
        """
        tiny = torch.zeros(1, device=self.device)

        def launch() -> None:
            if self.is_cuda:
                tiny.add_(1)

        hosts: list[float] = []
        events: list[float] = []
        for i in range(CALIBRATION_CALLS + 5):
            self.sync()
            event, host = self.measure(launch)
            if i >= 5:
                hosts.append(host)
                events.append(event or 0.0)
        return statistics.median(hosts), statistics.median(events)

    def measure(self, fn: Callable[[], object]) -> tuple[float | None, float]:
        """(event ms or None on the CPU, host ms) of one call of fn, device synchronized."""
        if not self.is_cuda:
            t0 = time.perf_counter()
            fn()
            return None, (time.perf_counter() - t0) * 1e3
        start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        start.record()
        t0 = time.perf_counter()
        fn()
        end.record()
        torch.cuda.synchronize(self.device)
        host = (time.perf_counter() - t0) * 1e3
        return start.elapsed_time(end), host


def _perturbable(args: Sequence[object]) -> list[torch.Tensor]:
    return [a for a in args if isinstance(a, torch.Tensor) and a.is_floating_point()]


def run_protocol(
    call: Callable[[list[object]], object],
    sets: Sequence[list[object]],
    protocol: Protocol,
    clock: Clock,
    rng_seed: str,
) -> dict[str, object]:
    """Times call(args) over the rotated input sets; returns the protocol's report."""
    if not sets:
        raise ValueError("run_protocol needs at least one input set")
    rng = random.Random(rng_seed)
    floats = [_perturbable(s) for s in sets]
    flush_bytes = clock.flush_bytes(protocol.l2_flush_factor)
    overhead, event_overhead = clock.calibrate()
    turn = 0

    def prepare(index: int) -> None:
        """Untimed, before every call (warm-up too): perturb floats, flush, synchronize."""
        if protocol.perturb_scale > 0:
            u = 0.0
            while u == 0.0:
                u = rng.uniform(-1.0, 1.0)
            factor = 1.0 + protocol.perturb_scale * u
            for t in floats[index]:
                t.mul_(factor)
        clock.flush(flush_bytes)
        clock.sync()

    warmup_calls = 0
    start = time.perf_counter()
    while (
        warmup_calls < protocol.warmup_min_calls
        or (time.perf_counter() - start) * 1e3 < protocol.warmup_min_ms
    ):
        prepare(turn % len(sets))
        call(sets[turn % len(sets)])
        clock.sync()
        turn += 1
        warmup_calls += 1

    samples: list[float] = []
    events: list[float] = []
    hosts: list[float] = []
    stats = _Stats()
    exhausted = False
    loop_start = time.perf_counter()
    while True:
        index = turn % len(sets)
        turn += 1
        prepare(index)
        event_raw, host_raw = clock.measure(partial(call, sets[index]))
        event = None if event_raw is None else max(0.0, event_raw - event_overhead)
        host = max(0.0, host_raw - overhead)
        sample = max(event if event is not None else 0.0, host)
        samples.append(sample)
        hosts.append(host)
        if event is not None:
            events.append(event)
        stats.add(sample)
        n = len(samples)
        if n >= protocol.min_samples and stats.rse() < protocol.target_rse:
            break
        if n >= protocol.max_samples or time.perf_counter() - loop_start >= protocol.budget_s:
            exhausted = True
            break

    rse = median_rse(samples)
    return {
        "ok": True,
        "method": "cuda_event+host" if clock.is_cuda else "host",
        "median_ms": statistics.median(samples),
        "event_median_ms": statistics.median(events) if events else None,
        "host_median_ms": statistics.median(hosts),
        "overhead_ms": overhead,
        "event_overhead_ms": event_overhead if clock.is_cuda else None,
        "rse": rse if math.isfinite(rse) else None,
        "samples": len(samples),
        "samples_ms": samples,
        "warmup_calls": warmup_calls,
        "budget_exhausted": exhausted,
        "l2_flush_bytes": flush_bytes,
    }
