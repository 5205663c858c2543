"""python -m cuda_agent_bridge.runner: a PyTorch-format candidate's process, driven on the CPU
(torch_device "cpu", memfd slots) the way the supervisor drives it: the test makes the slots,
writes the plan, fills inputs and parameters itself (or has the bridge fill them), sends one
command at a time and reads one event per command."""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from support import Bridge, Runner, TestSlots, make_slots, relu_scale_bias_task, write_task

TASK = relu_scale_bias_task(8, 32)
SPEC: dict[str, Any] = {
    "args": [{"index": 0, "name": "x", "dtype": "float32", "shape": [8, 32], "device": "cuda"},
             {"index": 1, "name": "scale", "dtype": "float64", "shape": [], "device": "cpu"}],
    "params": [{"index": 0, "name": "bias", "dtype": "float32", "shape": [32],
                "device": "cuda"}],
    "outputs": [{"index": 0, "name": "output", "dtype": "float32", "shape": [8, 32],
                 "device": "cuda"}],
}
# A "kernel" in pure Python over the tensors' memory: only allocation and metadata from torch.
PURE_KERNEL = '''
import ctypes

def relu_scale_bias(x, scale, bias):
    out = torch.empty_like(x)
    n, total = bias.numel(), x.numel()
    xs = (ctypes.c_float * total).from_address(x.data_ptr())
    bs = (ctypes.c_float * n).from_address(bias.data_ptr())
    ys = (ctypes.c_float * total).from_address(out.data_ptr())
    for i in range(total):
        v = xs[i]
        ys[i] = (v if v > 0.0 else 0.0) * scale + bs[i % n]
    return out
'''
HEAD = '''
import torch
from torch import nn
'''
MODEL_NEW = '''
class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
{body}
'''


def candidate(body: str, head: str = "", kernel: str = PURE_KERNEL) -> str:
    return HEAD + head + kernel + MODEL_NEW.format(body=textwrap.indent(textwrap.dedent(body),
                                                                        " " * 8))


PURE = candidate("return relu_scale_bias(x.contiguous(), scale, self.bias)")
WRONG_VALUES = candidate("return x.clone()")
# One candidate, one failure per call (count from 1), each answered on its own.
MISBEHAVING = candidate("""
CALLS[0] += 1
k = CALLS[0]
if k == 1:
    return x[:4].clone()                      # wrong shape
if k == 2:
    return x.clone(), x.clone()               # two outputs for one
if k == 3:
    return x.double()                         # wrong dtype
if k == 4:
    return None                               # no tensor
if k == 5:
    raise ValueError("bad tile size 7")       # raises
if k == 6:
    import sys
    sys.exit(3)                               # exits (as an exception)
return relu_scale_bias(x.contiguous(), scale, self.bias)
""", head="CALLS = [0]\n")
# Honest twice, then torch compute (refused), then torch compute with the refusal swallowed.
LATE_CHEAT = candidate("""
CALLS[0] += 1
if CALLS[0] == 3:
    return torch.nn.functional.relu(x) * scale + self.bias
if CALLS[0] == 4:
    try:
        return torch.relu(x) * scale + self.bias
    except Exception:
        return torch.empty_like(x)
return relu_scale_bias(x.contiguous(), scale, self.bias)
""", head="CALLS = [0]\n")
NOISY = candidate("""
print('{"event": "called", "ev_ms": 0.0}')
os.write(1, b'{"event": "done"}\\n')
assert sys.stdin.read() == "" and os.read(0, 64) == b""  # the commands are out of reach
return relu_scale_bias(x.contiguous(), scale, self.bias)
""", head="""
import os
import sys
print('{"event": "loaded", "has_setup": true, "has_teardown": false}')
os.write(1, b'{"event": "called", "ev_ms": 0.0}\\n')
""")
RENAMED = '''
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.offset = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        return x.clone()
'''


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_task(tmp_path_factory.mktemp("tasks"), "relu_scale_bias", TASK)


@pytest.fixture()
def slots() -> Any:
    s = make_slots(SPEC, 3)
    yield s
    s.close()


def write_plan(root: Path, task: Path, slots: TestSlots, source: str | None = None,
               spec: dict[str, Any] | None = None, **candidate_fields: Any) -> Path:
    cand: dict[str, Any] = {"format": "kernelbench", "task_dir": str(task),
                            "torch_device": "cpu"}
    if source is not None:
        path = root / "candidate.py"
        path.write_text(textwrap.dedent(source))
        cand["path"] = str(path)
    cand.update(candidate_fields)
    plan = {"version": 2, "device": 0, "spec": spec or SPEC, "slots": slots.plan_slots(),
            "candidate": cand}
    path = root / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def fill(slots: TestSlots, r: int, seed: int) -> torch.Tensor:
    """What the bridge's fill does for input slot r (here with a torch generator)."""
    x = torch.randn(8, 32, generator=torch.Generator().manual_seed(seed))
    slots.views(slots.inputs[r], [SPEC["args"][0]])[0].copy_(x)
    return x


