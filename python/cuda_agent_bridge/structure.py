"""Input structure: what a task's ``get_inputs()`` guarantees about each floating-point tensor,
found by drawing several sets, and the edits of a set that keep it (docs/protocol.md,
"In-distribution inputs").

Contract:
- ``detect(draws)`` takes ``STRUCTURE_DRAWS`` sets of the same task (the ``files`` of
  ``TaskStore.inputs`` under fixed seeds, each tensor reduced by ``probe``: its leading corner of
  at most ``PROBE_ELEMENTS`` elements, so that detection costs little on 6 GB inputs) and returns
  one ``Structure`` per argument (None for Python numbers and non-float tensors). A property is
  reported only when it holds in every draw: it is then something the task guarantees, not
  chance. A corner has every property the whole tensor has (a triangle's corner is a triangle, a
  symmetric matrix's leading block is symmetric, a sorted run's prefix is sorted).
  - ``discrete``: every value an integer, or at most ``DISCRETE_MAX_VALUES`` distinct values
    among at least 4 times as many elements (class labels stored as floats, 0/1 masks): such a
    tensor is never scaled.
  - ``fixed_zeros``: the same elements are zero in every draw (triangular, banded).
  - ``symmetric``: equal to its transpose over the last two dimensions.
  - ``sorted_dim`` / ``descending``: ordered along that dimension (size >= 2).
- ``Structure.perturb`` names how the supervisor moves the tensor between timed calls
  (src/device/prep.h): ``elements`` (each element at its value or half of it, independently),
  ``symmetric`` (elements (r, c) and (c, r) together), ``uniform`` (the whole tensor at once:
  keeps order) or ``none`` (discrete values). Every one keeps fixed zeros, signs and ranges.
- ``mix(base, donor, seed, structure)`` (the near-duplicates of checked calls) replaces a few
  elements of ``base`` with ``donor``'s (another draw of the same task) at the same positions,
  mirrored for symmetric tensors, then re-sorts sorted ones: every element is one the task could
  have drawn there.
Pure functions of their arguments; nothing here runs task code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

STRUCTURE_DRAWS = 3
STRUCTURE_SEEDS = (0x5EED0001, 0x5EED0002, 0x5EED0003)
DISCRETE_MAX_VALUES = 16
# Detection looks at a corner of at most this many elements of a larger tensor.
PROBE_ELEMENTS = 1 << 20
NEAR_MAX_CHANGES = 256


@dataclass(frozen=True)
class Structure:
    discrete: bool = False
    fixed_zeros: bool = False
    symmetric: bool = False
    sorted_dim: int | None = None
    descending: bool = False

    @property
    def perturb(self) -> str:
        if self.discrete:
            return "none"
        if self.sorted_dim is not None:
            return "uniform"
        if self.symmetric:
            return "symmetric"
        return "elements"

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"perturb": self.perturb}
        if self.discrete:
            out["discrete"] = True
        if self.fixed_zeros:
            out["fixed_zeros"] = True
        if self.symmetric:
            out["symmetric"] = True
        if self.sorted_dim is not None:
            out["sorted_dim"] = self.sorted_dim
            out["descending"] = self.descending
        return out


def probe(t: object) -> object:
    """The leading corner of a floating-point tensor (dimensions halved, largest first, square
    last two kept square) with at most PROBE_ELEMENTS elements, as a copy; anything else as it
    is."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.numel() <= PROBE_ELEMENTS:
        return t
    sizes = list(t.shape)
    square = t.dim() >= 2 and sizes[-1] == sizes[-2]
    while _prod(sizes) > PROBE_ELEMENTS:
        d = max(range(len(sizes)), key=lambda k: sizes[k])
        sizes[d] = (sizes[d] + 1) // 2
        if square and d >= len(sizes) - 2:
            sizes[-1] = sizes[-2] = sizes[d]
    out = t
    for d, n in enumerate(sizes):
        out = out.narrow(d, 0, n)
    return out.clone()


def _prod(sizes: list[int]) -> int:
    n = 1
    for s in sizes:
        n *= s
    return n


