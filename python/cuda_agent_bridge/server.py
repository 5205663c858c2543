"""The bridge's JSON-lines loop and its ops (docs/protocol.md, "Torch bridge"): describe, slots,
fill, check, bench_open, bench_empty, bench_call, bench_close, slots_close, preload, shutdown.

Contract: ``serve(requests, answers, ctx)`` reads one request per line from the binary stream
``requests`` until EOF or ``shutdown`` and writes exactly one answer line per non-blank request
line to ``answers``, flushed: ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error":
{"code", "message"}}``. It never raises for a request: malformed or overlong lines, unknown ops
and missing or ill-typed fields answer ``bridge.bad_request``, task failures their ``task.*``
code, anything unexpected ``bridge.internal`` (exception type and message). Answers are
JSON-safe (non-finite floats as strings, ``wire.json_safe``). Ops run under ``torch.no_grad()``;
torch globals that task code may change are restored after every request.

Every op that builds ``Model`` (describe, fill, check, bench_open) takes an optional
``module_mode``, ``"eval"`` (the default: the cuda-agent rules') or ``"train"`` (the kernelbench
rules'), and builds it in that mode (tasks.MODULE_MODES; the mode is part of the model cache's
key and of the degeneracy survey's): the supervisor sends the mode of the rules that judge the
candidate, and puts the candidate's ModelNew in the same one (the runner's plan). No candidate
code runs in this process, so nothing a candidate does can switch the reference's mode.

The slots (``op_slots``) hold the evaluation's data: params, R input sets, outputs. The first
``fill`` after ``slots`` fixes what an input set is (each argument's dtype and shape, or its
kind of Python number) and which task the slots serve; later fills, checks and baselines must
agree. References (``check``) are computed from the tensors in the input slot at the time of the
request, cloned first, never from a seed: the supervisor may have changed them since ``fill``.
Spec entries (describe) are ``{"index", "name", "dtype", "shape", "device"}``; ``device`` says
where the candidate receives the tensor: ``"cpu"`` for Python scalars, ``"cuda"`` otherwise,
whatever the bridge's own device.
"""

from __future__ import annotations

import gc
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

import torch

from .capped import lines
from .errors import BridgeError, exception_text, one_line
from .slots import MAX_INPUTS, MAX_SLOT_BYTES, Slot, SlotError, layout, send_fds, tensor_views
from .tasks import (
    DEFAULT_MODULE_MODE,
    MODULE_MODES,
    Built,
    Inputs,
    Task,
    TaskStore,
    arg_names,
    call_task,
    check_deterministic,
    dtype_name,
    forward,
    near_duplicate,
    output_name,
    reference_numerics,
    restore_torch_defaults,
    varied,
)
from .timing import Stopwatch
from .wire import decode_scalars, json_safe

log = logging.getLogger("cuda_agent_bridge")
MODES = ("eager", "compile")
MAX_REQUEST_BYTES = 1 << 20
MAX_FILL_SETS = 64
BIG_BYTES = 1 << 30  # after touching this much, the allocator's cache goes back to the driver
CHECK_CHUNK = 1 << 26  # elements compared at once (float64 temporaries of 512 MB)
Scalar = bool | int | float


@dataclass(frozen=True)
class Arg:
    """One forward() argument as the input slots hold it: a tensor at ``offset`` (dtype, shape),
    or a Python number of ``kind`` (no space in the slot; its value travels with each call)."""

    index: int
    kind: type | None  # bool, int or float for a Python number; None for a tensor
    dtype: torch.dtype | None = None
    shape: tuple[int, ...] = ()

    def entry(self) -> dict[str, object]:
        assert self.dtype is not None
        return {"dtype": dtype_name(self.dtype), "shape": list(self.shape)}

    def text(self) -> str:
        if self.kind is not None:
            return f"a Python {self.kind.__name__}"
        assert self.dtype is not None
        return f"a {dtype_name(self.dtype)} tensor of shape {list(self.shape)}"