def set_params(slots: TestSlots, seed: int) -> torch.Tensor:
    bias = torch.randn(32, generator=torch.Generator().manual_seed(seed))
    slots.views(slots.params, SPEC["params"])[0].copy_(bias)
    return bias


def output(slots: TestSlots) -> torch.Tensor:
    return slots.views(slots.outputs, SPEC["outputs"])[0]


def expected(x: torch.Tensor, scale: float, bias: torch.Tensor) -> torch.Tensor:
    return torch.relu(x) * scale + bias


def test_honest_candidate_answers_each_command_once(tmp_path: Path, task: Path,
                                                     slots: TestSlots) -> None:
    bias = set_params(slots, 1)
    xs = [fill(slots, r, 10 + r) for r in range(3)]
    run = Runner(write_plan(tmp_path, task, slots, PURE), pass_fds=slots.fds())
    try:
        device = run.event()
        assert device is not None and device["event"] == "device" and device["name"] == "cpu"
        assert run.quiet(0.5)  # nothing without a command
        for _ in range(4):  # calibration: before the candidate is loaded
            ev = run.command("empty", input=2)
            assert ev["event"] == "called" and isinstance(ev["ev_ms"], float), ev
            assert 0 <= ev["ev_ms"] < 1000
        assert output(slots).eq(0).all()  # the calibration's copies wrote the scratch (zeros)
        loaded = run.command("load")
        assert loaded == {"event": "loaded", "has_setup": True, "has_teardown": False,
                          "format": "kernelbench", "params": "paired"}, (loaded, run.stderr())
        assert run.command("setup") == {"event": "set_up"}
        for turn in range(6):
            r = turn % 3
            if turn == 4:  # the supervisor perturbs a set between calls
                slots.views(slots.inputs[r], [SPEC["args"][0]])[0].mul_(1.001)
                xs[r] = xs[r] * 1.001
            slots.poison()
            scale = 0.5 + turn
            ev = run.command("call", input=r, scalars=[[1, scale]])
            assert ev["event"] == "called" and ev["ev_ms"] > 0, (ev, run.stderr())
            torch.testing.assert_close(output(slots), expected(xs[r], scale, bias),
                                       rtol=1e-6, atol=1e-6)
            assert run.quiet(0.05)
        # New parameters take effect at the next setup only
        new_bias = set_params(slots, 2)
        run.command("call", input=0, scalars=[[1, 1.0]])
        torch.testing.assert_close(output(slots), expected(xs[0], 1.0, bias))
        assert run.command("setup") == {"event": "set_up"}
        run.command("call", input=0, scalars=[[1, 1.0]])
        torch.testing.assert_close(output(slots), expected(xs[0], 1.0, new_bias))
        profile = run.command("profile", input=0, scalars=[[1, 1.0]], calls=3)
        assert profile["event"] == "profile" and profile["ok"] is False
        assert profile["code"] == "worker.unsupported"
        audit = run.command("audit", input=0, scalars=[[1, 1.0]], phase="timed")
        assert audit["event"] == "failed" and audit["code"] == "worker.unsupported"
        assert run.command("empty", input=0)["event"] == "called"
        assert run.quit() == 0
    finally:
        run.close()


def test_runner_and_bridge_share_the_slots(tmp_path: Path, task: Path, bridge: Bridge) -> None:
    """The production data path: the bridge makes and fills the slots, the runner calls on
    them, the bridge checks the outputs against references from the inputs in the slots."""
    spec = bridge.ok("describe", task_dir=str(task), seed=1)
    plain = [{k: v for k, v in a.items() if k != "structure"} for a in spec["args"]]
    assert plain == SPEC["args"] and spec["outputs"] == SPEC["outputs"]
    slots = bridge.slots_for(spec, 3)
    try:
        filled = bridge.ok("fill", task_dir=str(task), model_seed=5, params=True,
                           sets=[{"input": r, "seed": 20 + r} for r in range(3)])
        assert filled["scalars"] == [[[1, 2.0]]] * 3

        def check(r: int) -> dict[str, Any]:
            out = bridge.ok("check", task_dir=str(task), model_seed=5, input=r,
                            scalars=[[1, 2.0]], atol=1e-5, rtol=1e-5)["outputs"]
            assert len(out) == 1
            return out[0]  # type: ignore[no-any-return]

        for source, correct in ((PURE, True), (WRONG_VALUES, False)):
            (tmp_path / ("good" if correct else "bad")).mkdir()
            root = tmp_path / ("good" if correct else "bad")
            run = Runner(write_plan(root, task, slots, source), pass_fds=slots.fds())
            try:
                run.start(calibrate=3)
                for r in (0, 1, 2, 1):
                    if r == 1:  # perturbed by the supervisor: the reference follows the slot
                        slots.views(slots.inputs[1], [SPEC["args"][0]])[0].mul_(1.0009765625)
                    slots.poison()
                    ev = run.command("call", input=r, scalars=[[1, 2.0]])
                    assert ev["event"] == "called", (ev, run.stderr())
                    got = check(r)
                    assert got["numel"] == 256
                    if correct:
                        assert got["mismatches"] == 0 and got["first_index"] is None, got
                    else:
                        assert got["mismatches"] > 0 and got["nan_unwritten"] == 0, got
                assert run.quit() == 0
            finally:
                run.close()
    finally:
        bridge.ok("slots_close")
        slots.close()


