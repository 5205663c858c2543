"""The bridge's JSON-lines loop and its ops (describe, reference, time, slots, slots_close,
check, preload, shutdown).

Contract: ``serve(requests, answers, ctx)`` reads one request per line from the binary stream
``requests`` until EOF or ``shutdown`` and writes exactly one answer line per non-blank request
line to ``answers``, flushed: ``{"id", "ok": true, "result"}`` or ``{"id", "ok": false, "error":
{"code", "message"}}``. It never raises for a request: malformed lines, unknown ops and missing or
ill-typed fields answer ``bridge.bad_request``, task failures their ``task.*`` code, anything
unexpected ``bridge.internal`` (exception type and message). Ops run under ``torch.no_grad()``;
torch globals that task code may change are restored after every request.

Spec entries (describe) are ``{"index", "name", "dtype", "shape", "device"}``; ``device`` says
where the candidate receives the tensor: ``"cpu"`` for Python scalars, ``"cuda"`` otherwise,
whatever the bridge's own device.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import IO, Any

import torch

from .errors import BridgeError, exception_text, one_line
from .files import save_tensors
from .slots import MAX_SLOTS, Slot, SlotError, layout, send_fds
from .tasks import (
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
)
from .timing import Clock, Protocol, run_protocol

log = logging.getLogger("cuda_agent_bridge")
MODES = ("eager", "compile")


@dataclass
class Context:
    """What the ops share: the task store, the clock of the bridge's device, and the output
    slots handed to the current evaluation's runner (op_slots)."""

    store: TaskStore
    clock: Clock
    slots: list[Slot] = field(default_factory=list)


@dataclass(frozen=True)
class ReferenceSet:
    seed: int
    inputs_path: str
    outputs_path: str | None
    near_seed: int | None = None  # a near-duplicate of the set of this seed (near_duplicate)


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
    if not isinstance(value, str) or not value:
        raise _bad(f"{req['op']}: '{name}' must be a non-empty string")
    return value


def _sets(req: dict[str, Any]) -> list[ReferenceSet]:
    raw = _field(req, "sets")
    if not isinstance(raw, list) or not raw:
        raise _bad("reference: 'sets' must be a non-empty list")
    sets = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _bad(f"reference: sets[{i}] must be an object")
        inputs_path = item.get("inputs_path")
        outputs_path = item.get("outputs_path")
        if not isinstance(inputs_path, str) or not inputs_path:
            raise _bad(f"reference: sets[{i}].inputs_path must be a non-empty string")
        if outputs_path is not None and (not isinstance(outputs_path, str) or not outputs_path):
            raise _bad(f"reference: sets[{i}].outputs_path must be a non-empty string or null")
        near = item.get("near_seed")
        sets.append(ReferenceSet(_seed(item.get("seed"), f"reference: sets[{i}].seed"),
                                 inputs_path, outputs_path,
                                 None if near is None
                                 else _seed(near, f"reference: sets[{i}].near_seed")))
    return sets


def _modes(req: dict[str, Any]) -> list[str]:
    raw = _field(req, "modes")
    if (
        not isinstance(raw, list)
        or not raw
        or any(m not in MODES for m in raw)
        or len(set(raw)) != len(raw)
    ):
        raise _bad("time: 'modes' must be a non-empty list of distinct 'eager', 'compile'")
    return [str(m) for m in raw]


def _entry(index: int, name: str, t: torch.Tensor, scalar: bool) -> dict[str, object]:
    return {
        "index": index,
        "name": name,
        "dtype": dtype_name(t.dtype),
        "shape": list(t.shape),
        "device": "cpu" if scalar else "cuda",
    }


def _save(path: str, prefix: str, tensors: list[torch.Tensor], seed: int, kind: str) -> None:
    try:
        save_tensors(path, prefix, tensors, {"seed": str(seed), "kind": kind})
    except OSError as exc:
        raise BridgeError("bridge.internal", f"cannot write {path}: {exc}") from exc