@dataclass
class Slots:
    """The current evaluation's slots and what the fills put there."""

    kind: str
    params: Slot
    inputs: list[Slot]
    outputs: Slot
    task: tuple[str, str] | None = None  # (directory, digest of model.py) of the first fill
    args: list[Arg] | None = None  # the first fill's set: every later set must be the same
    param_entries: list[dict[str, object]] | None = None
    filled: set[int] = field(default_factory=set)
    scalars: dict[int, dict[int, Scalar]] = field(default_factory=dict)  # per input slot

    def all(self) -> list[Slot]:
        return [self.params, *self.inputs, self.outputs]

    def tensors(self, r: int) -> list[tuple[Arg, torch.Tensor]]:
        """The tensor arguments of inputs[r] as views of the slot."""
        assert self.args is not None
        tensor_args = [a for a in self.args if a.kind is None]
        views = tensor_views(self.inputs[r], [a.entry() for a in tensor_args])
        return list(zip(tensor_args, views, strict=True))


@dataclass
class Bench:
    """The baseline callee of bench_call: the model (or its compiled form) and, per input slot,
    its arguments as views of the slot (Python numbers are filled in per call)."""

    task: Task
    built: Built
    mode: str
    fn: Callable[..., object]
    templates: list[list[object]]


@dataclass
class Context:
    """What the ops share: the task store (on the bridge's device), the slots, the baseline."""

    store: TaskStore
    slots: Slots | None = None
    bench: Bench | None = None
    stopwatch: Stopwatch | None = None

    @property
    def device(self) -> torch.device:
        return self.store.device

    def watch(self) -> Stopwatch:
        if self.stopwatch is None:
            self.stopwatch = Stopwatch(self.device)
        return self.stopwatch


def _bad(message: str) -> BridgeError:
    return BridgeError("bridge.bad_request", message)


