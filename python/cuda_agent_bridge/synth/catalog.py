"""`synth crawl`: a catalog of operators found by introspection (docs/synth.md).

Sources: the module classes of ``torch.nn``, the functions of ``torch.nn.functional``, the
functions of ``torch`` itself (its ``_VariableFunctions``), ``torch.special`` and
``torch.linalg``, and, when ``transformers`` is
installed, its activations (``ACT2CLS``) and the RMSNorm/LayerNorm/MLP classes of its model
families. Nothing is listed by hand: every candidate is tried.

Each candidate is probed on the CPU with small float32 tensors of ranks 2 to 5 (PROBE_SHAPES):
a module is built with arguments guessed from its constructor's parameter names (GUESSES; a
class with a required parameter no guess covers is left out), a function is called as f(x),
f(x, -1), f(x, y) or f(x, 0.5). An entry is kept when the call returns one floating tensor and
leaves its inputs unchanged. It records what the composer needs:

- ``call``: how to write it in a task (``module`` with its constructor arguments, ``unary``,
  ``unary_dim`` (a trailing ``-1``), ``binary`` or ``unary_scalar`` (a trailing ``0.5``));
- ``shapes``: for each probed rank that worked, the output shape (the composer chains ops whose
  output shape is the next one's input);
- ``batch_free_ranks``: the ranks at which the first dimension scales freely (probed again with
  the batch doubled: the output's first dimension doubles, the rest stays), which is how the
  composer sizes tasks; ``batch_free`` when there is one;
- ``dtypes``: the floating dtypes the op runs in on the CPU (float32 always; float16, bfloat16
  when they run);
- ``stochastic``: two runs on the same input under different seeds differ (dropout, random ops);
- ``identity``: it returns its input unchanged (views, copies, eval-mode dropout): not usable;
- ``constant``: its output does not depend on its input, by the evaluation's degeneracy detector
  (degenerate.Judge, default tolerance) over three probe draws: within tolerance of zeros or of
  a constant, or the same for every draw (``ones_like``, ``fill``, a polynomial of degree -1,
  ``logit`` with eps 0.5). Not usable: every task made with it is degenerate or computes less
  than its code says. A function tried in one way that is constant is tried the next way;
- ``signature``: ``inspect.signature`` where Python can give it.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..degenerate import Judge
from ..tasks import DEFAULT_TOLERANCE

PROBE_SHAPES: dict[int, tuple[int, ...]] = {
    2: (4, 32),
    3: (4, 8, 32),
    4: (2, 8, 16, 16),
    5: (2, 8, 4, 8, 8),
}
CHANNELS = 8  # dim 1 of the rank 3-5 probes
FEATURES = 32  # the last dim of the rank 2-3 probes

# Constructor parameters by name: what a probe passes. A module whose required parameter is not
# here is not probed (it cannot be built without knowing what the parameter means).
GUESSES: dict[str, Any] = {
    "in_features": FEATURES, "out_features": FEATURES, "in1_features": FEATURES,
    "in2_features": FEATURES, "num_features": CHANNELS, "in_channels": CHANNELS,
    "out_channels": CHANNELS, "kernel_size": 3, "normalized_shape": FEATURES,
    "num_groups": 2, "num_channels": CHANNELS, "embed_dim": FEATURES, "num_heads": 4,
    "hidden_size": FEATURES, "input_size": FEATURES, "d_model": FEATURES, "nhead": 4,
    "dim": -1, "output_size": 4, "scale_factor": 2, "upscale_factor": 2, "downscale_factor": 2,
    "padding": 1, "size": 4, "alpha": 1.0, "beta": 1.0, "k": 1.0, "lambd": 0.5,
    "threshold": 0.1, "value": 0.0, "negative_slope": 0.01, "min_val": -1.0, "max_val": 1.0,
    "eps": 1e-5, "p": 0.5, "num_parameters": 1, "start_dim": 1, "end_dim": -1,
    "dims": (0, 1), "shifts": 1, "pad": (1, 1), "stride": 1,
}
# Module classes that hold other modules or are abstract: not operators.
NOT_OPS = {"Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict",
           "Container", "Identity", "LazyModuleMixin"}

Json = dict[str, Any]


@dataclass
class Entry:
    id: str  # "nn.Conv2d", "F.gelu", "torch.tanh", "transformers.GELUActivation"
    source: str  # nn, functional, torch, transformers
    call: str  # module, unary, unary_dim, binary
    init: Json = field(default_factory=dict)  # constructor arguments (modules)
    shapes: dict[str, list[int]] = field(default_factory=dict)  # "rank" -> output shape
    batch_free: bool = False
    batch_free_ranks: list[int] = field(default_factory=list)
    dtypes: list[str] = field(default_factory=list)
    stochastic: bool = False
    signature: str = ""
    import_from: str = ""  # the module a transformers class comes from
    first: bool = False  # the op answers a tuple: the task takes [0]
    identity: bool = False  # it returns its input unchanged (a view, a copy, eval-mode dropout)
    constant: bool = False  # its output does not depend on its input (degenerate.Judge)


def probe_input(rank: int, batch: int | None = None, dtype: torch.dtype = torch.float32,
                seed: int = 0) -> torch.Tensor:
    shape = list(PROBE_SHAPES[rank])
    if batch is not None:
        shape[0] = batch
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _one_tensor(out: Any) -> torch.Tensor | None:
    """The op's output: a floating tensor, or the first of a tuple (recurrent layers answer
    (output, state)); a task uses ``[0]`` then (Entry.first)."""
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        out = out[0]
    return out if isinstance(out, torch.Tensor) and out.is_floating_point() else None


def _run(fn: Callable[..., Any], args: list[Any], seed: int = 0) -> torch.Tensor | None:
    """fn(*args) under a seed, or None when it fails, returns no floating tensor, gives
    non-finite values or changes an input."""
    before = [a.clone() for a in args if isinstance(a, torch.Tensor)]
    torch.manual_seed(seed)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            out = _one_tensor(fn(*args))
    except Exception:  # noqa: BLE001 - any failure means "not this way"
        return None
    after = [a for a in args if isinstance(a, torch.Tensor)]
    if out is None or out.numel() == 0 or not bool(torch.isfinite(out).all()):
        return None
    if any(not torch.equal(b, a) for b, a in zip(before, after, strict=True)):
        return None  # in place: not an operator a task can use
    return out


def _builder(cls: Any, init: Json) -> Callable[[], Callable[..., Any]]:
    """A function that builds a fresh module of cls in eval mode."""
    def build() -> Callable[..., Any]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecations and hints of the constructors
            return cls(**init).eval()  # type: ignore[no-any-return]
    return build


def _constant(fn: Callable[..., Any]) -> Callable[[], Callable[..., Any]]:
    return lambda: fn


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _args(rank: int, arity: int, extra: list[Any], batch: int | None = None) -> list[Any]:
    x = probe_input(rank, batch=batch)
    return [x] + ([probe_input(rank, batch=batch, seed=1)] if arity == 2 else []) + extra


def _probe(entry: Entry, build: Callable[[], Callable[..., Any]], arity: int,
           extra: list[Any]) -> bool:
    """Fills entry.shapes, batch_free_ranks, dtypes and stochastic; False when no rank works."""
    try:
        fn = build()
    except Exception:  # noqa: BLE001
        return False
    same = True
    for rank in PROBE_SHAPES:
        args = _args(rank, arity, extra)
        out = _run(fn, args)
        if out is None:
            continue
        same = same and out.shape == args[0].shape and torch.equal(out, args[0])
        entry.shapes[str(rank)] = list(out.shape)
        b = PROBE_SHAPES[rank][0]
        out2 = _run(fn, _args(rank, arity, extra, batch=2 * b))
        if (out2 is not None and out.dim() >= 1 and out2.dim() == out.dim()
                and out2.shape[0] == 2 * out.shape[0] and out2.shape[1:] == out.shape[1:]):
            entry.batch_free_ranks.append(rank)
    if not entry.shapes:
        return False
    entry.identity = same
    entry.batch_free = bool(entry.batch_free_ranks)
    rank = entry.batch_free_ranks[0] if entry.batch_free_ranks else int(next(iter(entry.shapes)))
    entry.constant = _constant_output(fn, rank, arity, extra)
    args = _args(rank, arity, extra)
    a, b2 = _run(fn, args, seed=0), _run(fn, args, seed=1)
    entry.stochastic = a is None or b2 is None or a.shape != b2.shape or not torch.equal(a, b2)
    entry.dtypes = ["float32"]
    for name, dt in (("float16", torch.float16), ("bfloat16", torch.bfloat16)):
        try:
            fd = build()
            if isinstance(fd, nn.Module):
                fd = fd.to(dt)
        except Exception:  # noqa: BLE001
            continue
        xd = [t.to(dt) if isinstance(t, torch.Tensor) else t for t in args]
        if _run(fd, xd) is not None:
            entry.dtypes.append(name)
    return True


def _constant_output(fn: Callable[..., Any], rank: int, arity: int, extra: list[Any]) -> bool:
    """The op's output on three input draws is degenerate by the evaluation's detector (zeros,
    a constant, or the same whatever the input)."""
    judge = Judge(DEFAULT_TOLERANCE, DEFAULT_TOLERANCE)
    for seed in (0, 2, 3):
        x = probe_input(rank, seed=seed)
        args = [x] + ([probe_input(rank, seed=seed + 10)] if arity == 2 else []) + extra
        out = _run(fn, args)
        if out is None:
            return False  # a draw it cannot take: not usable for other reasons, if at all
        judge.add([out])
    return judge.result() is not None


def _module_init(cls: type[nn.Module]) -> Json | None:
    """Constructor arguments for cls from GUESSES, or None when one is missing."""
    try:
        params = inspect.signature(cls.__init__).parameters
    except (TypeError, ValueError):
        return None
    init: Json = {}
    for name, p in list(params.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is inspect.Parameter.empty:
            if name not in GUESSES:
                return None
            init[name] = GUESSES[name]
    return init


def _nn_candidates() -> list[Any]:
    return [cls for name, cls in sorted(vars(nn).items())
            if inspect.isclass(cls) and issubclass(cls, nn.Module) and name not in NOT_OPS
            and not name.startswith("_") and not name.startswith("Lazy")]


def _probe_nn(cls: Any) -> Iterator[Entry]:
    init = _module_init(cls)
    if init is None:
        return
    for call, arity in (("module", 1), ("module_binary", 2)):
        e = Entry(id=f"nn.{cls.__name__}", source="nn", call=call, init=init,
                  signature=_signature(cls))
        if _probe(e, _builder(cls, init), arity, []):
            e.first = _answers_tuple(_builder(cls, init), e, arity, [])
            yield e
            return


# How a function is tried, in order: the first way that works and whose batch dimension
# scales is kept; else the first way that works at all.
CALLS: tuple[tuple[str, int, list[Any]], ...] = (
    ("unary", 1, []), ("unary_dim", 1, [-1]), ("binary", 2, []), ("unary_scalar", 1, [0.5]))


def _function_candidates(ns: Any) -> list[Any]:
    out = []
    for name in sorted(dir(ns)):
        fn = getattr(ns, name, None)
        if name.startswith("_") or not callable(fn) or inspect.isclass(fn) or name.endswith("_"):
            continue
        out.append((name, fn))
    return out


def _probe_function(prefix: str, source: str, candidate: Any) -> Iterator[Entry]:
    name, fn = candidate
    first: Entry | None = None
    for call, arity, extra in CALLS:
        e = Entry(id=f"{prefix}.{name}", source=source, call=call, signature=_signature(fn))
        if not _probe(e, _constant(fn), arity, extra):
            continue
        e.first = _answers_tuple(_constant(fn), e, arity, extra)
        if e.batch_free and not e.stochastic and not e.constant:
            first = e
            break
        first = first or e
    if first is not None:
        yield first


def _answers_tuple(build: Callable[[], Callable[..., Any]], e: Entry, arity: int,
                   extra: list[Any]) -> bool:
    rank = int(next(iter(e.shapes)))
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            return isinstance(build()(*_args(rank, arity, extra)), tuple)
    except Exception:  # noqa: BLE001
        return False


def _transformers_candidates() -> list[Any]:
    """("act", class) for each activation, ("family", name) for each model family: a family's
    modeling module is imported when its candidate is probed (the slow part). Empty when
    transformers is not installed (it is not in CI's venv)."""
    try:
        import transformers.models as tm
        from transformers import activations
    except ImportError:
        return []
    acts = []
    for _, cls in sorted(getattr(activations, "ACT2CLS", {}).items()):
        acts.append(("act", cls[0] if isinstance(cls, tuple) else cls))
    fams = [("family", f) for f in sorted(getattr(tm, "__all__", []) or dir(tm))
            if not f.startswith("_")]
    return acts + fams


def _probe_transformers(candidate: Any) -> Iterator[Entry]:
    """Activations, and the norm and MLP classes of one model family."""
    import importlib

    kind, what = candidate
    if kind == "act":
        e = Entry(id=f"transformers.{what.__name__}", source="transformers", call="module",
                  signature=_signature(what), import_from=what.__module__)
        if e.id.count(".") == 1 and _probe(e, _builder(what, {}), 1, []):
            yield e
        return
    try:
        mod = importlib.import_module(f"transformers.models.{what}.modeling_{what}")
    except Exception:  # noqa: BLE001 - families without a modeling module, or broken
        return
    for name, cls in sorted(vars(mod).items()):
        if (not inspect.isclass(cls) or not issubclass(cls, nn.Module)
                or not name.endswith(("RMSNorm", "LayerNorm", "MLP"))
                or cls.__module__ != mod.__name__):
            continue
        init = _module_init(cls)
        if init is None:
            continue
        e = Entry(id=f"transformers.{name}", source="transformers", call="module",
                  init=init, signature=_signature(cls), import_from=mod.__name__)
        if _probe(e, _builder(cls, init), 1, []):
            yield e


@dataclass(frozen=True)
class Source:
    """One source of operators: its candidates (listed quickly), and the probe of one."""
    candidates: Callable[[], list[Any]]
    probe: Callable[[Any], Iterator[Entry]]


def _functions_of(ns_name: str, prefix: str, source: str) -> Source:
    def candidates() -> list[Any]:
        ns = {"functional": F, "torch": torch._C._VariableFunctions,
              "special": torch.special, "linalg": torch.linalg}[ns_name]
        return _function_candidates(ns)
    return Source(candidates, lambda c: _probe_function(prefix, source, c))


SOURCES: dict[str, Source] = {
    "nn": Source(_nn_candidates, _probe_nn),
    "functional": _functions_of("functional", "F", "functional"),
    "torch": _functions_of("torch", "torch", "torch"),
    "special": _functions_of("special", "torch.special", "special"),
    "linalg": _functions_of("linalg", "torch.linalg", "linalg"),
    "transformers": Source(_transformers_candidates, _probe_transformers),
}


def crawl_source(source: str, progress: Callable[[int, int], None] | None = None) -> list[Json]:
    """The entries of one source, in candidate order; progress(done, total) after each
    candidate."""
    torch.set_num_threads(1)
    src = SOURCES[source]
    cands = src.candidates()
    out: list[Json] = []
    for k, c in enumerate(cands):
        out.extend(asdict(e) for e in src.probe(c))
        if progress:
            progress(k + 1, len(cands))
    return out


def assemble(parts: dict[str, list[Json]]) -> Json:
    """The catalog from each source's entries (crawl_source, in SOURCES order): {"torch":
    version, "entries": [...], "counts": {source: n}, "usable": n, ...}. An id found by two
    sources is kept from the first."""
    entries: list[Json] = []
    seen: set[str] = set()
    counts: dict[str, int] = {}
    for source in SOURCES:
        n = 0
        for e in parts.get(source, []):
            if e["id"] in seen:
                continue
            seen.add(e["id"])
            entries.append(e)
            n += 1
        counts[source] = n
    usable = sum(1 for e in entries if is_usable(e))
    return {"torch": torch.__version__, "entries": entries, "counts": counts, "usable": usable,
            "probe_shapes": {str(k): list(v) for k, v in PROBE_SHAPES.items()},
            "note": "usable: computes something (not the identity, not a constant), "
                    "deterministic, and the batch dimension scales freely"}


def crawl(progress: Callable[[str, int, int], None] | None = None) -> Json:
    """The catalog of every source (assemble); progress(source, done, total) per candidate."""
    parts = {}
    for source in SOURCES:
        tick = (lambda d, t, s=source: progress(s, d, t)) if progress else None
        parts[source] = crawl_source(source, tick)
    return assemble(parts)


def is_usable(e: Json) -> bool:
    return (bool(e["batch_free"]) and not e["stochastic"] and not e.get("identity", False)
            and not e.get("constant", False))
