"""In-process tests of the building blocks: flattening, statistics, protocol parsing, the timing
loop's rotation and perturbation, compile failure reporting, atomic files."""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from cuda_agent_bridge import server, tasks, timing
from cuda_agent_bridge.errors import BridgeError, one_line
from cuda_agent_bridge.files import load_tensors, save_tensors
from cuda_agent_bridge.tasks import TaskStore, arg_names, flatten_outputs
from support import ELEMENTWISE, write_task


def test_flatten_depth_first() -> None:
    a, b, c, d = (torch.full((1,), float(i)) for i in range(4))
    assert flatten_outputs((a, [b, (c,)], d)) == [a, b, c, d]
    assert flatten_outputs(a) == [a]
    with pytest.raises(BridgeError) as err:
        flatten_outputs([a, [b, 3]])
    assert err.value.code == "task.bad_output" and "output [1][1] is an int" in err.value.message


def test_one_line() -> None:
    assert one_line("a\n  b\tc\n") == "a b c"
    assert len(one_line("x" * 5000)) == 800 and one_line("x" * 5000).endswith("...")


def test_arg_names() -> None:
    class Plain(nn.Module):
        def forward(self, x: torch.Tensor, y: float) -> torch.Tensor:
            return x * y

    class Star(nn.Module):
        def forward(self, x: torch.Tensor, *extra: torch.Tensor) -> torch.Tensor:
            return x

    assert arg_names(Plain(), 2) == ["x", "y"]
    assert arg_names(Star(), 3) == ["x", "extra.0", "extra.1"]
    assert arg_names(Plain(), 3)[2] == "arg2"


def test_median_rse() -> None:
    samples = [1.0, 2.0, 3.0, 4.0, 10.0]
    want = 1.2533 * statistics.stdev(samples) / math.sqrt(5) / 3.0
    assert timing.median_rse(samples) == pytest.approx(want)
    assert timing.median_rse([1.0]) == math.inf
    stats = timing._Stats()
    for s in samples:
        stats.add(s)
    assert stats.rse() == pytest.approx(want)


def test_protocol_from_json() -> None:
    assert timing.Protocol.from_json({}) == timing.Protocol()
    p = timing.Protocol.from_json({"min_samples": 4, "target_rse": 0.01, "budget_s": 1,
                                   "unknown": "ignored"})
    assert (p.min_samples, p.target_rse, p.budget_s) == (4, 0.01, 1)
    bad: object
    for bad in ({"version": 2}, {"min_samples": True}, {"min_samples": 1.5},
                {"budget_s": -1}, {"min_samples": 20, "max_samples": 10}, []):
        with pytest.raises(ValueError):
            timing.Protocol.from_json(bad)


def test_run_protocol_rotates_and_perturbs() -> None:
    sets: list[list[Any]] = [
        [torch.ones(4), torch.arange(3), 2.0],
        [torch.full((4,), 2.0), torch.arange(3), 2.0],
    ]
    seen: list[tuple[int, float]] = []

    def call(args: list[object]) -> object:
        x = args[0]
        assert isinstance(x, torch.Tensor)
        seen.append((id(args), float(x[0])))
        return x * 2

    proto = timing.Protocol(warmup_min_calls=4, warmup_min_ms=0, min_samples=5, max_samples=20,
                            target_rse=0.0, l2_flush_factor=0)
    report = timing.run_protocol(call, sets, proto, timing.Clock(torch.device("cpu")), "s")
    assert report["samples"] == 20 and report["budget_exhausted"] is True
    assert report["warmup_calls"] == 4 and len(seen) == 24
    assert [i for i, _ in seen] == [id(sets[k % 2]) for k in range(24)]  # rotation
    timed = [v for _, v in seen[4:]]
    assert len(set(timed)) == len(timed)  # every timed call saw new values
    for v, base in zip(timed, [1.0, 2.0] * 10, strict=True):
        assert abs(v / base - 1) < 0.02  # small multiplicative perturbations
    assert torch.equal(sets[0][1], torch.arange(3)) and sets[0][2] == 2.0  # ints, numbers kept
    assert not torch.equal(sets[0][0], torch.ones(4))


def test_run_protocol_stops_on_target_rse() -> None:
    proto = timing.Protocol(warmup_min_calls=1, warmup_min_ms=0, min_samples=6,
                            target_rse=1e9, l2_flush_factor=0)
    report = timing.run_protocol(lambda a: time.sleep(1e-4), [[torch.ones(1)]], proto,
                                 timing.Clock(torch.device("cpu")), "s")
    assert report["samples"] == 6 and report["budget_exhausted"] is False


def test_compile_failure_is_reported_and_eager_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_compile(model: nn.Module) -> object:
        raise RuntimeError("no compiler\nsecond line")

    monkeypatch.setattr(torch, "compile", broken_compile)
    task = write_task(tmp_path, "t", ELEMENTWISE)
    ctx = server.Context(TaskStore(torch.device("cpu")), timing.Clock(torch.device("cpu")))
    req = {"op": "time", "task_dir": str(task), "model_seed": 0, "seeds": [1],
           "modes": ["eager", "compile"],
           "protocol": {"min_samples": 3, "max_samples": 5, "l2_flush_factor": 0}}
    result = server.op_time(ctx, req)
    assert result["eager"]["ok"] is True  # type: ignore[index]
    assert result["compile"] == {
        "ok": False,
        "code": "baseline.compile_failed",
        "message": "torch.compile(Model) failed: RuntimeError: no compiler second line",
    }
    calls = 0

    def counting_compile(model: nn.Module) -> object:
        nonlocal calls
        calls += 1
        raise RuntimeError("again")

    monkeypatch.setattr(torch, "compile", counting_compile)
    again = server.op_time(ctx, dict(req, modes=["compile"]))
    assert calls == 0 and again["compile"] == result["compile"]  # the failure is remembered


