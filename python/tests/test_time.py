"""time: the shared timing protocol on the CPU, eager and torch.compile."""

from __future__ import annotations

import math
from pathlib import Path

from support import ELEMENTWISE, LINEAR_SCALE, Bridge, write_task

FAST = {
    "version": 1, "warmup_min_calls": 3, "warmup_min_ms": 5, "min_samples": 10,
    "max_samples": 400, "target_rse": 0.05, "budget_s": 1.0, "l2_flush_factor": 2.0,
    "perturb_scale": 0.0009765625, "checks": 2,
}


def check_report(report: dict[str, object], protocol: dict[str, float]) -> None:
    assert report["ok"] is True and report["method"] == "host"
    samples = report["samples"]
    assert isinstance(samples, int)
    assert protocol["min_samples"] <= samples <= protocol["max_samples"]
    samples_ms = report["samples_ms"]
    assert isinstance(samples_ms, list) and len(samples_ms) == samples
    assert all(isinstance(s, float) and s >= 0 for s in samples_ms)
    median = report["median_ms"]
    assert isinstance(median, float) and 0 < median < 1000
    assert sorted(samples_ms)[(samples - 1) // 2] <= median <= sorted(samples_ms)[samples // 2]
    assert report["host_median_ms"] == median and report["event_median_ms"] is None
    overhead = report["overhead_ms"]
    assert isinstance(overhead, float) and 0 <= overhead < 1
    rse = report["rse"]
    assert isinstance(rse, float) and math.isfinite(rse) and rse >= 0
    if not report["budget_exhausted"]:
        assert rse < protocol["target_rse"]
    assert isinstance(report["warmup_calls"], int) and report["warmup_calls"] >= 3
    assert report["l2_flush_bytes"] == 64 << 20


def test_eager(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "linear", LINEAR_SCALE)
    result = bridge.ok("time", task_dir=str(task), model_seed=1, seeds=[1, 2, 3],
                       modes=["eager"], protocol=FAST)
    assert list(result) == ["eager"]
    check_report(result["eager"], FAST)


def test_max_samples_stops_and_reports_exhausted(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "relu", ELEMENTWISE)
    protocol = dict(FAST, target_rse=0.0, min_samples=5, max_samples=12, l2_flush_factor=0)
    result = bridge.ok("time", task_dir=str(task), model_seed=1, seeds=[1], modes=["eager"],
                       protocol=protocol)
    report = result["eager"]
    assert report["samples"] == 12 and report["budget_exhausted"] is True
    assert report["l2_flush_bytes"] == 0


def test_eager_and_compile(bridge: Bridge, tmp_path: Path) -> None:
    # torch.compile needs a C compiler on the CPU and takes 10-30 s the first time: tiny task,
    # generous timeout.
    task = write_task(tmp_path, "relu", ELEMENTWISE)
    result = bridge.ok("time", timeout=300, task_dir=str(task), model_seed=1, seeds=[1, 2],
                       modes=["eager", "compile"], protocol=FAST)
    check_report(result["eager"], FAST)
    compiled = result["compile"]
    assert compiled["ok"] is True, compiled
    check_report(compiled, FAST)
    assert isinstance(compiled["compile_seconds"], float) and compiled["compile_seconds"] > 0


def test_preload_starts_once_and_only_when_asked(tmp_path: Path) -> None:
    # A fresh bridge: the import of torch.compile's machinery is not started at start-up (it
    # would slow describe and reference while it runs); the first preload starts it, later ones
    # say it was started already, and timing with compile still works after it.
    b = Bridge()
    try:
        assert b.ok("preload") == {"started": True}
        assert b.ok("preload") == {"started": False}
        task = write_task(tmp_path, "relu", ELEMENTWISE)
        result = b.ok("time", timeout=300, task_dir=str(task), model_seed=1, seeds=[1],
                      modes=["eager"], protocol=FAST)
        check_report(result["eager"], FAST)
    finally:
        b.close()