def _seed(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
        raise _bad(f"{where} must be an integer in [0, 2^64)")
    return value


def _field(req: dict[str, Any], name: str) -> object:
    if name not in req:
        raise _bad(f"{req['op']}: missing field '{name}'")
    return req[name]


def _path(req: dict[str, Any], name: str) -> str:
    value = _field(req, name)
    if not isinstance(value, str) or not value or "\0" in value:
        raise _bad(f"{req['op']}: '{name}' must be a non-empty string")
    return value


def _module_mode(req: dict[str, Any]) -> str:
    """The request's ``module_mode`` (tasks.MODULE_MODES), the default rules' when absent."""
    value = req.get("module_mode", DEFAULT_MODULE_MODE)
    if value not in MODULE_MODES:
        raise _bad(f"{req['op']}: 'module_mode' must be one of {', '.join(MODULE_MODES)}")
    return str(value)


def _count(req: dict[str, Any], name: str, low: int, high: int) -> int:
    value = _field(req, name)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _bad(f"{req['op']}: '{name}' must be an integer in [{low}, {high}]")
    return value


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _release(device: torch.device, nbytes: int) -> None:
    """Gives the allocator's cache back after big work: the candidate needs the memory more."""
    if nbytes > BIG_BYTES and device.type == "cuda":
        torch.cuda.empty_cache()


# ---- describe -----------------------------------------------------------------------------------

def _entry(index: int, name: str, t: torch.Tensor, scalar: bool) -> dict[str, object]:
    return {
        "index": index,
        "name": name,
        "dtype": dtype_name(t.dtype),
        "shape": list(t.shape),
        "device": "cpu" if scalar else "cuda",
    }


def op_describe(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Builds the model, runs forward() twice on one input set, reports the spec, with each
    floating-point argument's input structure (structure.py: how the supervisor may perturb it)
    and whether the task is degenerate (degenerate.py; null when it is not).

    The model is built with the optional ``model_seed`` (default: ``seed``), in the request's
    ``module_mode`` (the determinism check and the degenerate verdict are that mode's).
    """
    task_dir = _path(req, "task_dir")
    seed = _seed(_field(req, "seed"), "describe: 'seed'")
    model_seed = _seed(req.get("model_seed", seed), "describe: 'model_seed'")
    mode = _module_mode(req)
    with reference_numerics():
        task = ctx.store.load(task_dir)
        built = ctx.store.build(task, model_seed, mode=mode)
        built.reset()
        inputs = ctx.store.inputs(task, seed, files=False)  # only dtypes and shapes are read
        outputs = forward(task, built.model, inputs.fresh_call())
        check_deterministic(outputs, forward(task, built.model, inputs.fresh_call()))
        structure = ctx.store.structure(task, mode)
        degenerate = ctx.store.degeneracy(task, mode)
    names = arg_names(built.model, len(inputs.files))
    args = [_entry(i, names[i], t, inputs.scalar[i]) for i, t in enumerate(inputs.files)]
    for entry, st in zip(args, structure, strict=True):
        if st is not None:
            entry["structure"] = st.to_json()
    return {
        "args": args,
        "params": [
            _entry(i, name, t, False) for i, (name, t) in enumerate(built.initial_state.items())
        ],
        "outputs": [
            _entry(i, output_name(i, len(outputs)), t, False) for i, t in enumerate(outputs)
        ],
        "precision": task.precision,
        "degenerate": None if degenerate is None else degenerate.to_json(),
        "module_mode": mode,
    }


# ---- slots --------------------------------------------------------------------------------------

def _close_slots(ctx: Context) -> int:
    """Drops the baseline and the slots (their memory is freed once every process closed it)."""
    ctx.bench = None
    gc.enable()
    if ctx.slots is None:
        return 0
    _sync(ctx.device)  # nothing of ours may still be reading or writing a slot
    count = len(ctx.slots.all())
    for slot in ctx.slots.all():
        slot.close()
    ctx.slots = None
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()
    return count


def op_slots(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Allocates the params slot, ``inputs`` input slots and the outputs slot (replacing any
    earlier ones) and sends their descriptors on the descriptor channel, in that order, before
    this answer."""
    sizes = [_count(req, "params_bytes", 1, MAX_SLOT_BYTES)]
    r = _count(req, "inputs", 1, MAX_INPUTS)
    sizes += [_count(req, "input_bytes", 1, MAX_SLOT_BYTES)] * r
    sizes.append(_count(req, "output_bytes", 1, MAX_SLOT_BYTES))
    _close_slots(ctx)
    kind = "cuda" if ctx.device.type == "cuda" else "cpu"
    device = ctx.device.index or 0
    made: list[Slot] = []
    try:
        for nbytes in sizes:
            made.append(Slot.allocate(kind, nbytes, device))
        send_fds([s.fd for s in made])
    except SlotError as exc:
        for s in made:
            s.close()
        if kind == "cuda":
            torch.cuda.empty_cache()
        raise BridgeError("env.gpu_memory" if "cuMem" in exc.message else "bridge.internal",
                          f"cannot make {len(sizes)} slots of {sum(sizes) / 1e9:.2f} GB in all: "
                          f"{exc.message}") from exc
    for s in made:  # the memory stays mapped here; the supervisor has its own descriptors
        s.close_fd()
    ctx.slots = Slots(kind, made[0], made[1:-1], made[-1])
    return {"kind": kind, "count": len(made)}


def op_slots_close(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    return {"closed": _close_slots(ctx)}


def _slots(ctx: Context, op: str) -> Slots:
    if ctx.slots is None:
        raise _bad(f"{op}: no slots (send 'slots' first)")
    return ctx.slots


def _input(req: dict[str, Any], slots: Slots, filled: bool = True) -> int:
    r = _count(req, "input", 0, len(slots.inputs) - 1)
    if filled and r not in slots.filled:
        raise _bad(f"{req['op']}: inputs[{r}] was never filled")
    return r


def _same_task(slots: Slots, task: Task, op: str) -> None:
    if slots.task is not None and slots.task != (task.task_dir, task.digest):
        raise _bad(f"{op}: the slots hold data of another task ({slots.task[0]}) or of an "
                   "earlier version of its model.py; send 'slots' again")


# ---- fill ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FillSet:
    input: int
    seed: int
    near_seed: int | None


def _fill_sets(req: dict[str, Any], inputs: int) -> list[FillSet]:
    raw = _field(req, "sets")
    if not isinstance(raw, list) or len(raw) > MAX_FILL_SETS:
        raise _bad(f"fill: 'sets' must be a list of at most {MAX_FILL_SETS} sets")
    sets = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _bad(f"fill: sets[{i}] must be an object")
        r = item.get("input")
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < inputs:
            raise _bad(f"fill: sets[{i}].input must be an integer in [0, {inputs - 1}]")
        near = item.get("near_seed")
        sets.append(FillSet(r, _seed(item.get("seed"), f"fill: sets[{i}].seed"),
                            None if near is None else _seed(near, f"fill: sets[{i}].near_seed")))
    if len({s.input for s in sets}) != len(sets):
        raise _bad("fill: two sets for the same input slot")
    return sets


def _args_of(inputs: Inputs) -> list[Arg]:
    args = []
    for i, value in enumerate(inputs.call):
        if inputs.scalar[i]:
            args.append(Arg(i, type(value)))
        else:
            assert isinstance(value, torch.Tensor)
            args.append(Arg(i, None, value.dtype, tuple(value.shape)))
    return args


def _agree(slots: Slots, args: list[Arg], seed: int) -> None:
    """The set must look like the first set filled: the slots' layout comes from it."""
    if slots.args is None:
        _, size = layout([a.entry() for a in args if a.kind is None])
        if size > slots.inputs[0].nbytes:
            raise _bad(f"fill: an input set needs {size} bytes; the input slots hold "
                       f"{slots.inputs[0].nbytes} (slots: input_bytes)")
        slots.args = args
        return
    if len(args) != len(slots.args):
        raise BridgeError("task.bad_input",
                          f"get_inputs() under seed {seed} returned {len(args)} arguments; "
                          f"earlier sets have {len(slots.args)}")
    for a, b in zip(args, slots.args, strict=True):
        if a != b:
            raise BridgeError("task.bad_input",
                              f"get_inputs()[{a.index}] under seed {seed} is {a.text()}; earlier "
                              f"sets have {b.text()} (an argument's kind, dtype and shape must not "
                              "depend on the seed)")


def _write_params(slots: Slots, built: Built) -> int:
    state = list(built.initial_state.values())
    entries: list[dict[str, object]] = [
        {"dtype": dtype_name(t.dtype), "shape": list(t.shape)} for t in state]
    if slots.param_entries is not None and entries != slots.param_entries:
        raise BridgeError("task.init_raised", "Model(*get_init_inputs()) has other parameter "
                          "dtypes or shapes than the first fill's")
    try:
        views = tensor_views(slots.params, entries)
    except SlotError as exc:
        raise _bad(f"fill: the parameters do not fit the params slot: {exc.message}") from exc
    for view, t in zip(views, state, strict=True):
        view.copy_(t)
    slots.param_entries = entries
    return sum(t.numel() * t.element_size() for t in state)


def _make_set(ctx: Context, task: Task, s: FillSet, mode: str) -> Inputs:
    """get_inputs() under the set's seed, varied by the plan of that seed (tasks.varied: off
    the generator's distribution, inside the task's contract); or a near-duplicate of the set
    of ``near_seed`` as it was placed (varied by near_seed's plan), with a few elements of a
    donor draw varied by the same plan."""
    structure = ctx.store.structure(task, mode)
    if s.near_seed is None:
        return varied(ctx.store.inputs(task, s.seed, files=False), s.seed, structure)[0]
    # the donor's seed follows from the secret one: secret too
    donor = ctx.store.inputs(task, (s.seed * 0x9E3779B97F4A7C15 + 1) % (2**63), files=False)
    base = varied(ctx.store.inputs(task, s.near_seed, files=False), s.near_seed, structure)[0]
    return near_duplicate(base, varied(donor, s.near_seed, structure)[0], s.seed, structure)


def op_fill(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Writes Model(*get_init_inputs())'s state under model_seed (in the request's
    ``module_mode``: a degenerate verdict, and so the perturbation, may depend on it) into the
    params slot (when ``params``) and each set (get_inputs() under its seed, varied by its
    seed's plan, or a near-duplicate of near_seed's set: ``_make_set``) into its input slot;
    answers each set's Python-number arguments."""
    slots = _slots(ctx, "fill")
    task_dir = _path(req, "task_dir")
    params = _field(req, "params")
    if not isinstance(params, bool):
        raise _bad("fill: 'params' must be a boolean")
    model_seed = _seed(_field(req, "model_seed"), "fill: 'model_seed'") if params else 0
    mode = _module_mode(req)
    sets = _fill_sets(req, len(slots.inputs))
    start = time.perf_counter()
    touched = 0
    answers: list[list[list[object]]] = []
    with reference_numerics():
        task = ctx.store.load(task_dir)
        _same_task(slots, task, "fill")
        slots.task = (task.task_dir, task.digest)
        if params:
            touched += _write_params(slots, ctx.store.build(task, model_seed, mode=mode))
        for s in sets:
            made = _make_set(ctx, task, s, mode)
            args = _args_of(made)
            _agree(slots, args, s.seed)
            slots.filled.discard(s.input)
            for arg, view in slots.tensors(s.input):
                value = made.call[arg.index]
                assert isinstance(value, torch.Tensor)
                view.copy_(value)
                touched += view.numel() * view.element_size()
            numbers: dict[int, Scalar] = {}
            for a in args:
                value = made.call[a.index]
                if a.kind is not None and isinstance(value, (bool, int, float)):
                    numbers[a.index] = value
            slots.scalars[s.input] = numbers
            slots.filled.add(s.input)
            answers.append([[i, v] for i, v in sorted(numbers.items())])
            del made
    _sync(ctx.device)  # the supervisor reads the slots from its own context next
    _release(ctx.device, touched)
    return {"scalars": answers, "seconds": time.perf_counter() - start}


# ---- check --------------------------------------------------------------------------------------

def _scalar_kinds(slots: Slots) -> dict[int, type]:
    assert slots.args is not None
    return {a.index: a.kind for a in slots.args if a.kind is not None}


def _scalars(req: dict[str, Any], slots: Slots) -> list[tuple[int, Scalar]]:
    try:
        return decode_scalars(_field(req, "scalars"), _scalar_kinds(slots),
                              f"{req['op']}: scalars")
    except ValueError as exc:
        raise _bad(str(exc)) from exc


def _call_args(slots: Slots, r: int, scalars: list[tuple[int, Scalar]],
               clone: bool) -> list[object]:
    assert slots.args is not None
    args: list[object] = [None] * len(slots.args)
    for arg, view in slots.tensors(r):
        args[arg.index] = view.clone() if clone else view
    for i, v in scalars:
        args[i] = v
    return args


def compare_stats(out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float
                  ) -> dict[str, object]:
    """src/eval/compare.h's rule and figures, computed where the tensors are: an element matches
    when both are NaN, both are the same infinity, or |out - ref| <= atol + rtol * |ref|;
    errors over finite pairs, relative error |out - ref| / max(|ref|, 1e-12)."""
    o, e = out.reshape(-1), ref.reshape(-1)
    n = e.numel()
    mismatches = torch.zeros((), dtype=torch.int64, device=e.device)
    unwritten = torch.zeros((), dtype=torch.int64, device=e.device)
    max_abs = torch.zeros((), dtype=torch.float64, device=e.device)
    max_rel = torch.zeros((), dtype=torch.float64, device=e.device)
    first: int | None = None
    first_out = first_ref = 0.0
    for start in range(0, n, CHECK_CHUNK):
        oc, ec = o[start:start + CHECK_CHUNK].double(), e[start:start + CHECK_CHUNK].double()
        on, en = oc.isnan(), ec.isnan()
        inf = oc.isinf() | ec.isinf()
        finite = ~(on | en | inf)
        diff = (oc - ec).abs()
        rel = diff / ec.abs().clamp_min(1e-12)
        max_abs = torch.maximum(max_abs, torch.where(finite, diff, 0.0).max())
        max_rel = torch.maximum(max_rel, torch.where(finite, rel, 0.0).max())
        ok = torch.where(on | en, on & en,
                         torch.where(inf, oc == ec, diff <= atol + rtol * ec.abs()))
        bad = ~ok
        unwritten += (on & ~en).sum()
        count = bad.sum()
        mismatches += count
        if first is None and int(count) > 0:
            at = int(bad.nonzero()[0, 0])
            first, first_out, first_ref = start + at, float(oc[at]), float(ec[at])
    return {"shape_ok": True, "numel": n, "mismatches": int(mismatches),
            "nan_unwritten": int(unwritten), "max_abs_err": float(max_abs),
            "max_rel_err": float(max_rel), "first_index": first,
            "first_out": first_out, "first_ref": first_ref}


def _tolerance(req: dict[str, Any], name: str) -> float:
    value = _field(req, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or \
            value == float("inf"):
        raise _bad(f"check: '{name}' must be a finite non-negative number")
    return float(value)


def op_check(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """The reference of the model under model_seed on (clones of) the tensors now in inputs[r]
    and the given Python numbers, compared with what the outputs slot holds. The model's
    parameters are perturbed when the task needs it (TaskStore.build), unless ``perturb`` is
    false: the supervisor's check of a ModelNew that kept its seeded construction's parameters
    (the kernelbench rules' seeded case: docs/torch-rules.md, "Parameters"). The model runs in
    the request's ``module_mode``, the one the candidate's ModelNew was put in."""
    slots = _slots(ctx, "check")
    task_dir = _path(req, "task_dir")
    model_seed = _seed(_field(req, "model_seed"), "check: 'model_seed'")
    perturb = req.get("perturb")
    if perturb is not None and not isinstance(perturb, bool):
        raise _bad("check: 'perturb' must be a boolean")
    mode = _module_mode(req)
    r = _input(req, slots)
    scalars = _scalars(req, slots)
    atol, rtol = _tolerance(req, "atol"), _tolerance(req, "rtol")
    start = time.perf_counter()
    with reference_numerics():
        task = ctx.store.load(task_dir)
        _same_task(slots, task, "check")
        built = ctx.store.build(task, model_seed, perturb, mode)
        built.reset()
        args = _call_args(slots, r, scalars, clone=True)
        outputs = forward(task, built.model, args)
        touched = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        del args
    entries = [{"dtype": dtype_name(t.dtype), "shape": list(t.shape)} for t in outputs]
    try:
        got = tensor_views(slots.outputs, entries)
    except SlotError as exc:
        raise _bad(f"check: the reference outputs do not fit the outputs slot: {exc.message}") \
            from exc
    stats = [compare_stats(g, t.to(g.device), atol, rtol)
             for g, t in zip(got, outputs, strict=True)]
    touched += 4 * sum(t.numel() * t.element_size() for t in outputs)  # float64 temporaries
    del outputs, got
    _release(ctx.device, touched)
    return {"outputs": stats, "seconds": time.perf_counter() - start}


# ---- baselines ----------------------------------------------------------------------------------

_preload: threading.Thread | None = None


def _import_compiler() -> None:
    try:
        import torch._dynamo  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401
    except Exception:  # the real torch.compile call reports any problem
        log.debug("preloading torch.compile failed", exc_info=True)


def start_preload(target: Callable[[], None] = _import_compiler) -> bool:
    """Runs target (imports) in a background thread, once; bench_open waits for it. False when
    it was started before."""
    global _preload
    if _preload is not None:
        return False
    _preload = threading.Thread(target=target, name="preload", daemon=True)
    _preload.start()
    return True


def _wait_preload() -> None:
    if _preload is not None:
        _preload.join()


def op_preload(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Starts importing torch.compile's machinery (seconds of CPU) in the background and answers
    at once. The supervisor asks for it only when baselines must be measured: the import holds
    the GIL often enough to slow describe and fill several-fold while it runs."""
    del ctx, req
    return {"started": start_preload()}


def _compiled(ctx: Context, built: Built, first_args: list[object]) -> Callable[..., object]:
    """torch.compile(model) (default mode); its first call (on inputs[0]) is timed into
    built.compile_seconds. The compiled model and a failure are kept with the built model, so a
    task's compilation is paid (or fails) once per bridge."""
    if built.compiled is None and built.compile_error is None:
        try:
            compiled = torch.compile(built.model)
            start = time.perf_counter()
            compiled(*first_args)
            _sync(ctx.device)
            built.compile_seconds = time.perf_counter() - start
            built.compiled = compiled
        except Exception as exc:
            log.warning("torch.compile failed", exc_info=True)
            built.compile_error = f"torch.compile(Model) failed: {exception_text(exc)}"
    if built.compiled is None:
        raise BridgeError("baseline.compile_failed", built.compile_error or "torch.compile failed")
    return built.compiled


def op_bench_open(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """The baseline callee for bench_call: the reference model under model_seed, eager or
    compiled, on views of the input slots, in the request's ``module_mode`` (the candidate's:
    a BatchNorm on batch statistics costs more than one on running ones). Baselines run with
    torch's default settings
    (cuDNN autotuning as torch defaults it) except TF32, which stays off: an fp32 candidate is
    compared with a true fp32 baseline."""
    slots = _slots(ctx, "bench_open")
    task_dir = _path(req, "task_dir")
    model_seed = _seed(_field(req, "model_seed"), "bench_open: 'model_seed'")
    mode = _field(req, "mode")
    if mode not in MODES:
        raise _bad("bench_open: 'mode' must be 'eager' or 'compile'")
    module_mode = _module_mode(req)
    if 0 not in slots.filled:
        raise _bad("bench_open: inputs[0] was never filled")
    ctx.bench = None
    _wait_preload()  # no other Python thread may run while calls are timed
    task = ctx.store.load(task_dir)
    _same_task(slots, task, "bench_open")
    built = ctx.store.build(task, model_seed, mode=module_mode)
    built.reset()
    templates = [_call_args(slots, r, [], clone=False) for r in range(len(slots.inputs))]
    result: dict[str, object] = {}
    fn: Callable[..., object] = built.model
    if mode == "compile":
        first = list(templates[0])
        for i, v in slots.scalars.get(0, {}).items():
            first[i] = v
        fn = _compiled(ctx, built, first)
        result["compile_seconds"] = built.compile_seconds
    result["settings"] = baseline_settings(str(mode), module_mode)
    ctx.bench = Bench(task, built, str(mode), fn, templates)
    # No collection inside a timed call: the collector runs now, and again at bench_close
    gc.collect()
    gc.disable()
    return result


def baseline_settings(mode: str, module_mode: str = DEFAULT_MODULE_MODE) -> dict[str, object]:
    """What a baseline's number depends on besides the GPU: torch (and for compile, inductor's
    settings and Triton's version), TF32, cuDNN's autotuning and the model's module mode."""
    out: dict[str, object] = {
        "torch": torch.__version__,
        "module_mode": module_mode,
        "tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cudnn": (torch.backends.cudnn.version()  # type: ignore[no-untyped-call]
                  if torch.backends.cudnn.is_available()  # type: ignore[no-untyped-call]
                  else None),
    }
    if mode == "compile":
        import torch._inductor.config as inductor

        settings: dict[str, object] = {key: getattr(inductor, key, None) for key in (
            "max_autotune", "max_autotune_gemm", "coordinate_descent_tuning", "freezing",
            "epilogue_fusion", "shape_padding")}
        settings["triton.cudagraphs"] = getattr(inductor.triton, "cudagraphs", None)
        out["compile_mode"] = "default"
        out["inductor"] = settings
        try:
            import triton  # type: ignore[import-untyped]  # only with CUDA builds of torch

            out["triton"] = str(triton.__version__)
        except ImportError:
            out["triton"] = None
    return out


def op_bench_empty(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """An empty launch between two events, synchronized (the calibration of bench_call)."""
    _input(req, _slots(ctx, "bench_empty"), filled=False)
    watch = ctx.watch()
    watch.sync()
    watch.start()
    watch.tiny()
    return {"ev_ms": watch.stop()}


def op_bench_call(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """The baseline on the tensors now in inputs[r] (and the given numbers), between two events,
    synchronized."""
    slots = _slots(ctx, "bench_call")
    bench = ctx.bench
    if bench is None:
        raise _bad("bench_call: no baseline open (send 'bench_open' first)")
    r = _input(req, slots)
    args = list(bench.templates[r])
    for i, v in _scalars(req, slots):
        args[i] = v
    _wait_preload()
    watch = ctx.watch()
    watch.sync()
    if bench.mode == "eager":
        watch.start()
        out = call_task(bench.task, "task.forward_raised", "forward()", bench.fn, *args)
        ev_ms = watch.stop()
    else:
        try:
            watch.start()
            out = bench.fn(*args)
            ev_ms = watch.stop()
        except Exception as exc:
            log.warning("compiled model failed", exc_info=True)
            raise BridgeError("baseline.compile_failed", one_line(
                f"torch.compile(Model) failed while timing: {exception_text(exc)}")) from exc
    del out
    return {"ev_ms": ev_ms}


def op_bench_close(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    ctx.bench = None
    gc.enable()
    return {}


def op_shutdown(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    _close_slots(ctx)
    return {}


OPS: dict[str, Callable[[Context, dict[str, Any]], dict[str, object]]] = {
    "describe": op_describe,
    "slots": op_slots,
    "fill": op_fill,
    "check": op_check,
    "bench_open": op_bench_open,
    "bench_empty": op_bench_empty,
    "bench_call": op_bench_call,
    "bench_close": op_bench_close,
    "slots_close": op_slots_close,
    "preload": op_preload,
    "shutdown": op_shutdown,
}


# ---- the loop -----------------------------------------------------------------------------------

def handle(ctx: Context, line: bytes | None) -> tuple[dict[str, object], bool]:
    """One request line (None: a line over MAX_REQUEST_BYTES) -> (answer, stop)."""
    req_id: object = None
    try:
        if line is None:
            raise _bad(f"request line longer than {MAX_REQUEST_BYTES} bytes")
        try:
            req = json.loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise _bad("request is not valid UTF-8") from exc
        except json.JSONDecodeError as exc:
            raise _bad(f"request is not valid JSON ({exc.msg} at column {exc.colno})") from exc
        if not isinstance(req, dict):
            raise _bad("request must be a JSON object")
        if isinstance(req.get("id"), (int, str)) and not isinstance(req.get("id"), bool):
            req_id = req["id"]
        else:
            raise _bad("request needs an 'id' (integer or string)")
        op = req.get("op")
        handler = OPS.get(op) if isinstance(op, str) else None
        if handler is None:
            raise _bad(f"unknown op {op!r}; expected one of {', '.join(OPS)}")
        with torch.no_grad():
            result = handler(ctx, req)
        return {"id": req_id, "ok": True, "result": result}, op == "shutdown"
    except BridgeError as err:
        error = {"code": err.code, "message": err.message}
        return {"id": req_id, "ok": False, "error": error}, False
    except Exception as exc:
        log.exception("internal error")
        error = {"code": "bridge.internal", "message": exception_text(exc)}
        return {"id": req_id, "ok": False, "error": error}, False
    finally:
        restore_torch_defaults()


def encode(answer: dict[str, object]) -> str:
    """One answer line: JSON-safe (non-finite floats as strings); an answer that still cannot be
    encoded becomes a bridge.internal error with the same id."""
    try:
        return json.dumps(json_safe(answer), allow_nan=False)
    except (TypeError, ValueError) as exc:
        error = {"code": "bridge.internal", "message": f"unencodable answer: {exception_text(exc)}"}
        req_id = answer.get("id")
        return json.dumps({"id": req_id if isinstance(req_id, (int, str)) else None, "ok": False,
                           "error": error})


def serve(requests: BinaryIO, answers: IO[str], ctx: Context) -> int:
    """Answers requests until EOF or shutdown; returns the exit status (0)."""
    for line in lines(requests, MAX_REQUEST_BYTES):
        if line is not None and not line.strip():
            continue
        start = time.perf_counter()
        answer, stop = handle(ctx, line)
        answers.write(encode(answer) + "\n")
        answers.flush()
        error = answer.get("error")
        status = error["code"] if isinstance(error, dict) else "ok"
        log.info("request %s: %s (%.3f s)", answer.get("id"), status, time.perf_counter() - start)
        if stop:
            break
    _close_slots(ctx)
    return 0
