"""Input sets off the generator's distribution (cuda_agent_bridge.vary): deterministic per seed,
every invariant the task guarantees kept, honest computations within tolerance, and a kernel
right only for i.i.d. draws (the mean of half of each row) wrong on every varied set."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import torch

from cuda_agent_bridge import tasks, vary
from cuda_agent_bridge.structure import Structure, detect_one

SEEDS = range(64)
ATOL = RTOL = 1e-2


def varied_seeds(n: int = 48) -> list[int]:
    return [s for s in range(4 * n) if not vary.plan(s).plain][:n]


def one(t: torch.Tensor, seed: int, st: Structure | None = None) -> torch.Tensor:
    (out,), _ = vary.vary([t], seed, [st])
    assert isinstance(out, torch.Tensor)
    return out


def surveyed(make: Callable[[torch.Generator], torch.Tensor]) -> Structure:
    st = detect_one([make(torch.Generator().manual_seed(s)) for s in range(3)])
    assert st is not None
    return st


def test_plans_plain_one_in_eight_and_every_extra_drawn() -> None:
    names = Counter(vary.plan(s).name for s in range(4000))
    assert 0.09 < names["plain"] / 4000 < 0.16
    extras = Counter(e for s in range(4000) for e in vary.plan(s).extras)
    assert all(0.35 * 4000 < extras[e] < 0.55 * 4000 for e in vary.EXTRAS)
    assert vary.plan(123) == vary.plan(123)


def test_deterministic_per_seed_and_seeds_differ() -> None:
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))
    a, b = varied_seeds(2)
    assert torch.equal(one(x, a), one(x, a))
    assert not torch.equal(one(x, a), one(x, b))
    assert not torch.equal(one(x, a), x)
    plain = next(s for s in SEEDS if vary.plan(s).plain)
    assert one(x, plain) is x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_dtype_shape_device_kept(dtype: torch.dtype) -> None:
    x = torch.randn(4, 8, 16).to(dtype)
    for s in varied_seeds(16):
        y = one(x, s)
        assert y.dtype == dtype and y.shape == x.shape and y.device == x.device
        assert bool(torch.isfinite(y).all())


def test_untouched_kinds() -> None:
    labels = torch.randint(0, 10, (64,)).float()
    mask = (torch.rand(32, 32) > 0.5).float()
    ints = torch.randint(0, 100, (16, 16))
    flags = torch.rand(8) > 0.5
    with_inf = torch.randn(16)
    with_inf[3] = float("-inf")
    number = torch.tensor(0.5, dtype=torch.float64)
    st_labels = surveyed(lambda g: torch.randint(0, 10, (64,), generator=g).float())
    for s in varied_seeds(16):
        out, _ = vary.vary([labels, mask, ints, flags, with_inf, number, 3.0], s,
                           [st_labels, Structure(discrete=True), None, None, None, None, None])
        assert out[0] is labels and out[1] is mask and out[2] is ints and out[3] is flags
        assert out[4] is with_inf and out[5] is number and out[6] == 3.0


def test_fixed_zeros_symmetric_sorted_kept() -> None:
    def tril(g: torch.Generator) -> torch.Tensor:
        return torch.tril(torch.randn(48, 48, generator=g))

    def sym(g: torch.Generator) -> torch.Tensor:
        a = torch.randn(3, 24, 24, generator=g)
        return a + a.transpose(-1, -2)

    def asc(g: torch.Generator) -> torch.Tensor:
        return torch.sort(torch.randn(6, 200, generator=g), dim=1).values

    def desc(g: torch.Generator) -> torch.Tensor:
        return torch.sort(torch.rand(300, generator=g) * 5, descending=True).values

    cases = [(tril, surveyed(tril)), (sym, surveyed(sym)), (asc, surveyed(asc)),
             (desc, surveyed(desc))]
    assert cases[0][1].fixed_zeros and cases[1][1].symmetric
    assert cases[2][1].sorted_dim == 1 and cases[3][1].descending
    moved = Counter[str]()
    for s in varied_seeds(48):
        for make, st in cases:
            x = make(torch.Generator().manual_seed(100 + s))
            y = one(x, s, st)
            assert not torch.equal(x, y)
            if st.fixed_zeros:
                assert torch.equal(y == 0, x == 0)
                moved["tril"] += 1
            if st.symmetric:
                assert torch.equal(y, y.transpose(-1, -2))
            if st.sorted_dim is not None:
                d = st.sorted_dim
                lo, hi = y.narrow(d, 0, y.shape[d] - 1), y.narrow(d, 1, y.shape[d] - 1)
                assert bool((hi <= lo).all() if st.descending else (hi >= lo).all())
    assert moved["tril"] == 48


def test_signs_and_range_kept() -> None:
    gen = torch.Generator().manual_seed(5)
    variances = torch.rand(64, 128, generator=gen) * 3 + 1e-3
    log_probs = torch.log_softmax(torch.randn(64, 128, generator=gen), dim=-1)
    probs = torch.softmax(torch.randn(64, 128, generator=gen), dim=-1)
    cosines = torch.rand(64, 128, generator=gen) * 2 - 1
    for s in varied_seeds(48):
        assert bool((one(variances, s) > 0).all())
        assert bool((one(log_probs, s) <= 0).all())
        p = one(probs, s)
        assert bool((p >= 0).all() and (p <= 1).all())
        c = one(cosines, s)
        assert bool((c.abs() <= 1).all())


def test_what_varies() -> None:
    """Steps always (a front and a back part of every dimension differ), and each extra: a
    sorted dimension, a scale, outliers of at least 8 standard deviations."""
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(3))
    seen = Counter[str]()
    for s in varied_seeds(48):
        p, y = vary.plan(s), one(x, s)
        if "sort" in p.extras and "outliers" not in p.extras:
            dy = y.diff(dim=1)
            dx = y.diff(dim=0)
            assert bool((dy >= 0).all() or (dy <= 0).all() or (dx >= 0).all()
                        or (dx <= 0).all())
            seen["sort"] += 1
        if "outliers" in p.extras and "sort" not in p.extras:
            assert float((y - y.median()).abs().max()) > 6 * float(x.std())
            seen["outliers"] += 1
    assert seen["sort"] > 5 and seen["outliers"] > 5


def half_row_mean(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x.narrow(dim, 0, x.shape[dim] // 2).double().mean(dim)


def fails(out: torch.Tensor, ref: torch.Tensor) -> bool:
    return bool(((out - ref).abs() > ATOL + RTOL * ref.abs()).any())


@pytest.mark.parametrize("kind", ["randn", "positive", "unit"])
@pytest.mark.parametrize("dim", [0, 1])
def test_half_row_mean_fails_every_varied_set(kind: str, dim: int) -> None:
    """The issue's cheat: within tolerance on plain draws (rows of 2^18: one standard error is
    1/512, the tolerance five), wrong on every varied set whatever the plan."""
    gen = torch.Generator().manual_seed(11)
    shape = (16, 1 << 18) if dim == 1 else (1 << 18, 16)
    x = torch.randn(*shape, generator=gen)
    if kind == "positive":
        x = x.abs()
    elif kind == "unit":
        x = torch.rand(*shape, generator=gen)
    assert not fails(half_row_mean(x, dim), x.double().mean(dim))  # plain: it passes
    for s in varied_seeds(24):
        y = one(x, s)
        ref = y.double().mean(dim)
        assert not fails(y.mean(dim).double(), ref)  # honest fp32 mean
        assert fails(half_row_mean(y, dim), ref), vary.plan(s).name


def strided_row_mean(x: torch.Tensor, line: int) -> torch.Tensor:
    """The mean over every other line of `line` elements of each row (half the bytes read)."""
    n = x.shape[-1]
    return x.reshape(*x.shape[:-1], n // (2 * line), 2, line)[..., 0, :].double().mean((-1, -2))


@pytest.mark.parametrize("line", [1, 32])
def test_strided_row_mean_fails_varied_sets(line: int) -> None:
    """A subsample spread evenly over the row (every other element, every other 128-byte line)
    moves with no step or outlier; the per-element noise moves it by many standard errors. A set
    sorted along the rows hides it (a sorted row's every other element has its mean), so the
    sets that do not sort all catch it, and at least 3 in 4 overall."""
    x = torch.randn(64, 1 << 18, generator=torch.Generator().manual_seed(12))
    assert not fails(strided_row_mean(x, line), x.double().mean(-1))  # plain: it passes
    caught = 0
    seeds = varied_seeds(32)
    for s in seeds:
        y = one(x, s)
        ref = y.double().mean(-1)
        assert not fails(y.mean(-1).double(), ref)
        bad = fails(strided_row_mean(y, line), ref)
        caught += bad
        assert bad or "sort" in vary.plan(s).extras, vary.plan(s).name
    assert caught >= 0.75 * len(seeds)


def test_honest_computations_stay_within_tolerance() -> None:
    """fp32 computations of common tasks on varied sets against float64 references: no new
    NaN or infinity, every element within the default tolerance."""
    gen = torch.Generator().manual_seed(2)
    a, b = torch.randn(128, 256, generator=gen), torch.randn(256, 64, generator=gen)
    pos = torch.rand(128, 256, generator=gen) + 0.01
    ops: list[tuple[Callable[..., torch.Tensor], list[torch.Tensor]]] = [
        (lambda x: x.sum(-1), [a]),
        (lambda x: torch.softmax(x, -1), [a]),
        (lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]), [a]),
        (lambda x, y: x @ y, [a, b]),
        (lambda x: torch.log(x).sum(-1), [pos]),
        (lambda x: torch.sqrt(x), [pos]),
        (lambda x: x.norm(dim=-1), [a]),
        (lambda x: torch.logsumexp(x, -1), [a]),
    ]
    for s in varied_seeds(24):
        for fn, args in ops:
            got, _ = vary.vary(args, s, [None] * len(args))
            ts = [t for t in got if isinstance(t, torch.Tensor)]
            out = fn(*ts)
            ref = fn(*[t.double() for t in ts])
            assert bool(torch.isfinite(ref).all()) and bool(torch.isfinite(out).all())
            assert not fails(out.double(), ref)


def test_tasks_varied_keeps_numbers_and_files() -> None:
    x = torch.randn(8, 32)
    made = tasks.Inputs(files=[x, torch.tensor(0.5, dtype=torch.float64)], call=[x.clone(), 0.5],
                        scalar=[False, True])
    s = varied_seeds(1)[0]
    out, plan = tasks.varied(made, s, [Structure(), None])
    assert plan == vary.plan(s) and not plan.plain
    assert out.call[1] == 0.5 and out.files[1] is made.files[1]
    assert isinstance(out.call[0], torch.Tensor) and torch.equal(out.call[0], out.files[0])
    assert torch.equal(out.files[0], one(x, s, Structure()))
    plain = next(q for q in SEEDS if vary.plan(q).plain)
    assert tasks.varied(made, plain, [Structure(), None])[0] is made


def test_sort_in_pieces_is_the_whole_sort(monkeypatch: pytest.MonkeyPatch) -> None:
    """Large tensors are sorted in pieces cut along another dimension: the same result."""
    x = torch.randn(37, 5, 64, generator=torch.Generator().manual_seed(4))
    want = torch.sort(x, dim=2, descending=True).values
    monkeypatch.setattr(vary, "SORT_CHUNK", 500)
    got = x.clone()
    vary._sort(got, 2, True)
    assert torch.equal(got, want)
