"""Input sets off the generator's distribution that keep the task's contract (docs/protocol.md,
"In-distribution inputs").

A kernel right only for i.i.d. draws of ``get_inputs()`` (a row mean over half of each row, a
norm or a loss over a subsample, a softmax statistic over a few elements) is within tolerance
for every plain draw. So every set the bridge makes from a secret seed (verification trials,
rotation sets, fresh checked sets, the final set; near-duplicates start from their base set's
variation) is varied, with a plan chosen from that seed alone:

- ``plain`` (probability 1/8): the draw as it is;
- otherwise **steps** along every dimension of every varied tensor, always: along dimension d
  a split point k (uniform in [n/4, 3n/4]) divides the tensor into a front and a back part,
  shifted differently; then **noise**, always: every element moved on its own (additive,
  NOISE_STD standard deviations times a N(0, 1) draw; a factor exp(NOISE_LOG * N(0, 1)) for a
  one-signed tensor, at most 1 for one within [-1, 1]), so that a statistic of any fixed subset
  of the elements is off by several of its standard errors; and a **comb**, always: in memory
  order, each of the low COMB_BITS bits b of an element's index adds +-c_b (a sign and a size
  of COMB_STD standard deviations per bit; a factor for a one-signed tensor), zero on average
  over every aligned run of 2^COMB_BITS elements, so a subsample of every other element or every
  other line of 2^b elements (a strided read of half the bytes) is off by c_b; plus, each with
  probability 1/2, **sort** (after the steps, along one
  dimension, ascending or descending), **scale** (the whole tensor by a factor in [1/4, 4];
  [1/2, 2] for fp16/bf16) and **outliers** (1 to 8 elements moved by 8 to 16 standard
  deviations).

What a tensor keeps (``Structure`` from the survey, and the signs and range the tensor itself
shows: a set is a draw of ``get_inputs()``, so whatever sign or range the task guarantees holds
in it, over the whole tensor where the survey sees a corner):
- untouched: Python numbers, integer and boolean tensors, ``discrete`` tensors (labels, masks,
  integer values), tensors with a non-finite value, empty ones; dtype, shape, device always;
- ``fixed_zeros``: every zero stays zero (edits apply to non-zero elements only; no sort);
- ``symmetric``: the last two dimensions share one step profile, combined commutatively
  (p[i] + p[j] or p[i] * p[j]), outliers are mirrored, no sort;
- ``sorted_dim``: its step moves the part with the larger values up (or the other down), sorts
  along it only, no outliers; a constant added or a positive factor applied along the sorted
  fibres keeps the order exactly (rounding is monotone);
- signs (every value >= 0, or every value <= 0): steps and scale multiply (positive factors),
  outliers move away from zero; only a tensor that has both signs is shifted additively
  (steps of +-a with the amplitudes summing to at most 3 standard deviations);
- range (every value in [-1, 1]: probabilities, cosines): only factors at most 1 (shrinking
  steps and scale), no outliers.
Sorting keeps every value (so signs and ranges too). Pure functions of their arguments.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .structure import Structure

PLAIN_IN = 8  # one set in PLAIN_IN is left plain
STEP_TOTAL_STD = 3.0  # additive steps: the amplitudes of all dimensions sum to at most this
STEP_TOTAL_FACTOR = 4.0  # multiplicative steps: the factors of all dimensions multiply to this
SCALE_MAX = 4.0
SCALE_MAX_HALF = 2.0  # fp16 / bf16
OUTLIERS_MAX = 8
OUTLIER_STD = (8.0, 16.0)
NOISE_STD = (4.0, 8.0)  # additive noise, in the tensor's standard deviations (fp16/bf16: half)
NOISE_LOG = (0.25, 0.5)  # multiplicative noise: exp(a * N(0, 1)), a in this range
COMB_BITS = 7  # the comb's period: 128 elements (lines of 1 to 64 elements)
COMB_STD = (0.25, 0.5)  # each bit's size, in standard deviations (a log factor: a tenth)
EXTRAS = ("sort", "scale", "outliers")
HALF_DTYPES = (torch.float16, torch.bfloat16)
SORT_CHUNK = 1 << 26  # elements sorted at once


@dataclass(frozen=True)
class Plan:
    """What a set's variation does: nothing (``plain``), or steps plus ``extras``."""

    plain: bool
    extras: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "plain" if self.plain else "+".join(("steps", *self.extras))