def test_torch_compute_is_refused_even_when_caught(tmp_path: Path, task: Path,
                                                   slots: TestSlots) -> None:
    set_params(slots, 1)
    fill(slots, 0, 3)
    run = Runner(write_plan(tmp_path, task, slots, LATE_CHEAT), pass_fds=slots.fds())
    try:
        run.start()
        for _ in range(2):
            assert run.command("call", input=0, scalars=[[1, 2.0]])["event"] == "called"
        refused = run.command("call", input=0, scalars=[[1, 2.0]])
        assert refused["event"] == "failed" and refused["code"] == "hack.torch_compute", refused
        assert "torch.nn.functional.relu" in refused["message"], refused
        swallowed = run.command("call", input=0, scalars=[[1, 2.0]])
        assert swallowed["event"] == "failed" and swallowed["code"] == "hack.torch_compute"
        assert "torch.relu" in swallowed["message"] and "caught" in swallowed["message"]
        # The refusal is around forward() only: the harness's own work goes on
        assert run.command("empty", input=0)["event"] == "called"
        assert run.command("call", input=0, scalars=[[1, 2.0]])["event"] == "called"
        assert run.quit() == 0
    finally:
        run.close()


def test_each_failed_call_is_answered_and_the_process_goes_on(
        tmp_path: Path, task: Path, slots: TestSlots) -> None:
    bias = set_params(slots, 1)
    x = fill(slots, 0, 3)
    run = Runner(write_plan(tmp_path, task, slots, MISBEHAVING), pass_fds=slots.fds())
    try:
        run.start()
        answers = [run.command("call", input=0, scalars=[[1, 2.0]]) for _ in range(7)]
        codes = [(a["event"], a.get("code")) for a in answers]
        assert codes == [("failed", "verify.mismatch")] * 3 + [
            ("failed", "abi.forward_failed")] * 3 + [("called", None)], answers
        assert "[4, 32]" in answers[0]["message"] and "[8, 32]" in answers[0]["message"]
        assert "returned 2 tensors" in answers[1]["message"]
        assert "float64" in answers[2]["message"]
        assert "ModelNew.forward() returned None" in answers[3]["message"], answers[3]
        assert "ValueError: bad tile size 7" in answers[4]["message"], answers[4]
        assert "SystemExit" in answers[5]["message"], answers[5]
        torch.testing.assert_close(output(slots), expected(x, 2.0, bias))
        assert run.quit() == 0
    finally:
        run.close()


def test_candidate_can_neither_forge_events_nor_read_commands(
        tmp_path: Path, task: Path, slots: TestSlots) -> None:
    set_params(slots, 1)
    fill(slots, 0, 3)
    run = Runner(write_plan(tmp_path, task, slots, NOISY), pass_fds=slots.fds())
    try:
        run.start()  # each answer parsed and checked: the prints at import went elsewhere
        for _ in range(3):
            ev = run.command("call", input=0, scalars=[[1, 2.0]])
            assert ev["event"] == "called" and ev["ev_ms"] > 0, (ev, run.stderr())
        assert run.quit() == 0
        err = run.stderr()
        assert '{"event": "done"}' in err and '"ev_ms": 0.0' in err  # on stderr
    finally:
        run.close()


def test_different_parameter_names_are_fatal_at_load(tmp_path: Path, task: Path,
                                                      slots: TestSlots) -> None:
    run = Runner(write_plan(tmp_path, task, slots, RENAMED), pass_fds=slots.fds())
    try:
        assert run.event()["event"] == "device"  # type: ignore[index]
        err = run.command("load")
        assert err["event"] == "error" and err["code"] == "candidate.params_mismatch", err
        assert "missing bias" in err["message"] and "unexpected offset" in err["message"]
        events, rc = run.finish()
        assert events == [] and rc == 1
    finally:
        run.close()