def test_save_tensors_atomic(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "x.safetensors"
    base = torch.arange(12.0).reshape(3, 4)
    save_tensors(str(path), "args", [base.t(), base[0], torch.tensor(True)], {"kind": "inputs"})
    got = load_tensors(str(path), "args")
    assert torch.equal(got[0], base.t()) and got[0].is_contiguous()
    assert torch.equal(got[1], base[0]) and got[2].dtype == torch.bool
    save_tensors(str(path), "args", [base], {})  # overwrite
    assert len(load_tensors(str(path), "args")) == 1
    (tmp_path / "dir.safetensors").mkdir()
    with pytest.raises(OSError):
        save_tensors(str(tmp_path / "dir.safetensors"), "args", [base], {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.safetensors", "sub"]
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["x.safetensors"]


def test_unexpected_exception_is_bridge_internal(monkeypatch: pytest.MonkeyPatch) -> None:
    def explode(ctx: server.Context, req: dict[str, Any]) -> dict[str, object]:
        return {"x": 1 // 0}

    monkeypatch.setitem(server.OPS, "describe", explode)
    ctx = server.Context(TaskStore(torch.device("cpu")), timing.Clock(torch.device("cpu")))
    answer, stop = server.handle(ctx, b'{"id": 4, "op": "describe"}')
    assert not stop
    assert answer == {
        "id": 4,
        "ok": False,
        "error": {
            "code": "bridge.internal",
            "message": "ZeroDivisionError: integer division or modulo by zero",
        },
    }
    answer, stop = server.handle(ctx, b'{"id": "s", "op": "shutdown"}')
    assert stop and answer == {"id": "s", "ok": True, "result": {}}


def test_saved_tensors_are_readable_by_other_uids(tmp_path) -> None:
    """The sandboxed worker runs as another uid (65534 under root): files must be 0644 even
    with a strict umask (mkstemp alone would leave 0600)."""
    import stat

    from cuda_agent_bridge.files import save_tensors

    old = os.umask(0o077)
    try:
        path = tmp_path / "params_0.safetensors"
        save_tensors(str(path), "params", [torch.zeros(3)], {})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_near_duplicate_moves_few_float_elements_far() -> None:
    from cuda_agent_bridge.tasks import Inputs

    x = torch.randn(64, 1024)
    idx = torch.arange(10)
    base = Inputs(files=[x, idx, torch.tensor(0.5, dtype=torch.float64)],
                  call=[x.clone(), idx.clone(), 0.5], scalar=[False, False, True])
    near = tasks.near_duplicate(base, seed=7)
    changed = (near.files[0] != x).nonzero()
    assert 1 <= len(changed) <= tasks.NEAR_MAX_CHANGES
    assert len(changed) <= x.numel() // 4096 + 1
    moved = (near.files[0] - x).abs().max()
    assert moved > 3 * x.abs().mean()  # far enough to change the rows it feeds
    assert torch.equal(near.files[1], idx) and near.files[2] is base.files[2]
    assert torch.equal(near.call[0], near.files[0]) and near.call[2] == 0.5
    assert torch.equal(tasks.near_duplicate(base, seed=7).files[0], near.files[0])
    assert not torch.equal(tasks.near_duplicate(base, seed=8).files[0], near.files[0])
    assert torch.equal(base.files[0], x)  # the original set is untouched


@pytest.mark.parametrize("chunk", [2, 1 << 26])
def test_compare_stats_follows_the_c_rule(chunk: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """server.compare_stats (device data) counts what src/eval/compare.c counts: NaN only
    matches NaN, an infinity only itself, finite pairs by allclose; errors over finite pairs."""
    monkeypatch.setattr(server, "CHECK_CHUNK", chunk)
    nan, inf = float("nan"), float("inf")
    out = torch.tensor([1.0, nan, inf, 2.0, 5.0, nan, -inf])
    ref = torch.tensor([1.0, nan, inf, 2.5, 5.0, 3.0, inf])
    got = server.compare_stats(out, ref, atol=0.1, rtol=0.1)
    assert got["numel"] == 7 and got["mismatches"] == 3 and got["nan_unwritten"] == 1, got
    assert got["first_index"] == 3 and got["first_out"] == 2.0 and got["first_ref"] == 2.5
    assert got["max_abs_err"] == pytest.approx(0.5) and got["max_rel_err"] == pytest.approx(0.2)
    same = server.compare_stats(ref.clone(), ref, atol=0.0, rtol=0.0)
    assert same["mismatches"] == 0 and same["first_index"] is None and same["max_abs_err"] == 0
    unwritten = server.compare_stats(torch.full((5,), nan), torch.ones(5), 1e-5, 1e-5)
    assert unwritten["nan_unwritten"] == 5 and unwritten["first_out"] == "nan", unwritten
    ints = server.compare_stats(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 4]), 0.0, 0.0)
    assert ints["mismatches"] == 1 and ints["first_index"] == 2, ints
