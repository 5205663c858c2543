"""python -m cuda_agent_bridge.candidate: PyTorch-format candidates with the worker's plan and
events, on the CPU (torch_device "cpu"): verification trials, refusal of torch compute, the input
and parameter checks, the params-name check, the gate, timing with checked and final calls, and
the build step's recording of load_inline calls."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from cuda_agent_bridge.files import load_tensors, save_tensors
from cuda_agent_bridge.refusal import Refusal, TorchComputeRefused
from support import PYTHON_DIR, write_task

TASK = """
import torch
from torch import nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x, scale):
        return torch.relu(x) * scale + self.bias

def get_inputs():
    return [torch.randn(8, 32), 2.0]

def get_init_inputs():
    return [32]
"""
SPEC = {
    "args": [{"index": 0, "name": "x", "dtype": "float32", "shape": [8, 32], "device": "cuda"},
             {"index": 1, "name": "scale", "dtype": "float64", "shape": [], "device": "cpu"}],
    "params": [{"index": 0, "name": "bias", "dtype": "float32", "shape": [32],
                "device": "cuda"}],
    "outputs": [{"index": 0, "name": "output", "dtype": "float32", "shape": [8, 32],
                 "device": "cuda"}],
}
# CPU C++ only (g++): one extension, two entry points; every kernelbench candidate below that
# uses it has the same name and sources, so it is compiled once per test session.
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
GOOD = EXTENSION + '''
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        return ext.relu_scale_bias(x.contiguous(), scale, self.bias)
'''
ATEN_IN_CPP = GOOD.replace("ext.relu_scale_bias(", "ext.relu_scale_bias_aten(")
FUNCTIONAL = """
import torch
import torch.nn.functional as F
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        return F.relu(x) * scale + self.bias
"""
SWALLOWED = """
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        try:
            return torch.relu(x) * scale + self.bias
        except Exception:
            return torch.empty_like(x)
"""
MODIFIES_INPUT = """
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        out = x.clone()
        x.copy_(torch.zeros_like(x))  # copies are allowed; writing into an input is not
        return out
"""
MODIFIES_PARAM = """
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        self.bias.data.copy_(torch.zeros_like(self.bias))
        return x.clone()
"""
NOISY = """
import os
import sys
import torch
from torch import nn

print('{"event": "done"}')
os.write(1, b'{"event": "verified", "trials": 9, "ok": true}\\n')

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        print('{"event": "verify", "trial": 0, "ok": true}')
        assert sys.stdin.read() == "" and os.read(0, 64) == b""  # the gate is out of reach
        return x.clone()
"""
RENAMED = """
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.offset = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        return x.clone()
"""


@pytest.fixture(scope="session")
def ext_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """load_inline's build cache, shared by the session (TORCH_EXTENSIONS_DIR)."""
    return tmp_path_factory.mktemp("torch_extensions")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_task(tmp_path_factory.mktemp("tasks"), "relu_scale_bias", TASK)


def make_trials(root: Path, count: int) -> list[dict[str, Any]]:
    """Params and inputs files of `count` trials (own seeds), as the bridge writes them."""
    trials = []
    for k in range(count):
        g = torch.Generator().manual_seed(100 + k)
        p, i = root / f"p{k}.safetensors", root / f"i{k}.safetensors"
        save_tensors(str(p), "params", [torch.randn(32, generator=g)], {})
        save_tensors(str(i), "args", [torch.randn(8, 32, generator=g),
                                      torch.tensor(1.5 + k, dtype=torch.float64)], {})
        trials.append({"params": str(p), "inputs": str(i),
                       "outputs": str(root / f"o{k}.safetensors")})
    return trials