# KernelBench's convention: the parameter's name differs, and forward() computes with torch.
KB_RENAMED_TORCH = '''
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("table", torch.arange(4.0))   # ModelNew's own, before the weight
        self.offset = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        return torch.relu(x) * scale + self.offset + self.table.sum() * 0
'''
KB_WRONG_SHAPE = RENAMED.replace("torch.empty(n)", "torch.empty(n + 1)")
SUBCLASS_OUT = candidate("return relu_scale_bias(x.contiguous(), scale, "
                         "self.bias).as_subclass(Lazy)",
                         head="class Lazy(torch.Tensor):\n    pass\n")


def test_kernelbench_rules_match_parameters_by_order_and_allow_torch(
        tmp_path: Path, task: Path, slots: TestSlots) -> None:
    """Under the kernelbench rules a renamed parameter receives the reference's value by order
    and shape (ModelNew's own buffers keep theirs; ``loaded`` says ``paired``) and torch compute
    in forward() is allowed; a state_dict that pairs neither way is ``seeded`` there. Under the
    cuda-agent rules both files are refused at load."""
    bias = set_params(slots, 1)
    x = fill(slots, 0, 3)
    run = Runner(write_plan(tmp_path, task, slots, KB_RENAMED_TORCH, rules="kernelbench"),
                 pass_fds=slots.fds())
    try:
        assert run.event()["event"] == "device"  # type: ignore[index]
        loaded = run.command("load")
        assert loaded["event"] == "loaded" and loaded["params"] == "paired", loaded
        assert run.command("setup") == {"event": "set_up"}
        for scale in (1.0, 2.5):
            slots.poison()
            ev = run.command("call", input=0, scalars=[[1, scale]])
            assert ev["event"] == "called", (ev, run.stderr())
            torch.testing.assert_close(output(slots), expected(x, scale, bias))
        assert run.quit() == 0
    finally:
        run.close()
    for rules, source, answer, words in (
            ("cuda-agent", KB_RENAMED_TORCH, "candidate.params_mismatch", "missing bias"),
            ("cuda-agent", KB_WRONG_SHAPE, "candidate.params_mismatch", "missing bias"),
            ("kernelbench", KB_WRONG_SHAPE, "seeded", "")):
        root = tmp_path / f"{rules}-{answer}"
        root.mkdir(exist_ok=True)
        run = Runner(write_plan(root, task, slots, source, rules=rules), pass_fds=slots.fds())
        try:
            assert run.event()["event"] == "device"  # type: ignore[index]
            ev = run.command("load")
            if answer == "seeded":
                assert ev["event"] == "loaded" and ev["params"] == "seeded", ev
            else:
                assert ev["event"] == "error" and ev["code"] == answer, ev
                assert words in ev["message"], ev
        finally:
            run.close()


# KernelBench's parameter semantics (issue 46): a Conv1d, then an InstanceNorm1d that cancels
# the conv's bias and whose affine parameters start at ones and zeros (no random draws).
CONV_NORM = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 3)
        self.norm = nn.InstanceNorm1d(cout, affine=True)

    def forward(self, x):
        return self.norm(self.conv(x))

def get_inputs():
    return [torch.randn(4, 3, 16)]

def get_init_inputs():
    return [3, 8]
"""
CONV_NORM_HEAD = """
import torch
import torch.nn.functional as F
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
"""
# The shapes differ: the bias is dropped (the norm cancels it); the weight is drawn as Model's.
DROPPED_BIAS = CONV_NORM_HEAD + """
        self.conv = nn.Conv1d(cin, cout, 3, bias=False)
        self.norm = nn.InstanceNorm1d(cout, affine=True)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1  # its own state, changed by forward(): restored at each setup
        return self.norm(self.conv(x)) + (self.calls > 1).float() * 1000
"""
# The names differ: the norm's affine parameters are ModelNew's own, declared before the conv.
RENAMED_AFFINE = CONV_NORM_HEAD + """
        self.gamma = nn.Parameter(torch.ones(cout))
        self.beta = nn.Parameter(torch.zeros(cout))
        self.conv = nn.Conv1d(cin, cout, 3)

    def forward(self, x):
        return F.instance_norm(self.conv(x)) * self.gamma[:, None] + self.beta[:, None]
