"""Degenerate reference outputs (cuda_agent_bridge.degenerate) and the perturbed parameters
that make a degenerate task's verification fail a kernel that does not compute."""

from __future__ import annotations

import torch
from torch import nn

from cuda_agent_bridge.degenerate import Judge, perturb_parameters


def judge(*draws: list[torch.Tensor], atol: float = 1e-2, rtol: float = 1e-2) -> str | None:
    j = Judge(atol, rtol)
    for d in draws:
        j.add(d)
    r = j.result()
    return None if r is None else r.kind


def test_kinds() -> None:
    g = torch.Generator().manual_seed(0)
    tiny = [[torch.randn(64, generator=g) * 1e-9] for _ in range(3)]
    assert judge(*tiny) == "zeros"
    const = [[torch.full((64,), 3.0) + torch.randn(64, generator=g) * 1e-4] for _ in range(3)]
    assert judge(*const) == "constant"
    fixed = torch.randn(64, generator=g)
    assert judge([fixed], [fixed.clone()], [fixed + 1e-5]) == "seed_invariant"
    assert judge(*[[torch.randn(64, generator=g)] for _ in range(3)]) is None
    # a constant that the tolerance does not cover is not constant
    assert judge(*[[torch.full((8,), 3.0) + torch.arange(8) * 0.1] for _ in range(2)]) == \
        "seed_invariant"


def test_one_varying_output_is_enough_to_be_useful() -> None:
    g = torch.Generator().manual_seed(1)
    draws = [[torch.zeros(4), torch.randn(16, generator=g)] for _ in range(3)]
    assert judge(*draws) is None


def test_nan_empty_and_shape_changes_say_nothing() -> None:
    assert judge([torch.tensor([float("nan"), 0.0])], [torch.zeros(2)]) is None
    assert judge([torch.zeros(0)]) is None
    assert judge([torch.zeros(3)], [torch.zeros(4)]) is None
    assert Judge(1e-2, 1e-2).result() is None


def test_message_and_json() -> None:
    j = Judge(1e-2, 1e-2)
    j.add([torch.zeros(5)])
    r = j.result()
    assert r is not None
    data = r.to_json()
    assert data["kind"] == "zeros" and data["params_perturbed"] is False and data["after"] is None
    assert "within tolerance of zeros" in str(data["message"])
    assert "can pass verification" in str(data["message"])


def test_perturb_parameters_is_deterministic_and_spares_buffers() -> None:
    def make() -> nn.Module:
        torch.manual_seed(3)
        return nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.GroupNorm(2, 4))

    a, b, plain = make(), make(), make()
    perturb_parameters(a, 11)
    perturb_parameters(b, 11)
    for (name, pa), pb, pp in zip(a.state_dict().items(), b.state_dict().values(),
                                  plain.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
        if "running" in name or "num_batches" in name:
            assert torch.equal(pa, pp), name  # buffers untouched
        else:
            assert not torch.equal(pa, pp), name  # zeros (biases) and ones (weights) move too
    c = make()
    perturb_parameters(c, 12)
    assert not torch.equal(c[0].weight, a[0].weight)
