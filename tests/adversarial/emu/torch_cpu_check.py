#!/usr/bin/env python3
"""CPU check of the PyTorch-format cheats against the runner they were written to beat (no GPU).

Each case runs that runner, `python -m cuda_agent_bridge.candidate PLAN.json` (the runner before
the issue 12 redesign, python/cuda_agent_bridge/candidate.py of commit b2650ea), on the CPU (plan
`torch_device: cpu`, files mode) with its real verification trials, timed loop, checked calls and
final call; only the candidates' load_inline extensions are replaced by CPU stand-ins
(torch_stubs.py). The harness then compares every compared output with the task's Model, as the
supervisor would, and checks that the attack does what its comment says against that runner:
torch compute not refused, every compared output right, a median below its honest twin's. So a
line "ok" here means the hole was real: the redesign must close it (run.sh on the GPU shows it).
Not covered: kb_cxx_aten and kb_cxx_blas (C++ that needs the real extension; their build-time
refusal is what check_build.sh shows), kb_timer_patch_cxx (its C++ patching was checked by loading
the built extension on the CPU, see README.md), kb_late_thread (CPU tensors have no stream order).

Once the redesign has replaced that runner, point ADV_OLD_RUNNER at a copy of the old python/
directory, e.g. `git archive b2650ea python | tar -x -C /tmp/old` and
ADV_OLD_RUNNER=/tmp/old/python; without it the check says it is skipped.

Usage: [ADV_OLD_RUNNER=DIR] PYTHON tests/adversarial/emu/torch_cpu_check.py [NAME ...]
(PYTHON: torch and safetensors)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ADV = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(ADV))
OLD_RUNNER = os.environ.get("ADV_OLD_RUNNER") or os.path.join(REPO, "python")
BOOT = ("import sys; sys.path[:0] = [{here!r}, {py!r}]; import torch_stubs; torch_stubs.install(); "
        "from cuda_agent_bridge.candidate import main; sys.exit(main(sys.argv[1:]))")
PROTOCOL = {"version": 1, "warmup_min_calls": 3, "warmup_min_ms": 25, "min_samples": 10,
            "max_samples": 60, "target_rse": 1e-9, "budget_s": 1.5, "l2_flush_factor": 0.0, "checks": 2}


@dataclass
class Case:
    name: str  # cheats/<name> or honest/<name>
    task: str
    twin: str | None = None  # honest candidate whose median it must beat (the fake speed)
    faster: float = 0.5  # the cheat's median must be below this fraction of the twin's
    budget_s: float = 1.5  # the timed loop's budget (a window cheat needs calls past its window)


CASES = [
    Case("honest/kb_slow_scale_add", "scale_add"),
    Case("honest/kb_cublas_gemm", "gemm"),
    Case("cheats/kb_timer_patch", "scale_add", twin="honest/kb_slow_scale_add", faster=0.2),
    Case("cheats/kb_mode_escape", "scale_add"),
    Case("cheats/kb_mode_pop_matmul", "gemm"),
    Case("cheats/kb_gc_refusal", "softmax"),
    Case("cheats/kb_aten_exclude_key", "rowsum"),
    Case("cheats/kb_thread_torch", "gemm"),
    Case("cheats/kb_monkeypatch_harness", "scale_add"),
    Case("cheats/kb_frame_schedule", "gemm", twin="honest/kb_cublas_gemm"),
    Case("cheats/kb_plan_argv", "gemm", twin="honest/kb_cublas_gemm"),
    Case("cheats/kb_ptr_window_cache", "gemm", twin="honest/kb_cublas_gemm", budget_s=8.0),
]


def load_task(task: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"adv_task_{task}", os.path.join(ADV, "tasks", task, "model.py"))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


Tensors = list[torch.Tensor]


def make_set(task: Any, seed: int, model_seed: int) -> tuple[Tensors, Tensors, Tensors]:
    """(inputs, params, reference outputs) of one set, made as the bridge makes them."""
    torch.manual_seed(model_seed)
    model = task.Model(*task.get_init_inputs()).eval()
    torch.manual_seed(seed)
    inputs = task.get_inputs()
    with torch.no_grad():
        out = model(*inputs)
    return inputs, list(model.state_dict().values()), [out]


def spec_of(ts: list[torch.Tensor], prefix: str) -> list[dict[str, Any]]:
    return [{"index": i, "name": f"{prefix}.{i}", "dtype": "float32", "shape": list(t.shape), "device": "cuda"}
            for i, t in enumerate(ts)]


def write(path: str, prefix: str, ts: list[torch.Tensor]) -> str:
    save_file({f"{prefix}.{i}": t.contiguous() for i, t in enumerate(ts)}, path)
    return path


def read_outputs(path: str) -> list[torch.Tensor] | None:
    if not os.path.exists(path):
        return None
    with safe_open(path, framework="pt") as f:
        return [f.get_tensor(k) for k in sorted(f.keys())]


def close(got: list[torch.Tensor] | None, ref: list[torch.Tensor]) -> bool:
    return got is not None and len(got) == len(ref) and all(
        g.shape == r.shape and torch.allclose(g, r, atol=1e-3, rtol=1e-3) for g, r in zip(got, ref, strict=True))


def run_case(c: Case, tmp: str, py: str) -> dict[str, Any]:
    task = load_task(c.task)
    d = os.path.join(tmp, c.name.replace("/", "__"))
    os.makedirs(d)
    refs: dict[str, list[torch.Tensor]] = {}
    verify = []
    for k in range(2):
        x, p, ref = make_set(task, 100 + k, 200 + k)
        verify.append({"params": write(f"{d}/p{k}.st", "params", p), "inputs": write(f"{d}/i{k}.st", "args", x),
                       "outputs": f"{d}/o{k}.st"})
        refs[verify[-1]["outputs"]] = ref
    _, tp, _ = make_set(task, 0, 300)
    rotation = [write(f"{d}/r{k}.st", "args", make_set(task, 400 + k, 300)[0]) for k in range(2)]
    checks = []
    for k in range(3):  # two checked calls and the final call
        x, _, ref = make_set(task, 500 + k, 300)
        checks.append({"inputs": write(f"{d}/c{k}.st", "args", x), "outputs": f"{d}/co{k}.st"})
        refs[checks[-1]["outputs"]] = ref
    spec = {"args": spec_of(x, "args"), "params": spec_of(tp, "params"), "outputs": spec_of(ref, "outputs")}
    plan = {"device": 0, "spec": spec, "verify": verify, "gate_after_verify": False,
            "timing": {"params": write(f"{d}/tp.st", "params", tp), "rotation": rotation, "checks": checks[:2],
                       "final": checks[2], "seed": 12345, "protocol": {**PROTOCOL, "budget_s": c.budget_s}},
            "candidate": {"format": "kernelbench", "path": os.path.join(ADV, c.name, "model_new.py"),
                          "task_dir": os.path.join(ADV, "tasks", c.task), "torch_device": "cpu"}}
    plan_path = f"{d}/plan.json"
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    boot = BOOT.format(here=HERE, py=OLD_RUNNER)
    proc = subprocess.run([py, "-c", boot, plan_path], capture_output=True, text=True, timeout=600, check=False)
    events: list[dict[str, Any]] = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    verify_ev = [e for e in events if e.get("event") == "verify"]
    timing: dict[str, Any] = next((e for e in events if e.get("event") == "timing"), {})
    errors = [e for e in events if e.get("event") == "error"]
    codes = [e.get("code") for e in verify_ev + [timing] + errors if e.get("code")]
    messages = " | ".join(str(e.get("message")) for e in verify_ev + [timing] + errors if e.get("code"))
    return {"codes": codes, "stderr": (messages + " | " + proc.stderr[-400:])[-800:],
            "verify_ok": len(verify_ev) == 2 and all(e.get("ok") for e in verify_ev) and all(
                close(read_outputs(t["outputs"]), refs[t["outputs"]]) for t in verify),
            "checked_ok": timing.get("ok") is True and timing.get("checks_done") == 2 and all(
                close(read_outputs(t["outputs"]), refs[t["outputs"]]) for t in checks),
            "median_ms": timing.get("median_ms"), "samples": timing.get("samples")}


def main() -> int:
    if not os.path.isfile(os.path.join(OLD_RUNNER, "cuda_agent_bridge", "candidate.py")):
        print(f"skip: {OLD_RUNNER} has no cuda_agent_bridge/candidate.py (the runner these attacks "
              "were written against); set ADV_OLD_RUNNER to a copy of the old python/ directory")
        return 0
    only = sys.argv[1:]
    py = sys.executable
    results: dict[str, dict[str, Any]] = {}
    failed = 0
    cases = [c for c in CASES if not only or c.name.split("/")[1] in only or
             any(o == k.twin.split("/")[1] for k in CASES if k.twin and k.name.split("/")[1] in only
                 for o in [c.name.split("/")[1]])]
    with tempfile.TemporaryDirectory(prefix="ca-torch-cpu-") as tmp:
        for c in cases:
            r = results[c.name] = run_case(c, tmp, py)
            ok = r["verify_ok"] and r["checked_ok"] and not r["codes"]
            why = (f"verification {'right' if r['verify_ok'] else 'WRONG'}, checked and final "
                   f"{'right' if r['checked_ok'] else 'WRONG'}, codes {r['codes'] or 'none'}, median "
                   f"{r['median_ms']} ms over {r['samples']} samples")
            if ok and c.twin:
                tm = results.get(c.twin, {}).get("median_ms")
                faster = isinstance(tm, float) and isinstance(r["median_ms"], float) and r["median_ms"] < c.faster * tm
                ok = ok and faster
                why += f"; twin {c.twin.split('/')[1]} {tm} ms (needs < {c.faster} x)"
            label = ("the honest twin runs" if c.name.startswith("honest/") else
                     "the attack works against the old runner")
            print(f"{'ok  ' if ok else 'FAIL'} {c.name}: {label}: {why}", flush=True)
            if not ok:
                failed += 1
                print(f"     stderr: {' '.join(r['stderr'].split())}")
    print(f"\n{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
