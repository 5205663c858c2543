"""torch_build refuses a workdir whose model_new.py fails the static check before compiling
anything: the report's status is "refused" with the reason code, the first finding as its
message, every finding in errors, and no module; the rules profile comes from --profile."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent_bridge import torch_build as tb
from support import PYTHON_DIR

FIXTURES = Path(__file__).resolve().parent / "fixtures"

TAMPERING = '''import torch
from torch import nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        with torch._C.DisableTorchFunction():
            return torch.relu(x)
'''

COMPUTE = '''import torch
from torch import nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.empty(n))

    def forward(self, x, scale):
        return torch.relu(x) * scale + self.bias
'''


def workdir(tmp_path: Path, model_new: str) -> Path:
    d = tmp_path / "wd"
    shutil.copytree(FIXTURES / "workdir", d)
    (d / "model_new.py").write_text(model_new)
    return d


def test_tampering_is_refused_before_compiling(tmp_path: Path) -> None:
    d = workdir(tmp_path, TAMPERING)
    rep = tb.build_workdir(str(d), str(tmp_path / "cache"), "sm_90")
    assert rep["status"] == "refused" and rep["code"] == "hack.harness_tampering", rep
    assert rep["message"].startswith("model_new.py:13: torch._C is not allowed")
    assert rep["errors"][0] == rep["message"] and len(rep["errors"]) >= 2
    assert rep["modules"] == [] and rep["units_compiled"] == 0 and rep["hash"] == ""
    assert not (tmp_path / "cache").exists()  # nothing was compiled or cached
    rep = tb.build_workdir(str(d), str(tmp_path / "cache"), "sm_90", profile="kernelbench")
    assert rep["code"] == "hack.harness_tampering"


def test_compute_depends_on_the_profile(tmp_path: Path) -> None:
    d = workdir(tmp_path, COMPUTE)
    rep = tb.build_workdir(str(d), str(tmp_path / "cache"), "sm_90")
    assert rep["status"] == "refused" and rep["code"] == "hack.torch_compute"
    assert rep["message"].startswith("model_new.py:13: torch.relu() is torch compute")


def test_unparsable_model_new_is_load_failed(tmp_path: Path) -> None:
    d = workdir(tmp_path, "def f(:\n")
    rep = tb.build_workdir(str(d), str(tmp_path / "cache"), "sm_90")
    assert rep["status"] == "refused" and rep["code"] == "candidate.load_failed"
    assert rep["message"].startswith("model_new.py:1: not valid Python")
    rep = tb.build_workdir(str(tmp_path / "nothere"), str(tmp_path / "cache"), "sm_90")
    assert rep["status"] == "build.no_sources"  # no workdir: the builder's own verdict


def test_bad_profile_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="profile"):
        tb.build_workdir(str(FIXTURES / "workdir"), str(tmp_path), "sm_90", profile="x")
    out = subprocess.run([sys.executable, "-m", "cuda_agent_bridge.torch_build", "workdir",
                          str(FIXTURES / "workdir"), "--cache", str(tmp_path), "--arch", "sm_90",
                          "--profile", "lenient"], capture_output=True, text=True, timeout=60,
                         cwd=PYTHON_DIR)
    assert out.returncode == 2


def test_cli_reports_the_refusal(tmp_path: Path) -> None:
    d = workdir(tmp_path, TAMPERING)
    out = subprocess.run([sys.executable, "-m", "cuda_agent_bridge.torch_build", "workdir",
                          str(d), "--cache", str(tmp_path / "c"), "--arch", "sm_90",
                          "--profile", "kernelbench"], capture_output=True, text=True,
                         timeout=120, cwd=PYTHON_DIR)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1
    rep = json.loads(lines[0])
    assert rep["status"] == "refused" and rep["code"] == "hack.harness_tampering"
    assert set(rep) >= {"status", "message", "errors", "code", "notes", "torch_lib", "modules"}


def test_accepted_workdir_reports_torch_lib_for_the_symbol_check(tmp_path: Path) -> None:
    rep = tb.build_workdir(str(FIXTURES / "workdir"), str(tmp_path / "cache"), "sm_90")
    assert rep["status"] == "ok" and rep["code"] == "" and rep["notes"] == [], rep
    assert (Path(rep["torch_lib"]) / "libc10.so").is_file()
