"""The bridge and the runner on a GPU (skipped without one): CUDA virtual-memory slots exported
as descriptors and mapped by three processes (the bridge, this test as the supervisor, the
runner), calls timed with CUDA events, references checked on the device, the baselines' calls,
and a CUDA fault in a candidate. The candidates are Triton kernels (no compiler for C++)."""

from __future__ import annotations

import json
import statistics
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from support import Bridge, Runner, TestSlots, relu_scale_bias_task, write_task

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TASK = relu_scale_bias_task(4096, 1024)
TRITON = '''
import torch
import triton
import triton.language as tl
from torch import nn


@triton.jit
def relu_scale_bias(x_ptr, b_ptr, y_ptr, n, cols, scale, SHIFT: tl.constexpr,
                    BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    b = tl.load(b_ptr + offs % cols, mask=m)
    tl.store(y_ptr + offs + SHIFT, tl.maximum(x, 0.0) * scale + b, mask=m)


def launch(x, b, y, scale):
    n = x.numel()
    relu_scale_bias[(triton.cdiv(n, 1024),)](x, b, y, n, b.numel(), scale, SHIFT=SHIFT_BY,
                                             BLOCK=1024)


# compiled at import, outside forward()
_x = torch.ones(4096, 1024, device="cuda")
_b = torch.ones(1024, device="cuda")
relu_scale_bias.warmup(_x, _b, torch.empty_like(_x), _x.numel(), 1024, 2.0, SHIFT=SHIFT_BY,
                       BLOCK=1024, grid=(1,))
torch.cuda.synchronize()


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        y = torch.empty_like(x)
        launch(x, self.bias, y, scale)
        return y
'''
HONEST = "SHIFT_BY = 0\n" + TRITON
FAULTY = "SHIFT_BY = 1 << 36\n" + TRITON  # stores far out of bounds: an illegal address


@pytest.fixture(scope="module")
def gpu_bridge() -> Any:
    b = Bridge("cuda")
    yield b
    b.close()


def plan(root: Path, task: Path, slots: TestSlots, source: str) -> Path:
    path = root / "candidate.py"
    path.write_text(textwrap.dedent(source))
    spec = json.loads((root / "spec.json").read_text())
    obj = {"version": 2, "device": 0, "spec": spec, "slots": slots.plan_slots(),
           "candidate": {"format": "kernelbench", "path": str(path), "task_dir": str(task)}}
    (root / "plan.json").write_text(json.dumps(obj))
    return root / "plan.json"


def test_gpu_slots_calls_and_checks(tmp_path: Path, gpu_bridge: Bridge) -> None:
    pytest.importorskip("triton")
    task = write_task(tmp_path, "relu", TASK)
    spec = gpu_bridge.ok("describe", task_dir=str(task), seed=1)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    slots = gpu_bridge.slots_for(spec, 3)
    try:
        assert gpu_bridge.ok("fill", task_dir=str(task), model_seed=3, params=True,
                             sets=[{"input": r, "seed": 10 + r} for r in range(3)])["scalars"] \
            == [[[1, 2.0]]] * 3
        run = Runner(plan(tmp_path, task, slots, HONEST), pass_fds=slots.fds())
        try:
            empties = run.start(calibrate=24, timeout=300)
            calls = []
            for i in range(30):
                r = i % 3
                slots.poison()
                torch.cuda.synchronize()
                ev = run.command("call", input=r, scalars=[[1, 2.0]])
                assert ev["event"] == "called", (ev, run.stderr())
                calls.append(ev["ev_ms"])
                if i % 10 == 0:
                    (stats,) = gpu_bridge.ok("check", task_dir=str(task), model_seed=3, input=r,
                                             scalars=[[1, 2.0]], atol=1e-5,
                                             rtol=1e-5)["outputs"]
                    assert stats["mismatches"] == 0 and stats["numel"] == 4096 * 1024, stats
            ev0, med = statistics.median(empties[4:]), statistics.median(calls)
            print(f"empty {ev0:.4f} ms, call {med:.4f} ms, call - empty {med - ev0:.4f} ms")
            assert 0 < ev0 < med < 5, (empties, calls)
            # A wrong answer is seen: the bridge checks against another scale
            (stats,) = gpu_bridge.ok("check", task_dir=str(task), model_seed=3, input=2,
                                     scalars=[[1, 3.0]], atol=1e-5, rtol=1e-5)["outputs"]
            assert stats["mismatches"] > 0
            assert run.quit() == 0
        finally:
            run.close()
        # The baselines on the same slots
        empties = [gpu_bridge.ok("bench_empty", input=0)["ev_ms"] for _ in range(10)]
        opened = gpu_bridge.ok("bench_open", task_dir=str(task), model_seed=3, mode="eager")
        assert opened["settings"]["torch"] == torch.__version__
        eager = [gpu_bridge.ok("bench_call", input=r % 3, scalars=[[1, 2.0]])["ev_ms"]
                 for r in range(10)]
        opened = gpu_bridge.ok("bench_open", timeout=600, task_dir=str(task), model_seed=3,
                               mode="compile")
        assert opened["compile_seconds"] > 0
        assert opened["settings"]["compile_mode"] == "default"
        assert opened["settings"]["inductor"]["max_autotune"] is False
        compiled = [gpu_bridge.ok("bench_call", input=r % 3, scalars=[[1, 2.0]])["ev_ms"]
                    for r in range(10)]
        print(f"bench: empty {statistics.median(empties):.4f} ms, eager "
              f"{statistics.median(eager):.4f} ms, compile {statistics.median(compiled):.4f} ms")
        assert 0 < statistics.median(empties) < statistics.median(eager)
        assert gpu_bridge.ok("bench_close") == {}
    finally:
        gpu_bridge.ok("slots_close")
        slots.close()


def test_gpu_fault_is_answered_then_the_process_exits(tmp_path: Path, gpu_bridge: Bridge) -> None:
    pytest.importorskip("triton")
    task = write_task(tmp_path, "relu", TASK)
    spec = gpu_bridge.ok("describe", task_dir=str(task), seed=1)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    slots = gpu_bridge.slots_for(spec, 1)
    try:
        gpu_bridge.ok("fill", task_dir=str(task), model_seed=3, params=True,
                      sets=[{"input": 0, "seed": 1}])
        run = Runner(plan(tmp_path, task, slots, FAULTY), pass_fds=slots.fds())
        try:
            run.start(timeout=300)
            ev = run.command("call", input=0, scalars=[[1, 2.0]])
            assert ev["event"] == "failed" and ev["code"].startswith("fault."), (ev, run.stderr())
            assert ev["code"] == "fault.illegal_address", ev
            assert run.finish() == ([], 1)
        finally:
            run.close()
        # The bridge's context is untouched by the candidate's fault
        (stats,) = gpu_bridge.ok("check", task_dir=str(task), model_seed=3, input=0,
                                 scalars=[[1, 2.0]], atol=1e-5, rtol=1e-5)["outputs"]
        assert stats["numel"] == 4096 * 1024
    finally:
        gpu_bridge.ok("slots_close")
        slots.close()