def _discrete(draws: list[torch.Tensor]) -> bool:
    """Integer values only, or few distinct values among many (a handful of elements always
    has few distinct values: at least 4 per allowed value must have been seen)."""
    values: set[float] = set()
    integral, seen = True, 0
    for t in draws:
        s = t.reshape(-1).double()
        seen += s.numel()
        finite = s[torch.isfinite(s)]
        integral = integral and bool(torch.equal(finite, finite.round()))
        if len(values) <= DISCRETE_MAX_VALUES:
            values.update(torch.unique(s).tolist()[: DISCRETE_MAX_VALUES + 1])
    return integral or (len(values) <= DISCRETE_MAX_VALUES and seen >= 4 * DISCRETE_MAX_VALUES)


def _sorted_dim(draws: list[torch.Tensor]) -> tuple[int | None, bool]:
    first = draws[0]
    for dim in range(first.dim()):
        if first.shape[dim] < 2 or first.numel() < 4:
            continue
        for descending in (False, True):
            ok = True
            for t in draws:
                lo, hi = t.narrow(dim, 0, t.shape[dim] - 1), t.narrow(dim, 1, t.shape[dim] - 1)
                if not bool((hi <= lo).all() if descending else (hi >= lo).all()):
                    ok = False
                    break
            if ok:
                return dim, descending
    return None, False


def _symmetric(draws: list[torch.Tensor]) -> bool:
    first = draws[0]
    if first.dim() < 2 or first.shape[-1] != first.shape[-2] or first.shape[-1] < 2:
        return False
    return all(torch.equal(t, t.transpose(-1, -2)) for t in draws)


def _fixed_zeros(draws: list[torch.Tensor]) -> bool:
    """Zeros at the same, non-empty set of positions in every draw (zeros by chance move)."""
    zeros = draws[0] == 0
    return bool(zeros.any()) and all(torch.equal(t == 0, zeros) for t in draws[1:])


def detect_one(draws: list[torch.Tensor]) -> Structure | None:
    """The structure every draw of one argument shares (None: not a float tensor)."""
    if not draws or not all(isinstance(t, torch.Tensor) for t in draws):
        return None
    if not draws[0].is_floating_point() or draws[0].numel() == 0:
        return None
    if any(t.shape != draws[0].shape or t.dtype != draws[0].dtype for t in draws):
        return Structure()  # shapes vary between draws: nothing to keep
    if _discrete(draws):
        return Structure(discrete=True, fixed_zeros=_fixed_zeros(draws))
    dim, descending = _sorted_dim(draws)
    return Structure(fixed_zeros=_fixed_zeros(draws), symmetric=_symmetric(draws),
                     sorted_dim=dim, descending=descending)


def detect(draws: Sequence[Sequence[object]], scalar: Sequence[bool]) -> list[Structure | None]:
    """One Structure per argument from several draws of the same task's inputs."""
    out: list[Structure | None] = []
    for i, is_scalar in enumerate(scalar):
        if is_scalar:
            out.append(None)
            continue
        tensors = [d[i] for d in draws]
        out.append(detect_one([t for t in tensors if isinstance(t, torch.Tensor)])
                   if all(isinstance(t, torch.Tensor) for t in tensors) else None)
    return out


def _mirror(where: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Flat indices plus those of their transposes over the last two dimensions."""
    n = shape[-1]
    batch, rc = where // (n * n), where % (n * n)
    r, c = rc // n, rc % n
    return torch.cat([where, batch * n * n + c * n + r])


def mix(base: torch.Tensor, donor: torch.Tensor, gen: torch.Generator,
        structure: Structure | None) -> torch.Tensor:
    """``base`` with about one element in 4096 (1 to NEAR_MAX_CHANGES) taken from ``donor`` at
    the same positions (positions from ``gen``), keeping ``structure``."""
    flat = base.reshape(-1).clone()
    count = min(NEAR_MAX_CHANGES, max(1, flat.numel() // 4096))
    where = torch.randint(flat.numel(), (count,), generator=gen).to(flat.device)
    if structure is not None and structure.symmetric:
        where = _mirror(where, base.shape)
    flat[where] = donor.reshape(-1).to(flat.device, flat.dtype)[where]
    out = flat.view(base.shape)
    if structure is not None and structure.sorted_dim is not None:
        out = torch.sort(out, dim=structure.sorted_dim, descending=structure.descending).values
    return out
