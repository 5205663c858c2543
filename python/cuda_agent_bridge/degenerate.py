"""Degenerate tasks: a reference output that zeros, a constant or an earlier output would match
within the task's tolerance (docs/evaluation.md, "Degenerate tasks").

Contract:
- ``Judge(atol, rtol)`` takes the reference outputs of several input draws one draw at a time
  (``add``; only the first draw's outputs are kept) and ``result()`` says how degenerate they
  are, by the comparison rule of src/eval/compare.c (``|out - ref| <= atol + rtol * |ref|``):
  - ``zeros``: an output of zeros passes for every draw;
  - ``constant``: one constant per output passes for every draw (half the range of the values is
    within the tolerance of the smallest magnitude: a sufficient test, so a task flagged
    constant is one, and a borderline one may go unflagged);
  - ``seed_invariant``: the first draw's output passes for every later draw (the output does not
    depend on the inputs: a cache passes).
  The most specific kind is reported (zeros implies constant implies seed_invariant), or None.
- ``perturb_parameters(model, seed)`` moves every floating-point parameter (not buffers: running
  statistics must stay valid) by half its mean magnitude (1 where that is 0) times a standard
  normal draw from ``seed``: deterministic, so every process that builds the model agrees.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

KINDS = ("zeros", "constant", "seed_invariant")


@dataclass(frozen=True)
class Degeneracy:
    kind: str
    max_abs: float  # the largest |reference| over every draw
    half_range: float  # the largest (max - min) / 2 of one output over every draw
    seed_change: float  # the largest |reference(draw k) - reference(draw 0)|
    atol: float
    rtol: float
    params_perturbed: bool = False  # verification uses perturbed parameters
    after: str | None = None  # the kind still found with perturbed parameters

    def message(self) -> str:
        what = {
            "zeros": f"its reference outputs are within tolerance of zeros (largest magnitude "
                     f"{self.max_abs:.3g}, atol {self.atol:g})",
            "constant": f"its reference outputs are within tolerance of a constant (half range "
                        f"{self.half_range:.3g}, atol {self.atol:g}, rtol {self.rtol:g})",
            "seed_invariant": f"its reference outputs do not change with the inputs (largest "
                              f"change across seeds {self.seed_change:.3g}, atol {self.atol:g})",
        }[self.kind]
        if not self.params_perturbed:
            how = "a kernel that does not compute can pass verification"
        elif self.after is None:
            how = "verification uses perturbed parameters, under which it is not"
        else:
            how = (f"with perturbed parameters it is still {self.after.replace('_', ' ')}, so a "
                   "kernel that does not compute can pass verification")
        return f"the task is degenerate: {what}; {how}"

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "max_abs": self.max_abs, "half_range": self.half_range,
                "seed_change": self.seed_change, "atol": self.atol, "rtol": self.rtol,
                "params_perturbed": self.params_perturbed, "after": self.after,
                "message": self.message()}


class Judge:
    """Accumulates the reference outputs of input draws; see the module's contract."""

    def __init__(self, atol: float, rtol: float) -> None:
        self.atol, self.rtol = atol, rtol
        self.first: list[torch.Tensor] | None = None
        self.zeros = self.invariant = True
        self.lo: list[float] = []
        self.hi: list[float] = []
        self.min_abs: list[float] = []
        self.max_abs = self.seed_change = 0.0
        self.usable = True

    def _within(self, out: torch.Tensor | float, ref: torch.Tensor) -> bool:
        return bool((torch.abs(out - ref) <= self.atol + self.rtol * torch.abs(ref)).all())

    def add(self, outputs: list[torch.Tensor]) -> None:
        # fp32 and fp64 as they are (a 6 GB output is not copied), others widened to fp32
        refs = [o.detach() if o.dtype in (torch.float32, torch.float64) else o.detach().float()
                for o in outputs]
        if not refs or any(r.numel() == 0 or not bool(torch.isfinite(r).all()) for r in refs):
            self.usable = False  # empty, NaN or infinite references: nothing to say
            return
        if self.first is None:
            self.first = refs
            self.lo = [float(r.min()) for r in refs]
            self.hi = [float(r.max()) for r in refs]
            self.min_abs = [float(r.abs().min()) for r in refs]
        elif len(refs) != len(self.first) or any(
                a.shape != b.shape for a, b in zip(refs, self.first, strict=True)):
            self.usable = False
            return
        else:
            for i, (r, f) in enumerate(zip(refs, self.first, strict=True)):
                self.invariant = self.invariant and self._within(f, r)
                self.seed_change = max(self.seed_change, float((r - f).abs().max()))
                self.lo[i] = min(self.lo[i], float(r.min()))
                self.hi[i] = max(self.hi[i], float(r.max()))
                self.min_abs[i] = min(self.min_abs[i], float(r.abs().min()))
        for r in refs:
            self.zeros = self.zeros and self._within(0.0, r)
            self.max_abs = max(self.max_abs, float(r.abs().max()))

    def result(self) -> Degeneracy | None:
        if not self.usable or self.first is None:
            return None
        half = [(h - lo) / 2 for lo, h in zip(self.lo, self.hi, strict=True)]
        constant = all(hr <= self.atol + self.rtol * m
                       for hr, m in zip(half, self.min_abs, strict=True))
        kind = ("zeros" if self.zeros else "constant" if constant
                else "seed_invariant" if self.invariant else None)
        if kind is None:
            return None
        return Degeneracy(kind, self.max_abs, max(half), self.seed_change, self.atol, self.rtol)


@torch.no_grad()
def perturb_parameters(model: nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed((seed ^ 0x5EEDDE6E) & (2**63 - 1))
    for _, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        if not p.is_floating_point() or p.numel() == 0:
            continue
        scale = float(p.detach().abs().float().mean())
        noise = torch.randn(p.shape, generator=gen).to(device=p.device, dtype=p.dtype)
        p.add_(noise * (0.5 * (scale if scale > 0 else 1.0)))