def write_plan(root: Path, task: Path, source: str, ext_dir: Path, trials: int = 2,
               timing: bool = False, gate: bool = True) -> Path:
    cand = root / "candidate.py"
    cand.write_text(textwrap.dedent(source))
    plan: dict[str, Any] = {
        "candidate": {"format": "kernelbench", "path": str(cand), "task_dir": str(task),
                      "build_dir": str(ext_dir), "torch_device": "cpu"},
        "device": 0, "spec": SPEC, "verify": make_trials(root, trials),
        "gate_after_verify": gate,
    }
    if timing:  # the C worker's timing object: 2 rotation sets, 2 checked calls, a final call
        (root / "t").mkdir()
        sets = make_trials(root / "t", 5)
        plan["timing"] = {"params": sets[0]["params"],
                          "rotation": [sets[0]["inputs"], sets[1]["inputs"]], "seed": 7,
                          "checks": [{"inputs": sets[k]["inputs"],
                                      "outputs": str(root / f"c{k}.safetensors")}
                                     for k in (2, 3)],
                          "final": {"inputs": sets[4]["inputs"],
                                    "outputs": str(root / "f.safetensors")},
                          "protocol": {"checks": 2, "min_samples": 5, "budget_s": 0.5,
                                       "warmup_min_ms": 5.0, "target_rse": 0.0}}
    path = root / "plan.json"
    path.write_text(json.dumps(plan))
    return path


