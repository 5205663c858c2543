"""Input structure (cuda_agent_bridge.structure) and the near-duplicates that keep it
(tasks.near_duplicate): what get_inputs() guarantees survives a checked call's set."""

from __future__ import annotations

from collections.abc import Callable

import torch

from cuda_agent_bridge import structure, tasks
from cuda_agent_bridge.structure import Structure, detect, detect_one


def draws(make: Callable[[torch.Generator], torch.Tensor],
          n: int = structure.STRUCTURE_DRAWS) -> list[torch.Tensor]:
    return [make(torch.Generator().manual_seed(s)) for s in range(n)]


def test_plain_random_tensor_has_no_structure() -> None:
    st = detect_one(draws(lambda g: torch.randn(64, 64, generator=g)))
    assert st == Structure() and st.perturb == "elements"


def test_triangular_keeps_its_zeros() -> None:
    st = detect_one(draws(lambda g: torch.tril(torch.randn(32, 32, generator=g))))
    assert st is not None and st.fixed_zeros and not st.symmetric and st.perturb == "elements"


def test_symmetric() -> None:
    def sym(g: torch.Generator) -> torch.Tensor:
        a = torch.randn(4, 16, 16, generator=g)
        return a + a.transpose(-1, -2)
    st = detect_one(draws(sym))
    assert st is not None and st.symmetric and st.perturb == "symmetric"


def test_sorted_along_a_dimension() -> None:
    st = detect_one(draws(lambda g: torch.sort(torch.randn(8, 100, generator=g), dim=1).values))
    assert st is not None and st.sorted_dim == 1 and not st.descending
    assert st.perturb == "uniform"
    st = detect_one(draws(lambda g: torch.sort(torch.rand(50, generator=g),
                                               descending=True).values))
    assert st is not None and st.sorted_dim == 0 and st.descending


def test_discrete_values_are_not_scaled() -> None:
    labels = detect_one(draws(lambda g: torch.randint(0, 1000, (256,), generator=g).float()))
    mask = detect_one(draws(lambda g: (torch.rand(64, 64, generator=g) > 0.5).float()))
    assert labels is not None and labels.discrete and labels.perturb == "none"
    assert mask is not None and mask.discrete and not mask.fixed_zeros  # zeros move by chance


def test_chance_is_not_structure() -> None:
    # one draw happens to be sorted (a single row of 2): the others are not
    made = [torch.tensor([[0.1, 0.2]]), torch.tensor([[0.5, 0.3]]), torch.tensor([[0.2, 0.9]])]
    assert detect_one(made) == Structure()


def test_detect_skips_numbers_and_integer_tensors() -> None:
    sets = [[torch.randn(4), torch.arange(4), torch.tensor(0.5, dtype=torch.float64)]
            for _ in range(3)]
    out = detect(sets, [False, False, True])
    assert out[0] == Structure() and out[1] is None and out[2] is None
    assert Structure().to_json() == {"perturb": "elements"}
    assert Structure(symmetric=True, fixed_zeros=True).to_json() == {
        "perturb": "symmetric", "fixed_zeros": True, "symmetric": True}


def near(base: torch.Tensor, donor: torch.Tensor, st: Structure | None,
         seed: int = 7) -> torch.Tensor:
    a = tasks.Inputs(files=[base], call=[base.clone()], scalar=[False])
    b = tasks.Inputs(files=[donor], call=[donor.clone()], scalar=[False])
    out = tasks.near_duplicate(a, b, seed, [st])
    call = out.call[0]
    assert isinstance(call, torch.Tensor) and torch.equal(call, out.files[0])
    assert torch.equal(a.files[0], base)  # the original set is untouched
    return out.files[0]


def test_near_duplicate_takes_a_few_values_of_another_draw() -> None:
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(64, 1024, generator=g), torch.rand(64, 1024, generator=g)
    n = near(x, y, Structure())
    changed = n != x
    assert 1 <= int(changed.sum()) <= min(structure.NEAR_MAX_CHANGES, x.numel() // 4096 + 1)
    assert torch.equal(n[changed], y[changed])
    assert bool((n > 0).all() and (n < 1).all())  # torch.rand's range is kept
    assert torch.equal(near(x, y, Structure()), n)  # positions follow the seed
    assert not torch.equal(near(x, y, Structure(), seed=8), n)


def test_near_duplicate_keeps_structure() -> None:
    g = torch.Generator().manual_seed(2)
    tri = [torch.tril(torch.randn(128, 128, generator=g)) for _ in range(2)]
    n = near(tri[0], tri[1], detect_one(tri + [tri[0]]))
    assert torch.equal(n, torch.tril(n)) and not torch.equal(n, tri[0])

    a, b = torch.randn(2, 96, 96, generator=g), torch.randn(2, 96, 96, generator=g)
    sym = [a + a.transpose(-1, -2), b + b.transpose(-1, -2)]
    n = near(sym[0], sym[1], Structure(symmetric=True))
    assert torch.equal(n, n.transpose(-1, -2)) and not torch.equal(n, sym[0])

    srt = [torch.sort(torch.randn(4, 4096, generator=g), dim=1).values for _ in range(2)]
    n = near(srt[0], srt[1], Structure(sorted_dim=1))
    assert bool((torch.diff(n, dim=1) >= 0).all()) and not torch.equal(n, srt[0])

    lab = [torch.randint(0, 10, (8192,), generator=g).float() for _ in range(2)]
    n = near(lab[0], lab[1], Structure(discrete=True))
    assert torch.equal(n, n.round()) and bool((n >= 0).all() and (n < 10).all())


def test_near_duplicate_leaves_integers_numbers_and_mismatched_shapes() -> None:
    x, idx = torch.randn(64, 1024), torch.arange(10)
    base = tasks.Inputs(files=[x, idx, torch.tensor(0.5, dtype=torch.float64)],
                        call=[x.clone(), idx.clone(), 0.5], scalar=[False, False, True])
    other = tasks.Inputs(files=[torch.randn(64, 1024), idx + 1, torch.tensor(0.25)],
                         call=[None, None, 0.25], scalar=[False, False, True])
    out = tasks.near_duplicate(base, other, 3, [Structure(), None, None])
    assert not torch.equal(out.files[0], x)
    assert torch.equal(out.files[1], idx) and out.files[2] is base.files[2] and out.call[2] == 0.5
    odd = tasks.Inputs(files=[torch.randn(32, 1024)], call=[None], scalar=[False])
    same = tasks.near_duplicate(tasks.Inputs(files=[x], call=[x], scalar=[False]), odd, 3,
                                [Structure()])
    assert torch.equal(same.files[0], x)


def test_probe_is_a_small_corner_with_the_same_structure() -> None:
    g = torch.Generator().manual_seed(3)
    s = torch.randn(3000, 3000, generator=g)
    big = [torch.tril(s + s.T) for _ in range(2)]
    corner = structure.probe(big[0])
    assert isinstance(corner, torch.Tensor)
    assert corner.numel() <= structure.PROBE_ELEMENTS and corner.shape[0] == corner.shape[1]
    assert torch.equal(corner, big[0][: corner.shape[0], : corner.shape[1]])
    st = detect_one([structure.probe(t) for t in big] + [corner])
    assert st is not None and st.fixed_zeros and not st.symmetric
    row = torch.sort(torch.randn(1 << 22, generator=g)).values
    p = structure.probe(row)
    assert isinstance(p, torch.Tensor) and p.numel() <= structure.PROBE_ELEMENTS
    assert detect_one([p, p, p]) == Structure(sorted_dim=0)
    idx = torch.arange(5)
    assert structure.probe(idx) is idx
