"""refusal.Refusal in process: what a candidate's forward() may call from torch."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from cuda_agent_bridge.refusal import Refusal, TorchComputeRefused, refused_in


def test_refusal_allowlist_in_process() -> None:
    x = torch.randn(4, 6)
    with torch.no_grad(), Refusal() as r:
        y = torch.empty_like(x)
        y.copy_(x.contiguous().view(6, 4).t().reshape(4, 6))
        assert (x.shape, x.dtype, x.device, x.numel(), x[1:, :2].shape) == (
            torch.Size([4, 6]), torch.float32, torch.device("cpu"), 24, torch.Size([3, 2]))
    assert r.refused is None
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: x + 1, "torch.Tensor.add"), (lambda: x.sum(), "torch.Tensor.sum"),
        (lambda: torch.matmul(x, x.t()), "torch.matmul"),
        (lambda: x[torch.tensor([0])], "torch.Tensor.__getitem__"),
        (lambda: torch.nn.functional.gelu(x), "torch.nn.functional.gelu")]
    for fn, op in cases:
        with torch.no_grad(), Refusal() as r, pytest.raises(TorchComputeRefused):
            fn()
        assert r.refused == op


def test_honest_idioms_pass_and_layout_ops_are_compute() -> None:
    """Issue 46: allocate, zero, accumulate (zero_, fill_), a dtype change by .type(), a side
    stream's record_stream bookkeeping pass; cat, stack, pad and flip move elements between
    places and are kernels the candidate writes (docs/torch-rules.md, "What is compute")."""
    x = torch.randn(4, 6)
    with torch.no_grad(), Refusal() as r:
        out = torch.empty_like(x)
        out.zero_()
        out.fill_(0.0)
        assert x.type(torch.float64).dtype == torch.float64 and x.type() == "torch.FloatTensor"
    assert r.refused is None
    layout: list[tuple[Callable[[], object], str]] = [
        (lambda: torch.cat([x, x]), "torch.cat"), (lambda: torch.stack([x, x]), "torch.stack"),
        (lambda: torch.nn.functional.pad(x, (1, 1)), "torch.nn.functional.pad"),
        (lambda: x.flip(0), "torch.Tensor.flip")]
    for fn, op in layout:
        with torch.no_grad(), Refusal() as r, pytest.raises(TorchComputeRefused):
            fn()
        assert r.refused == op


def test_torch_spellings_of_views_pass_and_unfold_is_a_view() -> None:
    """Issue 46: torch.flatten(x, 1) is x.flatten(1) (leaderboard AlexNet and VGG candidates
    call it between their kernels), and so on for every view and copy Tensor allows; x.unfold
    is a strided view (a ViT's patches); F.unfold (im2col) and the layout ops stay compute."""
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad(), Refusal() as r:
        views = [torch.flatten(x, 1), torch.unflatten(x, 1, (3, 1)), torch.reshape(x, (-1,)),
                 torch.permute(x, (0, 2, 3, 1)), torch.transpose(x, 0, 1), torch.t(x[0, 0]),
                 torch.squeeze(x), torch.unsqueeze(x, 0), torch.narrow(x, 0, 0, 1),
                 torch.select(x, 0, 0), *torch.split(x, 1), *torch.chunk(x, 2),
                 *torch.unbind(x), torch.as_strided(x, (2,), (1,)), torch.detach(x),
                 torch.clone(x), x.unfold(2, 4, 4).unfold(3, 4, 4).contiguous()]
    assert r.refused is None and views[-1].shape == (2, 3, 2, 2, 4, 4)
    for fn, op in [(lambda: torch.nn.functional.unfold(x, 2), "torch.nn.functional.unfold"),
                   (lambda: torch.cat([x, x]), "torch.cat")]:
        with torch.no_grad(), Refusal() as r, pytest.raises(TorchComputeRefused):
            fn()
        assert r.refused == op


def test_refused_in_follows_causes_and_keeps_the_first_op() -> None:
    with Refusal() as r:
        try:
            try:
                torch.relu(torch.zeros(2))
            except TorchComputeRefused as inner:
                raise ValueError("wrapped") from inner
        except ValueError as outer:
            assert refused_in(outer) == "torch.relu"
        with pytest.raises(TorchComputeRefused):
            torch.exp(torch.zeros(2))
    assert r.refused == "torch.relu"
    assert refused_in(ValueError("plain")) is None