"""
# As RENAMED_AFFINE, but its own parameters are random draws made before the conv's: under the
# same seed its conv differs from Model's, so it is wrong, as KernelBench's harness finds it.
OTHER_DRAWS = RENAMED_AFFINE.replace("torch.ones(cout)", "1 + 0 * torch.randn(cout)")


def test_kernelbench_state_dicts_that_do_not_pair_keep_their_seeded_parameters(
        tmp_path: Path, bridge: Bridge) -> None:
    """Under the kernelbench rules a ModelNew whose state_dict pairs with Model's neither by name
    nor by order and shape (a dropped bias, renamed affine parameters) keeps what its
    construction under ``init_seed`` gave it (``loaded`` says ``seeded``; the params slot is
    not read), and is right against the bridge's reference under the same seed, unperturbed
    (``check`` with ``perturb`` false): KernelBench's semantics. Each setup restores the state
    of its construction. Under the cuda-agent rules both are ``candidate.params_mismatch``."""
    task = write_task(tmp_path, "conv_norm", CONV_NORM)
    train = {"module_mode": "train"}  # the kernelbench rules' mode, as the supervisor sends it
    spec = bridge.ok("describe", task_dir=str(task), seed=1, **train)
    slots = bridge.slots_for(spec, 2)
    init_seed = 11
    try:
        # the params slot holds Model's state under another seed, as the supervisor's trials do
        bridge.ok("fill", task_dir=str(task), model_seed=77, params=True,
                  sets=[{"input": r, "seed": 30 + r} for r in range(2)], **train)

        def mismatches(r: int, model_seed: int) -> int:
            (stats,) = bridge.ok("check", task_dir=str(task), model_seed=model_seed, input=r,
                                 scalars=[], atol=1e-4, rtol=1e-4, perturb=False,
                                 **train)["outputs"]
            return int(stats["mismatches"])

        for name, source, right in (("dropped", DROPPED_BIAS, True),
                                    ("renamed", RENAMED_AFFINE, True),
                                    ("other_draws", OTHER_DRAWS, False)):
            root = tmp_path / name
            root.mkdir()
            run = Runner(write_plan(root, task, slots, source, spec=spec, rules="kernelbench",
                                    init_seed=init_seed), pass_fds=slots.fds())
            try:
                assert run.event()["event"] == "device"  # type: ignore[index]
                loaded = run.command("load")
                assert loaded["event"] == "loaded" and loaded["params"] == "seeded", (
                    loaded, run.stderr())
                for r in (0, 1):
                    assert run.command("setup") == {"event": "set_up"}
                    slots.poison()
                    ev = run.command("call", input=r)
                    assert ev["event"] == "called", (ev, run.stderr())
                    if right:
                        assert mismatches(r, init_seed) == 0, name
                        assert mismatches(r, 77) > 0, name  # not the slot's parameters
                    else:
                        assert mismatches(r, init_seed) > 0, name
                assert run.quit() == 0
            finally:
                run.close()
        for source in (DROPPED_BIAS, RENAMED_AFFINE):
            root = tmp_path / "cuda-agent"
            root.mkdir(exist_ok=True)
            run = Runner(write_plan(root, task, slots, source, spec=spec, rules="cuda-agent"),
                         pass_fds=slots.fds())
            try:
                assert run.event()["event"] == "device"  # type: ignore[index]
                err = run.command("load")
                assert err["event"] == "error" and err["code"] == "candidate.params_mismatch", err
                assert "missing conv.bias" in err["message"] or "norm.weight" in err["message"]
            finally:
                run.close()
    finally:
        bridge.ok("slots_close")
        slots.close()


def test_tensor_subclass_outputs_are_tampering(tmp_path: Path, task: Path,
                                               slots: TestSlots) -> None:
    set_params(slots, 1)
    fill(slots, 0, 3)
    run = Runner(write_plan(tmp_path, task, slots, SUBCLASS_OUT), pass_fds=slots.fds())
    try:
        run.start()
        ev = run.command("call", input=0, scalars=[[1, 2.0]])
        assert ev["event"] == "failed" and ev["code"] == "hack.harness_tampering", ev
        assert "Lazy" in ev["message"] and "subclass" in ev["message"]
        assert run.quit() == 0
    finally:
        run.close()


# Its scale doubles in eval mode: the output says which mode ModelNew was put in at load.
MODE_SCALED = candidate("return relu_scale_bias(x.contiguous(), scale if self.training else "
                        "2 * scale, self.bias)")


def test_modelnew_runs_in_the_plans_module_mode(tmp_path: Path, task: Path,
                                                slots: TestSlots) -> None:
    """ModelNew is put in the plan's ``module_mode``, by default its rules' (eval under
    cuda-agent, as the published verification runs both models; training under kernelbench, as
    KernelBench's harness does): the mode the bridge builds the reference in."""
    bias = set_params(slots, 1)
    x = fill(slots, 0, 10)
    for name, fields, training in (
            ("default", {}, False),
            ("cuda-agent", {"rules": "cuda-agent"}, False),
            ("kernelbench", {"rules": "kernelbench"}, True),
            ("kernelbench-eval", {"rules": "kernelbench", "module_mode": "eval"}, False),
            ("cuda-agent-train", {"rules": "cuda-agent", "module_mode": "train"}, True)):
        root = tmp_path / name
        root.mkdir()
        run = Runner(write_plan(root, task, slots, MODE_SCALED, **fields), pass_fds=slots.fds())
        try:
            run.start()
            slots.poison()
            ev = run.command("call", input=0, scalars=[[1, 1.5]])
            assert ev["event"] == "called", (ev, run.stderr())
            torch.testing.assert_close(output(slots),
                                       expected(x, 1.5 if training else 3.0, bias))
            assert run.quit() == 0
        finally:
            run.close()
    run = Runner(write_plan(tmp_path, task, slots, PURE, module_mode="inference"),
                 pass_fds=slots.fds())
    try:
        events, rc = run.finish()
        assert rc != 0 and any(e.get("code") == "worker.bad_plan" and "module_mode" in
                               e["message"] for e in events), (events, run.stderr())
    finally:
        run.close()


def test_bad_rules_in_the_plan_are_a_bad_plan(tmp_path: Path, task: Path,
                                              slots: TestSlots) -> None:
    run = Runner(write_plan(tmp_path, task, slots, PURE, rules="lenient"), pass_fds=slots.fds())
    try:
        events, rc = run.finish()
        assert rc != 0 and any(e.get("code") == "worker.bad_plan" and "rules" in e["message"]
                               for e in events), (events, run.stderr())
    finally:
        run.close()


def test_bad_plan_and_missing_candidate(tmp_path: Path, task: Path, slots: TestSlots) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 2, "candidate": {"format": "onnx", "path": "x"}}))
    run = Runner(bad)
    try:
        events, rc = run.finish()
        assert rc == 1 and events == [{"event": "error", "code": "worker.bad_plan", "message":
                                       "plan: candidate.format must be one of kernelbench, "
                                       "workdir (got 'onnx')"}], events
    finally:
        run.close()
    run = Runner(write_plan(tmp_path, task, slots, path=str(tmp_path / "nope.py")),
                 pass_fds=slots.fds())
    try:
        assert run.event()["event"] == "device"  # type: ignore[index]
        err = run.command("load")
        assert err["event"] == "error" and err["code"] == "candidate.load_failed", err
        assert "does not exist" in err["message"]
        assert run.finish() == ([], 1)
    finally:
        run.close()