def op_describe(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Builds the model, runs forward() twice on one input set, reports the spec.

    The model is built with the optional ``model_seed`` (default: ``seed``).
    """
    task_dir = _path(req, "task_dir")
    seed = _seed(_field(req, "seed"), "describe: 'seed'")
    model_seed = _seed(req.get("model_seed", seed), "describe: 'model_seed'")
    with reference_numerics():
        task = ctx.store.load(task_dir)
        built = ctx.store.build(task, model_seed)
        built.reset()
        inputs = ctx.store.inputs(task, seed, files=False)  # only dtypes and shapes are read
        outputs = forward(task, built.model, inputs.fresh_call())
        check_deterministic(outputs, forward(task, built.model, inputs.fresh_call()))
    names = arg_names(built.model, len(inputs.files))
    return {
        "args": [_entry(i, names[i], t, inputs.scalar[i]) for i, t in enumerate(inputs.files)],
        "params": [
            _entry(i, name, t, False) for i, (name, t) in enumerate(built.initial_state.items())
        ],
        "outputs": [
            _entry(i, output_name(i, len(outputs)), t, False) for i, t in enumerate(outputs)
        ],
        "precision": task.precision,
    }


def op_reference(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Writes the params file once, and an inputs (and outputs) file per set."""
    task_dir = _path(req, "task_dir")
    model_seed = _seed(_field(req, "model_seed"), "reference: 'model_seed'")
    params_path = _path(req, "params_path")
    sets = _sets(req)
    start = time.perf_counter()
    with reference_numerics():
        task = ctx.store.load(task_dir)
        built = ctx.store.build(task, model_seed)
        built.reset()
        # Files are written by a few threads while the next set is computed: serializing and
        # writing hundreds of MB per set dominates this request for large tasks.
        with ThreadPoolExecutor(max_workers=4) as writers:
            pending = [writers.submit(_save, params_path, "params",
                                      _cpu(list(built.initial_state.values())), model_seed,
                                      "params")]
            for s in sets:
                if s.near_seed is None:
                    inputs = ctx.store.inputs(task, s.seed)
                else:
                    inputs = near_duplicate(ctx.store.inputs(task, s.near_seed), s.seed)
                pending.append(writers.submit(_save, s.inputs_path, "args", inputs.files,
                                              s.seed, "inputs"))
                if s.outputs_path is not None:
                    outputs = _cpu(forward(task, built.model, inputs.fresh_call()))
                    pending.append(writers.submit(_save, s.outputs_path, "outputs", outputs,
                                                  s.seed, "outputs"))
            for job in pending:
                job.result()  # re-raises the first write error
    return {"sets": len(sets), "seconds": time.perf_counter() - start}


def _cpu(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """CPU copies, made on the calling thread (device work stays on the request's thread)."""
    return [t.detach().to("cpu") for t in tensors]


def _time_compiled(
    ctx: Context, built: Built, sets: list[list[object]], protocol: Protocol, rng_seed: str
) -> dict[str, object]:
    """torch.compile(model) (default mode), timed; failures give baseline.compile_failed.

    The compiled model and a compilation failure are kept with the built model, so a task's
    compilation is paid (or fails) once per bridge; compile_seconds is that first call's time.
    """
    if built.compiled is None and built.compile_error is None:
        try:
            compiled = torch.compile(built.model)
            start = time.perf_counter()
            compiled(*sets[0])
            ctx.clock.sync()
            built.compile_seconds = time.perf_counter() - start
            built.compiled = compiled
        except Exception as exc:
            log.warning("torch.compile failed", exc_info=True)
            built.compile_error = f"torch.compile(Model) failed: {exception_text(exc)}"
    fn = built.compiled
    if fn is None:
        return {"ok": False, "code": "baseline.compile_failed", "message": built.compile_error}
    try:
        report = run_protocol(lambda args: fn(*args), sets, protocol, ctx.clock, rng_seed)
    except Exception as exc:
        log.warning("compiled model failed", exc_info=True)
        message = one_line(f"torch.compile(Model) failed while timing: {exception_text(exc)}")
        return {"ok": False, "code": "baseline.compile_failed", "message": message}
    report["compile_seconds"] = built.compile_seconds
    return report


_preload: threading.Thread | None = None


def _import_compiler() -> None:
    try:
        import torch._dynamo  # noqa: F401
        import torch._inductor.compile_fx  # noqa: F401
    except Exception:  # the real torch.compile call reports any problem
        log.debug("preloading torch.compile failed", exc_info=True)


def start_preload(target: Callable[[], None] = _import_compiler) -> bool:
    """Runs target (imports) in a background thread, once; op_time waits for it before timing.
    False when it was started before."""
    global _preload
    if _preload is not None:
        return False
    _preload = threading.Thread(target=target, name="preload", daemon=True)
    _preload.start()
    return True


def op_preload(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Starts importing torch.compile's machinery (seconds of CPU) in the background and answers
    at once. The supervisor asks for it only when baselines must be measured: the import holds
    the GIL often enough to slow describe and reference several-fold while it runs."""
    del ctx, req
    return {"started": start_preload()}


def _wait_preload() -> None:
    if _preload is not None:
        _preload.join()


def op_time(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Times the eager and/or compiled model with the shared protocol.

    Baselines run with torch's default settings (cuDNN autotuning as torch defaults it) except
    TF32, which stays off: an fp32 candidate is compared with a true fp32 baseline.
    """
    task_dir = _path(req, "task_dir")
    model_seed = _seed(_field(req, "model_seed"), "time: 'model_seed'")
    raw_seeds = _field(req, "seeds")
    if not isinstance(raw_seeds, list) or not raw_seeds:
        raise _bad("time: 'seeds' must be a non-empty list of integers")
    seeds = [_seed(s, f"time: seeds[{i}]") for i, s in enumerate(raw_seeds)]
    modes = _modes(req)
    try:
        protocol = Protocol.from_json(_field(req, "protocol"))
    except ValueError as exc:
        raise _bad(f"time: {exc}") from exc

    _wait_preload()  # no other Python thread may run while calls are timed
    task: Task = ctx.store.load(task_dir)
    built = ctx.store.build(task, model_seed)
    sets = [ctx.store.inputs(task, s, files=False).call for s in seeds]
    model = built.model
    result: dict[str, object] = {}
    for mode in modes:
        rng_seed = f"{model_seed}:{seeds}:{mode}"
        if mode == "eager":
            result["eager"] = run_protocol(
                lambda args: call_task(task, "task.forward_raised", "forward()", model, *args),
                sets, protocol, ctx.clock, rng_seed,
            )
        else:
            result["compile"] = _time_compiled(ctx, built, sets, protocol, rng_seed)
    return result


def _close_slots(ctx: Context) -> None:
    for slot in ctx.slots:
        slot.close()
    ctx.slots = []
    if ctx.clock.is_cuda:
        torch.cuda.empty_cache()


def op_slots(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Allocates ``count`` output slots of ``bytes`` each (replacing any earlier ones) and sends
    their descriptors on the descriptor channel, in slot order, before this answer."""
    count, nbytes = _field(req, "count"), _field(req, "bytes")
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SLOTS:
        raise _bad(f"slots: 'count' must be an integer in [1, {MAX_SLOTS}]")
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or not 0 < nbytes < 2**47:
        raise _bad("slots: 'bytes' must be a positive integer")
    _close_slots(ctx)
    kind = "cuda" if ctx.clock.is_cuda else "cpu"
    device = ctx.store.device.index or 0
    try:
        for _ in range(count):
            ctx.slots.append(Slot.allocate(kind, nbytes, device))
        send_fds([s.fd for s in ctx.slots])
    except SlotError as exc:
        _close_slots(ctx)
        raise BridgeError("env.gpu_memory" if "cuMem" in exc.message else "bridge.internal",
                          f"cannot make {count} output slots of {nbytes / 1e9:.2f} GB: "
                          f"{exc.message}") from exc
    for s in ctx.slots:  # the memory stays mapped here; the runner has its own descriptors
        os.close(s.fd)
        s.fd = -1
    return {"count": count, "bytes": nbytes, "kind": kind}


def op_slots_close(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    count = len(ctx.slots)
    _close_slots(ctx)
    return {"closed": count}


CHECK_CHUNK = 1 << 26  # elements compared at once (float64 temporaries of 512 MB)


def _number(x: float) -> object:
    """A JSON-safe float: NaN and infinities as strings."""
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


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
            "first_out": _number(first_out), "first_ref": _number(first_ref)}


@torch.no_grad()
def op_check(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    """Computes the reference outputs of one set (model seed, seed, optional near_seed) on the
    bridge's device and compares them with what the runner left in slot ``slot``."""
    task_dir = _path(req, "task_dir")
    model_seed = _seed(_field(req, "model_seed"), "check: 'model_seed'")
    seed = _seed(_field(req, "seed"), "check: 'seed'")
    near = req.get("near_seed")
    near_seed = None if near is None else _seed(near, "check: 'near_seed'")
    index = _field(req, "slot")
    if isinstance(index, bool) or not isinstance(index, int) or \
            not 0 <= index < len(ctx.slots):
        raise _bad(f"check: 'slot' must be an integer in [0, {len(ctx.slots)})")
    tol = [_field(req, k) for k in ("atol", "rtol")]
    if not all(isinstance(t, (int, float)) and not isinstance(t, bool) and t >= 0 for t in tol):
        raise _bad("check: 'atol' and 'rtol' must be non-negative numbers")
    start = time.perf_counter()
    with reference_numerics():
        task = ctx.store.load(task_dir)
        built = ctx.store.build(task, model_seed)
        built.reset()
        if near_seed is None:
            inputs = ctx.store.inputs(task, seed, files=False)
        else:
            inputs = near_duplicate(ctx.store.inputs(task, near_seed, files=False), seed)
        outputs = forward(task, built.model, inputs.call)
        del inputs
    slot = ctx.slots[index]
    specs = [{"dtype": dtype_name(t.dtype), "shape": list(t.shape)} for t in outputs]
    offsets, size = layout(specs)
    if size > slot.nbytes:
        raise BridgeError("bridge.internal", f"check: the reference outputs need {size} bytes; "
                          f"the slots hold {slot.nbytes}")
    stats = []
    for t, at in zip(outputs, offsets, strict=True):
        got = slot.view(at, t.dtype, t.shape)
        stats.append(compare_stats(got, t.to(got.device), float(tol[0]), float(tol[1])))
    big = sum(t.numel() * t.element_size() for t in outputs) > (1 << 30)
    del outputs
    if big and ctx.clock.is_cuda:
        torch.cuda.empty_cache()  # the runner needs the memory more than our allocator cache
    return {"outputs": stats, "seconds": time.perf_counter() - start}


def op_shutdown(ctx: Context, req: dict[str, Any]) -> dict[str, object]:
    _close_slots(ctx)
    return {}


OPS: dict[str, Callable[[Context, dict[str, Any]], dict[str, object]]] = {
    "describe": op_describe,
    "reference": op_reference,
    "time": op_time,
    "slots": op_slots,
    "slots_close": op_slots_close,
    "check": op_check,
    "preload": op_preload,
    "shutdown": op_shutdown,
}


def handle(ctx: Context, line: bytes) -> tuple[dict[str, object], bool]:
    """One request line -> (answer, stop)."""
    req_id: object = None
    try:
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


def _encode(answer: dict[str, object]) -> str:
    try:
        return json.dumps(answer, allow_nan=False)
    except (TypeError, ValueError) as exc:
        error = {"code": "bridge.internal", "message": f"unencodable answer: {exception_text(exc)}"}
        return json.dumps({"id": answer.get("id"), "ok": False, "error": error})


def serve(requests: Iterable[bytes], answers: IO[str], ctx: Context) -> int:
    """Answers requests until EOF or shutdown; returns the exit status (0)."""
    for line in requests:
        if not line.strip():
            continue
        start = time.perf_counter()
        answer, stop = handle(ctx, line)
        answers.write(_encode(answer) + "\n")
        answers.flush()
        error = answer.get("error")
        status = error["code"] if isinstance(error, dict) else "ok"
        log.info("request %s: %s (%.3f s)", answer.get("id"), status, time.perf_counter() - start)
        if stop:
            break
    return 0