def generator(seed: int) -> torch.Generator:
    """A CPU generator for the variation of the set of ``seed``: a stream of its own (not
    torch.manual_seed(seed)'s, which made the set)."""
    digest = hashlib.sha256(b"cuda-agent vary " + seed.to_bytes(8, "little")).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def _uniform(gen: torch.Generator, low: float, high: float) -> float:
    return low + (high - low) * float(torch.rand((), generator=gen, dtype=torch.float64))


def _coin(gen: torch.Generator) -> bool:
    return bool(torch.rand((), generator=gen) < 0.5)


def plan(seed: int) -> Plan:
    """The plan of the set of ``seed`` (deterministic)."""
    gen = generator(seed)
    if int(torch.randint(PLAIN_IN, (), generator=gen)) == 0:
        return Plan(plain=True)
    return Plan(plain=False, extras=tuple(e for e in EXTRAS if _coin(gen)))


@dataclass(frozen=True)
class _Kind:
    """How a tensor's values may move."""

    additive: bool  # both signs: shifts allowed
    shrink_only: bool  # within [-1, 1]: factors at most 1
    sign: float  # +1 / -1 for a one-signed tensor (outliers move this way), 0 with both signs


def _kind(t: torch.Tensor) -> _Kind:
    """Read off the set itself: a draw of get_inputs() has every sign or range it guarantees
    (over the whole tensor, where the survey sees a corner)."""
    low, high = (float(v) for v in torch.aminmax(t))  # no temporary of t's size
    nonneg, nonpos = low >= 0, high <= 0
    unit = low >= -1 and high <= 1
    sign = 1.0 if nonneg else -1.0 if nonpos else 0.0
    return _Kind(additive=not (nonneg or nonpos) and not unit, shrink_only=unit, sign=sign)


