"""describe: the spec of args, params and outputs, and the ready event."""

from __future__ import annotations

import platform
from pathlib import Path

import torch

from support import ELEMENTWISE, LINEAR_SCALE, TWO_OUTPUTS, Bridge, write_task


def test_ready_event(bridge: Bridge) -> None:
    ready = bridge.ready
    assert ready["event"] == "ready"
    assert ready["torch"] == torch.__version__
    assert ready["python"] == platform.python_version()
    assert ready["device"] == "cpu"
    assert ready["gpu_name"] is None and ready["l2_bytes"] is None
    assert ready["cuda"] == torch.version.cuda


def test_elementwise(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "relu", ELEMENTWISE)
    result = bridge.ok("describe", task_dir=str(task), seed=1)
    assert result == {
        "args": [
            {"index": 0, "name": "x", "dtype": "float32", "shape": [16, 32], "device": "cuda",
             "structure": {"perturb": "elements"}}
        ],
        "params": [],
        "outputs": [
            {"index": 0, "name": "output", "dtype": "float32", "shape": [16, 32], "device": "cuda"}
        ],
        "precision": "fp32",
        "degenerate": None,
        "module_mode": "eval",  # the default: the cuda-agent rules' (docs/torch-rules.md)
    }


def test_params_and_scalar_arg(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "linear", LINEAR_SCALE)
    result = bridge.ok("describe", task_dir=str(task), seed=2)
    assert [(a["name"], a["dtype"], a["shape"], a["device"]) for a in result["args"]] == [
        ("x", "float32", [4, 8], "cuda"),
        ("scale", "float64", [], "cpu"),
    ]
    # state_dict() order: the module's own buffers, then its children's tensors.
    assert [(p["index"], p["name"], p["shape"]) for p in result["params"]] == [
        (0, "offset", [6]),
        (1, "linear.weight", [6, 8]),
        (2, "linear.bias", [6]),
    ]
    assert [(o["name"], o["shape"]) for o in result["outputs"]] == [("output", [4, 6])]


def test_two_outputs(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "two", TWO_OUTPUTS)
    result = bridge.ok("describe", task_dir=str(task), seed=3)
    assert [(a["name"], a["shape"]) for a in result["args"]] == [("a", [3, 5]), ("b", [3, 5])]
    assert [(o["index"], o["name"], o["shape"]) for o in result["outputs"]] == [
        (0, "output.0", [3, 5]),
        (1, "output.1", [3]),
    ]


def test_nested_outputs_flatten_depth_first(bridge: Bridge, tmp_path: Path) -> None:
    source = """
    import torch
    from torch import nn
    class Model(nn.Module):
        def forward(self, x, *rest):
            return (x + 1, [x.sum(0), (x.mean(1), x.argmax(1))])
    def get_inputs():
        return [torch.randn(2, 3), 4, True]
    def get_init_inputs():
        return []
    """
    task = write_task(tmp_path, "nested", source)
    result = bridge.ok("describe", task_dir=str(task), seed=0)
    assert [(a["name"], a["dtype"], a["device"]) for a in result["args"]] == [
        ("x", "float32", "cuda"),
        ("rest.0", "int64", "cpu"),
        ("rest.1", "bool", "cpu"),
    ]
    assert [(o["name"], o["dtype"], o["shape"]) for o in result["outputs"]] == [
        ("output.0", "float32", [2, 3]),
        ("output.1", "float32", [3]),
        ("output.2", "float32", [2]),
        ("output.3", "int64", [2]),
    ]


def test_bf16_precision(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "bf16", LINEAR_SCALE, {"id": "t", "precision": "bf16"})
    result = bridge.ok("describe", task_dir=str(task), seed=4)
    assert result["precision"] == "bf16"
    assert [a["dtype"] for a in result["args"]] == ["bfloat16", "float64"]  # numbers stay float64
    assert {p["dtype"] for p in result["params"]} == {"bfloat16"}
    assert [o["dtype"] for o in result["outputs"]] == ["bfloat16"]


def test_integer_inputs_are_not_cast(bridge: Bridge, tmp_path: Path) -> None:
    source = """
    import torch
    from torch import nn
    class Model(nn.Module):
        def forward(self, x, idx):
            return x[idx]
    def get_inputs():
        return [torch.randn(8, 4), torch.randint(0, 8, (5,))]
    def get_init_inputs():
        return []
    """
    task = write_task(tmp_path, "gather", source, {"precision": "fp16"})
    result = bridge.ok("describe", task_dir=str(task), seed=5)
    assert [a["dtype"] for a in result["args"]] == ["float16", "int64"]
    assert result["outputs"][0]["dtype"] == "float16"


def test_edit_of_model_py_is_picked_up(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "edit", ELEMENTWISE)
    assert bridge.ok("describe", task_dir=str(task), seed=1)["outputs"][0]["shape"] == [16, 32]
    write_task(tmp_path, "edit", ELEMENTWISE.replace("torch.relu(x) * 2.0", "x.sum(0)"))
    assert bridge.ok("describe", task_dir=str(task), seed=1)["outputs"][0]["shape"] == [32]


STRUCTURED = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, s, b, m):
        return torch.tril(a) @ s + torch.bucketize(m, b).float()[:, None] * 0


def get_inputs():
    x = torch.randn(24, 24)
    return [torch.tril(torch.randn(24, 24)), x + x.T, torch.sort(torch.randn(9)).values,
            torch.randint(0, 3, (24,)).float()]


def get_init_inputs():
    return []
"""


def test_structure_of_inputs(bridge: Bridge, tmp_path: Path) -> None:
    """What get_inputs() guarantees, found over three draws, and how each may be perturbed."""
    task = write_task(tmp_path, "structured", STRUCTURED)
    result = bridge.ok("describe", task_dir=str(task), seed=4)
    assert [a["structure"] for a in result["args"]] == [
        {"perturb": "elements", "fixed_zeros": True},
        {"perturb": "symmetric", "symmetric": True},
        {"perturb": "uniform", "sorted_dim": 0, "descending": False},
        {"perturb": "none", "discrete": True},
    ]


GROUPNORM_MEAN = """
import torch
import torch.nn as nn


class Model(nn.Module):
    \"\"\"KernelBench level2/23's shape: conv, GroupNorm, then the mean of everything: with
    GroupNorm's own initialization (weight 1, bias 0) the output is 0 up to rounding.\"\"\"

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 8, 3)
        self.norm = nn.GroupNorm(4, 8)

    def forward(self, x):
        return self.norm(self.conv(x)).mean(dim=[1, 2, 3, 4])


def get_inputs():
    return [torch.randn(4, 3, 6, 6, 6)]


def get_init_inputs():
    return []
"""


def test_degenerate_task_is_verified_with_perturbed_parameters(bridge: Bridge,
                                                              tmp_path: Path) -> None:
    task = write_task(tmp_path, "gn_mean", GROUPNORM_MEAN)
    deg = bridge.ok("describe", task_dir=str(task), seed=5)["degenerate"]
    assert deg is not None and deg["kind"] == "zeros" and deg["max_abs"] < 1e-5
    # perturbed, GroupNorm's per-channel weights and biases make the mean depend on the input
    assert deg["params_perturbed"] is True and deg["after"] is None
    assert "degenerate" in deg["message"] and "perturbed parameters" in deg["message"]