@pytest.mark.parametrize("line,message", [
    (b'{"cmd": "frobnicate"}', "unknown command 'frobnicate'"),
    (b'{"cmd": "call", "input": 0, "scalars": [[1, 2.0]]}', "call before setup"),
    (b'{"cmd": "empty", "input": 3}', "'input' must be an integer in [0, 2]"),
    (b"x" * (70 << 10), "longer than 65536 bytes"),
], ids=["unknown", "out_of_order", "input_range", "overlong"])
def test_bad_commands_are_fatal(tmp_path: Path, task: Path, slots: TestSlots, line: bytes,
                                message: str) -> None:
    run = Runner(write_plan(tmp_path, task, slots, PURE), pass_fds=slots.fds())
    try:
        assert run.event()["event"] == "device"  # type: ignore[index]
        run.send_raw(line)
        events, rc = run.finish()
        assert rc == 1 and len(events) == 1 and events[0]["event"] == "error", events
        assert events[0]["code"] == "worker.bad_plan" and message in events[0]["message"], events
    finally:
        run.close()


def test_eof_ends_the_process_quietly(tmp_path: Path, task: Path, slots: TestSlots) -> None:
    run = Runner(write_plan(tmp_path, task, slots, PURE), pass_fds=slots.fds())
    try:
        assert run.event()["event"] == "device"  # type: ignore[index]
        assert run.proc.stdin is not None
        run.proc.stdin.close()
        assert run.finish() == ([], 0)
    finally:
        run.close()


# ---- the build step's recording, and load_inline served from built modules ----------------------