class Run:
    """The program as a child: events read line by line from stdout, the gate written to stdin."""

    def __init__(self, plan: Path, pass_fds: tuple[int, ...] = ()) -> None:
        env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent_bridge.candidate", str(plan)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            pass_fds=pass_fds)
        self.pending = b""

    def event(self, timeout: float) -> dict[str, Any] | None:
        """The next event, or None at EOF; fails after timeout seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                self.proc.kill()
                raise TimeoutError(f"no event within {timeout} s; stderr: {self.stderr()}")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                assert not self.pending, self.pending
                return None
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        obj = json.loads(line)  # a stray print on stdout fails here
        assert isinstance(obj, dict) and isinstance(obj.get("event"), str), obj
        return obj

    def until(self, name: str, timeout: float) -> list[dict[str, Any]]:
        """Events up to and including the first `name` (or the end)."""
        events = []
        while (ev := self.event(timeout)) is not None:
            events.append(ev)
            if ev["event"] == name:
                break
        return events

    def gate(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line)
        self.proc.stdin.close()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            self.proc.kill()
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode("utf-8", "replace")[-3000:]

    def finish(self, timeout: float = 120) -> tuple[list[dict[str, Any]], int]:
        events = self.until("\0", timeout)
        return events, self.proc.wait(timeout)


def run_all(plan: Path, gate: bytes = b"stop\n", timeout: float = 120
            ) -> tuple[list[dict[str, Any]], int]:
    run = Run(plan)
    run.gate(gate)
    return run.finish(timeout)


def names(events: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in events]


def expected_output(trial: dict[str, Any]) -> torch.Tensor:
    (bias,) = load_tensors(trial["params"], "params")
    x, scale = load_tensors(trial["inputs"], "args")
    return torch.relu(x) * scale.item() + bias


# Compiles a C++ extension with g++ (about a minute on 2 cores, cold; cached for the session).
def test_correct_candidate_passes_gate_and_is_timed_with_checked_calls(
        tmp_path: Path, task: Path, ext_dir: Path) -> None:
    plan = write_plan(tmp_path, task, GOOD, ext_dir, trials=3, timing=True)
    run = Run(plan)
    head = run.until("verified", timeout=600)
    assert names(head) == ["device", "loaded", "verify", "verify", "verify", "verified"], (
        head, run.stderr())
    assert head[0]["name"] == "cpu" and head[1]["format"] == "kernelbench"
    assert [e["trial"] for e in head[2:5]] == [0, 1, 2]
    assert all(e["ok"] and e["seconds"] >= 0 for e in head[2:5]), head
    assert head[5] == {"event": "verified", "trials": 3, "ok": True}
    # The program waits at the gate: nothing more until the supervisor answers.
    time.sleep(0.5)
    assert run.proc.poll() is None and not run.pending
    run.gate(b"continue\n")
    tail, rc = run.finish()
    assert rc == 0 and names(tail) == ["timing", "done"], tail
    timing = tail[0]
    assert timing["ok"] is True and timing["method"] == "host", timing
    # target_rse 0 never converges: the loop runs to its budget, past min_samples
    assert timing["samples"] >= 5 and timing["stop_reason"] in ("budget", "max_samples"), timing
    assert len(timing["samples_ms"]) == timing["samples"] and timing["median_ms"] > 0
    assert timing["checks"] == 2 and timing["checks_done"] == 2 and timing["final_done"]
    assert timing["warmup_calls"] >= 3 and timing["l2_flush_bytes"] > 0
    plan_obj = json.loads(plan.read_text())
    for t in plan_obj["verify"]:
        (out,) = load_tensors(t["outputs"], "outputs")
        torch.testing.assert_close(out, expected_output(t), rtol=0, atol=1e-6)
    # Checked and final outputs answer their own inputs (placed into used rotation buffers,
    # which the perturbation had changed), with the timing params.
    tp = plan_obj["timing"]
    for c in [*tp["checks"], tp["final"]]:
        (out,) = load_tensors(c["outputs"], "outputs")
        want = expected_output({"params": tp["params"], "inputs": c["inputs"]})
        torch.testing.assert_close(out, want, rtol=0, atol=1e-6)


LATE_CHEAT = EXTENSION + '''
import torch
from torch import nn

CALLS = [0]

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        CALLS[0] += 1
        if CALLS[0] > 2:  # honest while verified, torch compute once timed
            return torch.relu(x) * scale + self.bias
        return ext.relu_scale_bias(x.contiguous(), scale, self.bias)
'''


def test_torch_compute_during_timing_is_refused(tmp_path: Path, task: Path,
                                                 ext_dir: Path) -> None:
    plan = write_plan(tmp_path, task, LATE_CHEAT, ext_dir, trials=2, timing=True)
    events, rc = run_all(plan, gate=b"continue\n", timeout=600)
    assert rc == 0 and names(events)[-2:] == ["timing", "done"], events
    assert all(e["ok"] for e in events if e["event"] == "verify"), events
    timing = events[-2]
    assert timing["ok"] is False and timing["code"] == "hack.torch_compute", timing
    assert "warm-up call 1" in timing["message"], timing


# Shares the extension built by the test above (or builds it).
def test_torch_compute_inside_the_extension_is_refused(
        tmp_path: Path, task: Path, ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, ATEN_IN_CPP, ext_dir), timeout=600)
    assert rc == 0 and names(events) == ["device", "loaded", "verify", "verified", "done"], events
    assert events[2]["code"] == "hack.torch_compute", events[2]
    assert "aten.relu" in events[2]["message"], events[2]


def test_functional_relu_is_refused(tmp_path: Path, task: Path, ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, FUNCTIONAL, ext_dir, timing=True),
                         gate=b"stop\n")
    assert rc == 0 and names(events) == ["device", "loaded", "verify", "verified", "done"], events
    v = events[2]
    assert v["trial"] == 0 and v["ok"] is False and v["code"] == "hack.torch_compute"
    assert "torch.nn.functional.relu" in v["message"]
    assert events[3] == {"event": "verified", "trials": 1, "ok": False}
    assert not Path(json.loads((tmp_path / "plan.json").read_text())["verify"][0]["outputs"]
                    ).exists()


def test_swallowed_refusal_still_fails(tmp_path: Path, task: Path, ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, SWALLOWED, ext_dir))
    assert rc == 0 and events[2]["code"] == "hack.torch_compute", events
    assert "torch.relu" in events[2]["message"]


def test_modified_input_is_reported(tmp_path: Path, task: Path, ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, MODIFIES_INPUT, ext_dir))
    assert rc == 0 and events[2]["code"] == "verify.input_modified", events
    assert "args.0" in events[2]["message"]


def test_modified_param_is_reported(tmp_path: Path, task: Path, ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, MODIFIES_PARAM, ext_dir))
    assert rc == 0 and events[2]["code"] == "verify.params_modified", events
    assert "bias" in events[2]["message"]


def test_candidate_can_neither_forge_events_nor_read_the_gate(
        tmp_path: Path, task: Path, ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, NOISY, ext_dir, trials=2, timing=True),
                         gate=b"continue\n")
    assert rc == 0 and names(events) == ["device", "loaded", "verify", "verify", "verified",
                                         "timing", "done"], events
    assert events[4] == {"event": "verified", "trials": 2, "ok": True}


def test_different_parameter_names_are_fatal(tmp_path: Path, task: Path, ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, RENAMED, ext_dir))
    assert rc == 1 and names(events) == ["device", "error"], events
    err = events[1]
    assert err["code"] == "candidate.params_mismatch"
    assert "missing bias" in err["message"] and "unexpected offset" in err["message"]


def test_without_gate_a_failed_trial_ends_the_run(tmp_path: Path, task: Path,
                                                  ext_dir: Path) -> None:
    events, rc = run_all(write_plan(tmp_path, task, MODIFIES_INPUT, ext_dir, gate=False,
                                    timing=True))
    assert rc == 0 and names(events) == ["device", "loaded", "verify", "done"], events


def test_bad_plan_and_missing_candidate(tmp_path: Path, task: Path, ext_dir: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"candidate": {"format": "onnx", "path": "x"}}))
    events, rc = run_all(bad)
    assert rc == 1 and events == [{"event": "error", "code": "worker.bad_plan", "message":
                                   "plan: candidate.format must be one of kernelbench, workdir "
                                   "(got 'onnx')"}]
    plan = write_plan(tmp_path, task, RENAMED, ext_dir)
    obj = json.loads(plan.read_text())
    obj["candidate"]["path"] = str(tmp_path / "nope.py")
    plan.write_text(json.dumps(obj))
    events, rc = run_all(plan)
    assert rc == 1 and events[-1]["code"] == "candidate.load_failed", events


def test_refusal_allowlist_in_process() -> None:
    x = torch.randn(4, 6)
    with torch.no_grad(), Refusal() as r:
        y = torch.empty_like(x)
        y.copy_(x.contiguous().view(6, 4).t().reshape(4, 6))
        assert (x.shape, x.dtype, x.device, x.numel(), x[1:, :2].shape) == (
            torch.Size([4, 6]), torch.float32, torch.device("cpu"), 24, torch.Size([3, 2]))
    assert r.refused is None
    for fn, op in ((lambda: x + 1, "torch.Tensor.add"), (lambda: x.sum(), "torch.Tensor.sum"),
                   (lambda: torch.matmul(x, x.t()), "torch.matmul"),
                   (lambda: x[torch.tensor([0])], "torch.Tensor.__getitem__"),
                   (lambda: torch.nn.functional.gelu(x), "torch.nn.functional.gelu")):
        with torch.no_grad(), Refusal() as r, pytest.raises(TorchComputeRefused):
            fn()
        assert r.refused == op


WORKDIR = Path(__file__).resolve().parent / "fixtures" / "workdir"


@pytest.fixture(scope="session")
def workdir_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("workdir_build")


def write_workdir_plan(root: Path, task: Path, workdir: Path, build: Path,
                       extension: Path | None = None) -> Path:
    cand: dict[str, Any] = {"format": "workdir", "dir": str(workdir), "task_dir": str(task),
                            "build_dir": str(build), "torch_device": "cpu"}
    if extension is not None:
        cand["extension"] = str(extension)
    plan = {"candidate": cand, "device": 0, "spec": SPEC, "verify": make_trials(root, 2),
            "gate_after_verify": True}
    path = root / "plan.json"
    path.write_text(json.dumps(plan))
    return path


# Builds tests/fixtures/workdir (binding.cpp + kernels/*_binding.cpp) with g++ into a session
# directory: about a minute on 2 cores, cold.
def test_workdir_candidate_builds_and_passes(tmp_path: Path, task: Path,
                                             workdir_build: Path) -> None:
    plan = write_workdir_plan(tmp_path, task, WORKDIR, workdir_build)
    events, rc = run_all(plan, gate=b"continue\n", timeout=600)
    assert rc == 0 and names(events) == ["device", "loaded", "verify", "verify", "verified",
                                         "done"], events
    assert events[1]["format"] == "workdir" and all(e["ok"] for e in events[2:4]), events
    for t in json.loads(plan.read_text())["verify"]:
        (out,) = load_tensors(t["outputs"], "outputs")
        torch.testing.assert_close(out, expected_output(t), rtol=0, atol=1e-6)
    assert (workdir_build / "cuda_extension.so").is_file()


def test_workdir_falling_back_to_functional_is_refused(tmp_path: Path, task: Path,
                                                       workdir_build: Path) -> None:
    so = workdir_build / "cuda_extension.so"
    if not so.is_file():  # run alone: build it first
        run_all(write_workdir_plan(tmp_path, task, WORKDIR, workdir_build), timeout=600)
    copy = tmp_path / "workdir"
    copy.mkdir()
    (copy / "model_new.py").write_text((WORKDIR / "model_new.py").read_text().replace(
        "return cuda_extension.relu_scale_bias(x.contiguous(), scale, self.bias)",
        "return torch.nn.functional.relu(x) * scale + self.bias"))
    events, rc = run_all(write_workdir_plan(tmp_path, task, copy, workdir_build, extension=so))
    assert rc == 0 and names(events) == ["device", "loaded", "verify", "verified", "done"], events
    assert events[2]["code"] == "hack.torch_compute"
    assert "torch.nn.functional.relu" in events[2]["message"]


# ---- the build step's recording, and load_inline served from built modules ----------------------

def record(tmp_path: Path, source: str) -> tuple[dict[str, Any], int, list[dict[str, Any]]]:
    cand = tmp_path / "record_me.py"
    cand.write_text(textwrap.dedent(source))
    out = tmp_path / "specs.json"
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR), PYTHONUNBUFFERED="1")
    proc = subprocess.run([sys.executable, "-m", "cuda_agent_bridge.candidate", "--record",
                           str(cand), str(out)], capture_output=True, env=env, timeout=300)
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    specs = json.loads(out.read_text()) if out.exists() else {}
    return specs, proc.returncode, events


def test_record_writes_the_load_inline_specs_without_compiling(tmp_path: Path) -> None:
    from cuda_agent_bridge.torch_build import inline_spec, spec_key

    specs, rc, events = record(tmp_path, GOOD)
    assert rc == 0 and events == [{"event": "done"}], events
    assert len(specs["specs"]) == 1
    spec = specs["specs"][0]
    assert spec["name"] == "ca_test_relu_scale_bias"
    assert spec["functions"] == {"relu_scale_bias": "relu_scale_bias",
                                 "relu_scale_bias_aten": "relu_scale_bias_aten"}
    assert "relu_scale_bias" in spec["cpp_sources"][-1] or any(
        "relu_scale_bias" in s for s in spec["cpp_sources"])
    # The key the runner computes from the same arguments is the recorded spec's key.
    assert spec_key(spec) == spec_key(inline_spec(**spec))
    assert not any(tmp_path.glob("**/*.so")), "recording must not compile anything"


def test_record_reports_calls_at_import_and_missing_model_new(tmp_path: Path) -> None:
    calls_ext = EXTENSION + "\next.relu_scale_bias(None, 1.0, None)\n"
    _, rc, events = record(tmp_path, calls_ext)
    assert rc == 1 and events[-1]["event"] == "error", events
    assert events[-1]["code"] == "candidate.load_failed"
    assert "call extension functions from forward()" in events[-1]["message"]
    _, rc, events = record(tmp_path, "import torch\n")
    assert rc == 1 and events[-1]["code"] == "candidate.load_failed"
    assert "ModelNew" in events[-1]["message"]


def test_load_inline_is_served_from_built_modules(tmp_path: Path, task: Path) -> None:
    from cuda_agent_bridge.torch_build import build_inline, spec_key

    specs, rc, _ = record(tmp_path, GOOD)
    assert rc == 0
    report = build_inline(specs["specs"], str(tmp_path / "cache"), "sm_90")
    assert report["status"] == "ok", report
    lib = report["modules"][0]["library"]
    key = spec_key(specs["specs"][0])
    plan = write_plan(tmp_path, task, GOOD, tmp_path / "unused_ext_dir", trials=2)
    obj = json.loads(plan.read_text())
    del obj["candidate"]["build_dir"]
    obj["candidate"]["inline_modules"] = {key: lib}
    plan.write_text(json.dumps(obj))
    events, rc = run_all(plan, timeout=300)
    assert rc == 0 and names(events) == ["device", "loaded", "verify", "verify", "verified",
                                         "done"], events
    assert all(e["ok"] for e in events[2:4]), events
    assert not (tmp_path / "unused_ext_dir").exists(), "nothing may be compiled when served"
    # Sources that differ from what was built are refused, not compiled.
    obj["candidate"]["inline_modules"] = {"0" * 64: lib}
    plan.write_text(json.dumps(obj))
    events, rc = run_all(plan, timeout=300)
    assert rc == 1 and events[-1]["code"] == "candidate.load_failed", events
    assert "the build step did not see" in events[-1]["message"]


# ---- device data: sets made from seeds on both sides, outputs compared in the bridge's slots ----

WRONG_VALUES = """
import torch
from torch import nn

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        return x.clone()
"""
WRONG_SHAPE = WRONG_VALUES.replace("return x.clone()", "return x[:4].clone()")
SLOT_FD = 60  # where the test places the slot descriptors for the runner (the C side uses 3)


def open_slots(count: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, tuple[int, ...]]:
    """A bridge context with `count` CPU slots made by op_slots, their descriptors received
    from the descriptor channel as the C side receives them and placed at SLOT_FD, ..."""
    import socket

    from cuda_agent_bridge import server
    from cuda_agent_bridge.slots import layout
    from cuda_agent_bridge.tasks import TaskStore
    from cuda_agent_bridge.timing import Clock

    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    monkeypatch.setenv("CUDA_AGENT_FD_CHANNEL", str(theirs.fileno()))
    ctx = server.Context(TaskStore(torch.device("cpu")), Clock(torch.device("cpu")))
    _, size = layout(SPEC["outputs"])
    answer = server.op_slots(ctx, {"count": count, "bytes": size})
    assert answer == {"count": count, "bytes": size, "kind": "cpu"}
    _, fds, _, _ = socket.recv_fds(ours, 16, 64)
    assert len(fds) == count
    for i, fd in enumerate(fds):
        os.dup2(fd, SLOT_FD + i)
        os.close(fd)
    ours.close()
    theirs.close()
    return ctx, tuple(range(SLOT_FD, SLOT_FD + count))


def device_plan(root: Path, task: Path, source: str, ext_dir: Path, slots: int) -> Path:
    cand = root / "candidate.py"
    cand.write_text(textwrap.dedent(source))
    from cuda_agent_bridge.slots import layout

    plan = {
        "candidate": {"format": "kernelbench", "path": str(cand), "task_dir": str(task),
                      "build_dir": str(ext_dir), "torch_device": "cpu"},
        "device": 0, "spec": SPEC, "gate_after_verify": True,
        "data": {"mode": "device", "kind": "cpu", "slots": slots,
                 "slot_bytes": layout(SPEC["outputs"])[1], "first_fd": SLOT_FD},
        "verify": [{"model_seed": 11, "seed": 21, "slot": 0},
                   {"model_seed": 12, "seed": 22, "slot": 1}],
        "timing": {"model_seed": 13, "rotation": [{"seed": 31}, {"seed": 32}], "seed": 7,
                   "checks": [{"seed": 41, "slot": 0}, {"seed": 42, "near_seed": 31, "slot": 1}],
                   "final": {"seed": 43, "slot": 2},
                   "protocol": {"checks": 2, "min_samples": 5, "budget_s": 0.5,
                                "warmup_min_ms": 5.0, "target_rse": 0.0}},
    }
    path = root / "plan.json"
    path.write_text(json.dumps(plan))
    return path


def check(ctx: Any, task: Path, model_seed: int, seed: int, slot: int,
          near_seed: int | None = None) -> dict[str, Any]:
    from cuda_agent_bridge import server

    req = {"task_dir": str(task), "model_seed": model_seed, "seed": seed, "slot": slot,
           "atol": 1e-5, "rtol": 1e-5}
    if near_seed is not None:
        req["near_seed"] = near_seed
    (out,) = server.op_check(ctx, req)["outputs"]
    return out


def test_device_data_runs_trials_and_timing_without_files(
        tmp_path: Path, task: Path, ext_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, fds = open_slots(3, monkeypatch)
    try:
        run = Run(device_plan(tmp_path, task, GOOD, ext_dir, 3), pass_fds=fds)
        head = run.until("verified", timeout=600)
        assert names(head) == ["device", "loaded", "verify", "verify", "verified"], (
            head, run.stderr())
        assert all(e["ok"] for e in head[2:4]), head
        # The bridge makes each trial's reference from the same seeds and compares in place
        for k, (model_seed, seed) in enumerate([(11, 21), (12, 22)]):
            got = check(ctx, task, model_seed, seed, k)
            assert got["numel"] == 8 * 32 and got["mismatches"] == 0, got
            assert got["first_index"] is None and got["max_abs_err"] < 1e-5, got
        # A different seed is a different set: the same slot no longer matches
        assert check(ctx, task, 11, 99, 0)["mismatches"] > 0
        run.gate(b"continue\n")
        tail, rc = run.finish()
        assert rc == 0 and names(tail) == ["timing", "done"], (tail, run.stderr())
        assert tail[0]["ok"] and tail[0]["checks_done"] == 2 and tail[0]["final_done"], tail
        assert check(ctx, task, 13, 41, 0)["mismatches"] == 0
        assert check(ctx, task, 13, 42, 1, near_seed=31)["mismatches"] == 0
        assert check(ctx, task, 13, 42, 1)["mismatches"] > 0  # the near-duplicate differs
        assert check(ctx, task, 13, 43, 2)["mismatches"] == 0
        assert not list(tmp_path.glob("*.safetensors"))  # nothing went through a file
    finally:
        for fd in fds:
            os.close(fd)
        for s in ctx.slots:
            s.close()


def test_device_data_reports_wrong_values_and_wrong_shapes(
        tmp_path: Path, task: Path, ext_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ctx, fds = open_slots(2, monkeypatch)
    try:
        (tmp_path / "values").mkdir()
        run = Run(device_plan(tmp_path / "values", task, WRONG_VALUES, ext_dir, 2),
                  pass_fds=fds)
        head = run.until("verified", timeout=300)
        assert [e.get("ok") for e in head if e["event"] == "verify"] == [True, True], head
        got = check(ctx, task, 11, 21, 0)
        assert got["mismatches"] > 0 and got["first_index"] is not None, got
        assert isinstance(got["first_out"], float) and got["max_abs_err"] > 1e-3, got
        run.gate(b"stop\n")
        assert run.finish()[1] == 0
        (tmp_path / "shape").mkdir()
        run = Run(device_plan(tmp_path / "shape", task, WRONG_SHAPE, ext_dir, 2), pass_fds=fds)
        head = run.until("verified", timeout=300)
        bad = [e for e in head if e["event"] == "verify"]
        assert bad and bad[0]["ok"] is False and bad[0]["code"] == "verify.mismatch", head
        assert "dtype or shape differs" in bad[0]["message"], bad
        assert "[4, 32]" in bad[0]["message"] and "[8, 32]" in bad[0]["message"], bad
        run.gate(b"stop\n")
        run.finish()
    finally:
        for fd in fds:
            os.close(fd)
        for s in ctx.slots:
            s.close()