def _profile(gen: torch.Generator, n: int) -> tuple[int, bool]:
    """A split point in [n/4, 3n/4] (within [1, n-1]) and which part moves."""
    low, high = max(1, n // 4), max(1, min(n - 1, (3 * n) // 4))
    k = int(torch.randint(low, high + 1, (), generator=gen))
    return k, _coin(gen)


def _sorted_step(n: int, k: int, share: float, kind: _Kind, std: float,
                 descending: bool) -> torch.Tensor:
    """A step along a sorted dimension that keeps the order: the part holding the larger
    values ([k, n) ascending, [0, k) descending) moves up, or the other part down."""
    upper = torch.zeros(n, dtype=torch.bool)
    if descending:
        upper[:k] = True
    else:
        upper[k:] = True
    if kind.additive:
        return upper.double() * (STEP_TOTAL_STD * std * share)
    f = STEP_TOTAL_FACTOR ** share  # > 1
    if kind.shrink_only:  # toward zero: the lower part of nonnegative values goes down, the
        # upper part of nonpositive ones up
        part, factor = (~upper, 1.0 / f) if kind.sign > 0 else (upper, 1.0 / f)
    else:  # away from zero: nonnegative values up, nonpositive ones down
        part, factor = (upper, f) if kind.sign > 0 else (~upper, f)
    return torch.where(part, factor, 1.0).double()


def _steps(x: torch.Tensor, st: Structure, kind: _Kind, std: float,
           gen: torch.Generator) -> torch.Tensor:
    """x shifted (or scaled) by a two-level profile along every dimension it may be."""
    dims = [d for d in range(x.dim()) if x.shape[d] >= 2]
    if st.symmetric:  # the last two dimensions share one profile
        dims = [d for d in dims if d != x.dim() - 1]
    if st.sorted_dim is not None and not kind.additive and kind.sign == 0.0:
        dims = [d for d in dims if d != st.sorted_dim]  # shrinking both signs: no safe step
    if not dims:
        return x
    share = 1.0 / len(dims)
    total: torch.Tensor | None = None
    for d in dims:
        n = x.shape[d]
        k, back = _profile(gen, n)
        u = _uniform(gen, 0.5, 1.0)
        if d == st.sorted_dim:
            p = _sorted_step(n, k, u * share, kind, std, st.descending)
        elif kind.additive:
            a = STEP_TOTAL_STD * std * share * u * (1.0 if _coin(gen) else -1.0)
            p = torch.full((n,), a, dtype=torch.float64)
            p[k:] = -a
        else:
            f = STEP_TOTAL_FACTOR ** (share * u * (-1.0 if kind.shrink_only else 1.0))
            p = torch.ones(n, dtype=torch.float64)
            if back:
                p[k:] = f
            else:
                p[:k] = f
        p = p.to(x.device, x.dtype)
        if st.symmetric and d == x.dim() - 2:
            m = p.view(-1, 1) + p.view(1, -1) if kind.additive else p.view(-1, 1) * p.view(1, -1)
            shape = [1] * x.dim()
            shape[-2], shape[-1] = n, n
            part = m.view(shape)
        else:
            shape = [1] * x.dim()
            shape[d] = n
            part = p.view(shape)
        if total is None:
            total = part
        else:
            total = total + part if kind.additive else total * part
    assert total is not None
    return x.add_(total) if kind.additive else x.mul_(total)


def _noise(x: torch.Tensor, st: Structure, kind: _Kind, std: float, half: bool,
           gen: torch.Generator) -> torch.Tensor:
    """Every element moved on its own by a N(0, 1) draw (symmetric in a symmetric tensor), drawn
    on x's device from a generator seeded by gen."""
    lo, hi = NOISE_LOG if not kind.additive else NOISE_STD
    amp = _uniform(gen, lo, hi) * (0.5 if half else 1.0)
    dev_gen = torch.Generator(device=x.device).manual_seed(
        int(torch.randint(2**62, (), generator=gen)))
    eps = torch.randn(x.shape, generator=dev_gen, device=x.device, dtype=x.dtype)
    if st.symmetric and x.dim() >= 2:
        eps = (eps + eps.transpose(-1, -2)).mul_(math.sqrt(0.5))
    if kind.additive:
        return x.add_(eps.mul_(amp * std))
    if kind.shrink_only:
        eps.abs_().neg_()
    return x.mul_(eps.mul_(amp).exp_())


def _comb(x: torch.Tensor, kind: _Kind, std: float, gen: torch.Generator) -> torch.Tensor:
    """The comb: sum over bits b < COMB_BITS of sign_b * size_b * (-1)^(bit b of the index)."""
    period = 1 << COMB_BITS
    index = torch.arange(period)
    pattern = torch.zeros(period, dtype=torch.float64)
    for b in range(COMB_BITS):
        size = _uniform(gen, *COMB_STD) * (1.0 if kind.additive else 0.1)
        sign = 1.0 if _coin(gen) else -1.0
        pattern += sign * size * (1.0 - 2.0 * ((index >> b) & 1).double())
    flat = x.view(-1)
    whole = flat.numel() // period * period
    rows = flat[:whole].view(-1, period)
    tail = flat[whole:]
    p = pattern.to(x.device, x.dtype)
    if kind.additive:
        rows.add_(p.mul(std))
        tail.add_(p[:tail.numel()].mul(std))
    else:
        if kind.shrink_only:
            p = p.abs().neg()
        rows.mul_(p.exp())
        tail.mul_(p[:tail.numel()].exp())
    return x


def _outliers(x: torch.Tensor, st: Structure, kind: _Kind, std: float,
              gen: torch.Generator) -> torch.Tensor:
    """1 to OUTLIERS_MAX elements moved by 8 to 16 standard deviations (away from zero for a
    one-signed tensor; mirrored in a symmetric one)."""
    flat = x.view(-1)
    count = 1 + int(torch.randint(OUTLIERS_MAX, (), generator=gen))
    where = torch.randint(flat.numel(), (count,), generator=gen)
    if st.symmetric:  # one position per pair (r, c) / (c, r): its upper-triangle twin
        n = x.shape[-1]
        batch, rc = where // (n * n), where % (n * n)
        r, c = rc // n, rc % n
        where = batch * n * n + torch.minimum(r, c) * n + torch.maximum(r, c)
    where = torch.unique(where)
    size = torch.empty(where.numel(), dtype=torch.float64).uniform_(
        OUTLIER_STD[0], OUTLIER_STD[1], generator=gen) * std
    if kind.sign == 0.0:
        signs = torch.randint(2, (where.numel(),), generator=gen).double() * 2 - 1
    else:
        signs = torch.full((where.numel(),), kind.sign, dtype=torch.float64)
    moves = size * signs
    if st.symmetric:
        n = x.shape[-1]
        batch, rc = where // (n * n), where % (n * n)
        mirror = batch * n * n + (rc % n) * n + rc // n
        off = mirror != where  # a diagonal element moves once
        where, moves = torch.cat([where, mirror[off]]), torch.cat([moves, moves[off]])
    where = where.to(flat.device)
    flat[where] += moves.to(flat.device, flat.dtype)  # distinct positions
    return x


def _sort(x: torch.Tensor, dim: int, descending: bool) -> None:
    """Sorts x along dim in place, in pieces of at most SORT_CHUNK elements cut along another
    dimension (a sort's int64 indices take twice a float32 tensor's bytes)."""
    other = [d for d in range(x.dim()) if d != dim and x.shape[d] >= 2]
    if x.numel() <= SORT_CHUNK or not other:
        x.copy_(torch.sort(x, dim=dim, descending=descending).values)
        return
    cut = max(other, key=lambda d: x.shape[d])
    step = max(1, SORT_CHUNK * x.shape[cut] // x.numel())
    for start in range(0, x.shape[cut], step):
        piece = x.narrow(cut, start, min(step, x.shape[cut] - start))
        piece.copy_(torch.sort(piece, dim=dim, descending=descending).values)


def vary_tensor(t: torch.Tensor, st: Structure | None, plan_: Plan,
                gen: torch.Generator) -> torch.Tensor:
    """``t`` varied by ``plan_`` (draws from ``gen``), keeping ``st`` (None: no structure known;
    the tensor's own signs and range are kept all the same)."""
    if plan_.plain or not t.is_floating_point() or t.numel() == 0:
        return t
    st = st if st is not None else Structure()
    if st.discrete or not bool(torch.isfinite(t).all()):
        return t
    x = t.to(torch.float64 if t.dtype == torch.float64 else torch.float32).clone()
    kind = _kind(x)
    std = float(x.std()) if x.numel() > 1 else 0.0
    if not math.isfinite(std) or std == 0.0:
        std = float(x.abs().mean()) or 1.0
    x = _steps(x, st, kind, std, gen)
    if st.sorted_dim is None:  # a sorted fibre keeps its order: no element moves on its own
        x = _noise(x, st, kind, std, t.dtype in HALF_DTYPES, gen)
        if not st.symmetric:
            x = _comb(x, kind, std, gen)
    if "sort" in plan_.extras and not st.fixed_zeros and not st.symmetric and x.dim() >= 1:
        if st.sorted_dim is not None:
            dim, desc = st.sorted_dim, st.descending
        else:
            dims = [d for d in range(x.dim()) if x.shape[d] >= 2]
            dim = dims[int(torch.randint(len(dims), (), generator=gen))] if dims else 0
            desc = _coin(gen)
        # after the steps: a sorted fibre's first half differs from its mean whatever the
        # step did along it (sorting first, a step could cancel the sort's bias)
        _sort(x, dim, desc)
    if "scale" in plan_.extras:
        top = SCALE_MAX_HALF if t.dtype in HALF_DTYPES else SCALE_MAX
        exponent = _uniform(gen, -1.0, 0.0 if kind.shrink_only else 1.0)
        x.mul_(top ** exponent)
    if "outliers" in plan_.extras and st.sorted_dim is None and not kind.shrink_only:
        x = _outliers(x, st, kind, std, gen)
    if st.fixed_zeros:
        x.masked_fill_(t == 0, 0.0)
    return x.to(t.dtype)


def vary(tensors: Sequence[object], seed: int,
         structure: Sequence[Structure | None]) -> tuple[list[object], Plan]:
    """Each floating-point tensor of a set varied by the plan of ``seed`` (its own draws, in
    argument order, from ``generator(seed)``), everything else as it is; and the plan."""
    p = plan(seed)
    if p.plain:
        return list(tensors), p
    gen = generator(seed)
    gen.manual_seed(gen.initial_seed() ^ 0x5A5A5A5A)  # not the plan's own draws again
    out: list[object] = []
    for i, t in enumerate(tensors):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() >= 1:
            out.append(vary_tensor(t, structure[i] if i < len(structure) else None, p, gen))
        else:
            out.append(t)
    return out, p