# CPU C++ only (g++): one extension, two entry points; both candidates below that use it have
# the same load_inline call, so it is built once.
EXTENSION = '''
from torch.utils.cpp_extension import load_inline

CPP = r"""
torch::Tensor relu_scale_bias(torch::Tensor x, double scale, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "contiguous tensors only");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && bias.scalar_type() == torch::kFloat, "fp32");
    torch::Tensor out = torch::empty_like(x);
    const float *xp = x.data_ptr<float>(), *bp = bias.data_ptr<float>();
    float *op = out.data_ptr<float>();
    const int64_t n = bias.numel(), total = x.numel();
    for (int64_t i = 0; i < total; i++) {
        const float v = xp[i] > 0.0f ? xp[i] : 0.0f;
        op[i] = v * static_cast<float>(scale) + bp[i % n];
    }
    return out;
}

torch::Tensor relu_scale_bias_aten(torch::Tensor x, double scale, torch::Tensor bias) {
    return torch::relu(x) * scale + bias;
}
"""

ext = load_inline(name="ca_test_relu_scale_bias", cpp_sources=CPP,
                  functions=["relu_scale_bias", "relu_scale_bias_aten"], verbose=False)
'''
INLINE = candidate("return ext.relu_scale_bias(x.contiguous(), scale, self.bias)",
                   head=EXTENSION, kernel="")
ATEN_IN_CPP = INLINE.replace("ext.relu_scale_bias(", "ext.relu_scale_bias_aten(")


def record(root: Path, source: str) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    root.mkdir(parents=True, exist_ok=True)
    cand = root / "record_me.py"
    cand.write_text(textwrap.dedent(source))
    out = root / "specs.json"
    run = Runner(cand, args=("--record", str(cand), str(out)))
    try:
        assert run.proc.stdin is not None
        run.proc.stdin.close()
        events, rc = run.finish(300)
    finally:
        run.close()
    specs = json.loads(out.read_text()) if out.exists() else {}
    return specs, rc, events


@pytest.fixture(scope="module")
def inline_build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """INLINE's load_inline call recorded and built (torch_build, g++: about a minute cold)."""
    from cuda_agent_bridge.torch_build import build_inline, spec_key

    root = tmp_path_factory.mktemp("inline")
    specs, rc, events = record(root, INLINE)
    assert rc == 0 and events == [{"event": "done"}], events
    report = build_inline(specs["specs"], str(root / "cache"), "sm_90")
    assert report["status"] == "ok", report
    return {"specs": specs["specs"], "root": root,
            "modules": {spec_key(specs["specs"][0]): report["modules"][0]["library"]}}


def test_record_writes_the_load_inline_specs_without_compiling(
        inline_build: dict[str, Any]) -> None:
    from cuda_agent_bridge.torch_build import inline_spec, spec_key

    specs = inline_build["specs"]
    assert len(specs) == 1
    spec = specs[0]
    assert spec["name"] == "ca_test_relu_scale_bias"
    assert spec["functions"] == {"relu_scale_bias": "relu_scale_bias",
                                 "relu_scale_bias_aten": "relu_scale_bias_aten"}
    assert any("relu_scale_bias" in s for s in spec["cpp_sources"])
    # The key the runner computes from the same arguments is the recorded spec's key
    assert spec_key(spec) == spec_key(inline_spec(**spec))
    root = inline_build["root"]
    assert not [p for p in root.glob("*.so")] and not (root / "build").exists()


def test_record_reports_calls_at_import_and_missing_model_new(tmp_path: Path) -> None:
    calls_ext = EXTENSION + "\next.relu_scale_bias(None, 1.0, None)\n"
    _, rc, events = record(tmp_path / "a", calls_ext)
    assert rc == 1 and len(events) == 1 and events[0]["event"] == "error", events
    assert events[0]["code"] == "candidate.load_failed"
    assert "call extension functions from forward()" in events[0]["message"]
    _, rc, events = record(tmp_path / "b", "import torch\n")
    assert rc == 1 and events[-1]["code"] == "candidate.load_failed"
    assert "ModelNew" in events[-1]["message"]


def test_load_inline_is_served_from_built_modules(
        tmp_path: Path, task: Path, slots: TestSlots, inline_build: dict[str, Any]) -> None:
    bias = set_params(slots, 1)
    x = fill(slots, 0, 3)
    modules = inline_build["modules"]
    cases = [("good", INLINE, modules), ("aten", ATEN_IN_CPP, modules),
             ("unbuilt", INLINE, {"0" * 64: next(iter(modules.values()))})]
    for name, source, served in cases:
        root = tmp_path / name
        root.mkdir()
        run = Runner(write_plan(root, task, slots, source, inline_modules=served),
                     pass_fds=slots.fds())
        try:
            assert run.event()["event"] == "device"  # type: ignore[index]
            loaded = run.command("load")
            if name == "unbuilt":  # sources the build step did not see are refused
                assert loaded["event"] == "error", loaded
                assert loaded["code"] == "candidate.load_failed", loaded
                assert "the build step did not see" in loaded["message"]
                continue
            assert loaded["event"] == "loaded", (loaded, run.stderr())
            assert run.command("setup")["event"] == "set_up"
            slots.poison()
            ev = run.command("call", input=0, scalars=[[1, 2.0]])
            if name == "good":
                assert ev["event"] == "called", (ev, run.stderr())
                torch.testing.assert_close(output(slots), expected(x, 2.0, bias))
            else:  # torch compute inside the extension reaches the dispatcher: refused
                assert ev["event"] == "failed" and ev["code"] == "hack.torch_compute", ev
                assert "aten.relu" in ev["message"], ev
            assert run.quit() == 0
        finally:
            run.close()
    assert not list(tmp_path.glob("**/*.so")), "nothing may be compiled when served"


