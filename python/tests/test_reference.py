"""reference: params, inputs and outputs files match a direct torch computation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from cuda_agent_bridge.files import load_tensors
from support import LINEAR_SCALE, TWO_OUTPUTS, Bridge, import_task, write_task


def expected(
    task: Path, model_seed: int, seed: int, dtype: torch.dtype | None = None
) -> tuple[list[torch.Tensor], list[Any], Any]:
    """(state_dict tensors, get_inputs(), forward output) computed directly in this process."""
    mod = import_task(task)
    torch.manual_seed(model_seed)
    model = mod.Model(*mod.get_init_inputs())
    torch.manual_seed(seed)
    inputs = mod.get_inputs()
    if dtype is not None:
        model = model.to(dtype)
        inputs = [x.to(dtype) if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        out = model(*inputs)
    return list(model.state_dict().values()), inputs, out


def reference(bridge: Bridge, task: Path, out: Path, model_seed: int, seeds: list[int],
              with_outputs: bool = True) -> dict[str, object]:
    sets = [
        {
            "seed": s,
            "inputs_path": str(out / f"in{s}.safetensors"),
            "outputs_path": str(out / f"out{s}.safetensors") if with_outputs else None,
        }
        for s in seeds
    ]
    return bridge.ok("reference", task_dir=str(task), model_seed=model_seed,
                     params_path=str(out / "params.safetensors"), sets=sets)


def test_files_match_direct_computation(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "linear", LINEAR_SCALE)
    out = tmp_path / "ref"
    result = reference(bridge, task, out, model_seed=7, seeds=[11, 12])
    assert result["sets"] == 2 and isinstance(result["seconds"], float)

    params, inputs, output = expected(task, 7, 11)
    got_params = load_tensors(str(out / "params.safetensors"), "params")
    assert len(got_params) == 3
    assert all(torch.equal(a, b) for a, b in zip(got_params, params, strict=True))

    got_args = load_tensors(str(out / "in11.safetensors"), "args")
    assert torch.equal(got_args[0], inputs[0])
    assert got_args[1].dtype == torch.float64 and got_args[1].shape == ()
    assert got_args[1].item() == 0.5

    got_out = load_tensors(str(out / "out11.safetensors"), "outputs")
    assert len(got_out) == 1 and torch.equal(got_out[0], output)

    with safe_open(str(out / "out11.safetensors"), "pt") as f:
        assert f.metadata() == {"seed": "11", "kind": "outputs"}
    with safe_open(str(out / "params.safetensors"), "pt") as f:
        assert f.metadata() == {"seed": "7", "kind": "params"}
    # Atomic writes leave no temporary files behind.
    assert sorted(p.name for p in out.iterdir()) == [
        "in11.safetensors", "in12.safetensors", "out11.safetensors", "out12.safetensors",
        "params.safetensors",
    ]


def test_same_seed_same_bytes_other_seed_other_inputs(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "two", TWO_OUTPUTS)
    reference(bridge, task, tmp_path / "a", 1, [5, 6])
    reference(bridge, task, tmp_path / "b", 1, [5])
    # Same tensors (the safetensors header's metadata key order is not stable, so not bytes).
    for name, prefix in (("in5", "args"), ("out5", "outputs"), ("params", "params")):
        a = load_tensors(str(tmp_path / "a" / f"{name}.safetensors"), prefix)
        b = load_tensors(str(tmp_path / "b" / f"{name}.safetensors"), prefix)
        assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
        assert len(a) == {"args": 2, "outputs": 2, "params": 0}[prefix]
    in5 = load_tensors(str(tmp_path / "a" / "in5.safetensors"), "args")
    in6 = load_tensors(str(tmp_path / "a" / "in6.safetensors"), "args")
    assert len(in5) == 2 and not torch.equal(in5[0], in6[0])
    outs = load_tensors(str(tmp_path / "a" / "out6.safetensors"), "outputs")
    assert torch.equal(outs[0], in6[0] + in6[1])
    assert torch.equal(outs[1], (in6[0] * in6[1]).sum(dim=1))


def test_null_outputs_path_writes_inputs_only(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "two", TWO_OUTPUTS)
    reference(bridge, task, tmp_path / "r", 1, [3], with_outputs=False)
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "in3.safetensors", "params.safetensors",
    ]


def test_bf16_files(bridge: Bridge, tmp_path: Path) -> None:
    task = write_task(tmp_path, "bf16", LINEAR_SCALE, {"precision": "bf16"})
    out = tmp_path / "ref"
    reference(bridge, task, out, model_seed=2, seeds=[9])
    params, inputs, output = expected(task, 2, 9, torch.bfloat16)
    got_params = load_tensors(str(out / "params.safetensors"), "params")
    assert all(p.dtype == torch.bfloat16 for p in got_params)
    assert all(torch.equal(a, b) for a, b in zip(got_params, params, strict=True))
    got_args = load_tensors(str(out / "in9.safetensors"), "args")
    assert got_args[0].dtype == torch.bfloat16 and torch.equal(got_args[0], inputs[0])
    assert got_args[1].dtype == torch.float64
    got_out = load_tensors(str(out / "out9.safetensors"), "outputs")
    assert got_out[0].dtype == torch.bfloat16 and torch.equal(got_out[0], output)


def test_params_file_is_state_after_construction(bridge: Bridge, tmp_path: Path) -> None:
    # BatchNorm in training mode updates its running stats on every forward().
    source = """
    import torch
    from torch import nn
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(4)
        def forward(self, x):
            return self.bn(x)
    def get_inputs():
        return [torch.randn(8, 4) * 3 + 1]
    def get_init_inputs():
        return []
    """
    task = write_task(tmp_path, "bn", source)
    reference(bridge, task, tmp_path / "a", 3, [1])
    reference(bridge, task, tmp_path / "b", 3, [1])
    a = load_tensors(str(tmp_path / "a" / "params.safetensors"), "params")
    b = load_tensors(str(tmp_path / "b" / "params.safetensors"), "params")
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    assert torch.equal(a[2], torch.zeros(4))  # bn.running_mean as constructed


def test_non_contiguous_inputs_and_outputs(bridge: Bridge, tmp_path: Path) -> None:
    source = """
    import torch
    from torch import nn
    class Model(nn.Module):
        def forward(self, x):
            return x.t()
    def get_inputs():
        return [torch.randn(6, 4).t()]
    def get_init_inputs():
        return []
    """
    task = write_task(tmp_path, "transpose", source)
    reference(bridge, task, tmp_path / "r", 0, [8])
    x = load_tensors(str(tmp_path / "r" / "in8.safetensors"), "args")[0]
    y = load_tensors(str(tmp_path / "r" / "out8.safetensors"), "outputs")[0]
    torch.manual_seed(8)
    assert torch.equal(x, torch.randn(6, 4).t())
    assert torch.equal(y, x.t())