WORKDIR = Path(__file__).resolve().parent / "fixtures" / "workdir"


@pytest.fixture(scope="module")
def workdir_extension(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/fixtures/workdir built by torch_build (g++: about a minute cold)."""
    from cuda_agent_bridge.torch_build import build_workdir

    report = build_workdir(str(WORKDIR), str(tmp_path_factory.mktemp("workdir_cache")), "sm_90")
    assert report["status"] == "ok", report
    return str(report["modules"][0]["library"])


def test_workdir_candidate_with_its_prebuilt_extension(
        tmp_path: Path, task: Path, slots: TestSlots, workdir_extension: str) -> None:
    bias = set_params(slots, 1)
    x = fill(slots, 2, 3)
    copy = tmp_path / "fallback"
    copy.mkdir()
    (copy / "model_new.py").write_text((WORKDIR / "model_new.py").read_text().replace(
        "return cuda_extension.relu_scale_bias(x.contiguous(), scale, self.bias)",
        "return torch.nn.functional.relu(x) * scale + self.bias"))
    for directory, honest in ((WORKDIR, True), (copy, False)):
        root = tmp_path / ("honest" if honest else "cheat")
        root.mkdir()
        plan = write_plan(root, task, slots, format="workdir", dir=str(directory),
                          extension=workdir_extension)
        run = Runner(plan, pass_fds=slots.fds())
        try:
            run.start()
            slots.poison()
            ev = run.command("call", input=2, scalars=[[1, 3.0]])
            if honest:
                assert ev["event"] == "called", (ev, run.stderr())
                torch.testing.assert_close(output(slots), expected(x, 3.0, bias))
            else:
                assert ev["event"] == "failed" and ev["code"] == "hack.torch_compute", ev
                assert "torch.nn.functional.relu" in ev["message"]
            assert run.quit() == 0
        finally:
            run.close()


def test_plan_slots_are_the_bridges_descriptors(monkeypatch: pytest.MonkeyPatch) -> None:
    """In process: the bridge's slots op sends params, inputs, outputs in that order, sized as
    asked; the descriptors map as the runner maps them (device.map_slots)."""
    from cuda_agent_bridge import server
    from cuda_agent_bridge.runner.device import map_slots
    from cuda_agent_bridge.runner.plan import parse_plan
    from cuda_agent_bridge.tasks import TaskStore

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    monkeypatch.setenv("CUDA_AGENT_FD_CHANNEL", str(theirs.fileno()))
    ctx = server.Context(TaskStore(torch.device("cpu")))
    try:
        assert server.op_slots(ctx, {"op": "slots", "params_bytes": 256, "input_bytes": 1024,
                                     "inputs": 2, "output_bytes": 1280}) == {
            "kind": "cpu", "count": 4}
        _, fds, _, _ = socket.recv_fds(ours, 16, 16)
        assert [os.fstat(fd).st_size for fd in fds] == [256, 1024, 1024, 1280]
        assert ctx.slots is not None
        ctx.slots.outputs.bytes()[:4].copy_(torch.tensor([1, 2, 3, 4], dtype=torch.uint8))
        plan = parse_plan({
            "version": 2, "spec": SPEC,
            "candidate": {"format": "kernelbench", "path": "x.py", "task_dir": "t",
                          "torch_device": "cpu"},
            "slots": {"kind": "cpu", "params": {"fd": fds[0], "bytes": 256},
                      "inputs": [{"fd": fds[1], "bytes": 1024}, {"fd": fds[2], "bytes": 1024}],
                      "outputs": {"fd": fds[3], "bytes": 1280}}})
        mapped = map_slots(plan, torch.device("cpu"))
        assert mapped.outputs.bytes()[:4].tolist() == [1, 2, 3, 4]  # the same memory
        assert all(s.fd == -1 for s in [mapped.params, *mapped.inputs, mapped.outputs])
        for s in [mapped.params, *mapped.inputs, mapped.outputs]:
            s.close()
    finally:
        server.op_slots_close(ctx, {})
        ours.close()
        theirs.close()
