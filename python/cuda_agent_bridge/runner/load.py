"""Loading a PyTorch-format candidate: ``ModelNew`` from a kernelbench file or a workdir, with
no compiler started in this process; and the build step's recording of ``load_inline`` calls.

Contract:
- ``build_model(plan, device)``: the task is loaded as the bridge loads it (its model.py gives
  ``get_init_inputs()`` and the precision); for kernelbench, ``load_inline`` is answered from
  ``candidate.inline_modules`` (spec key -> built module; a call whose spec was not built is
  ``candidate.load_failed``) and ``cpp_extension.load`` is refused; for a workdir, the prebuilt
  ``extension`` is imported as ``cuda_extension``. The file is imported, then, under
  ``seed_all(init_seed)``, ``ModelNew(*get_init_inputs())`` is built, moved to the device, cast
  to the task's precision and put in the plan's ``module_mode`` (the reference's: eval under
  the cuda-agent rules, training under kernelbench; tasks.MODULE_MODES). Its parameters
  (``pairing``): under the cuda-agent rules its ``state_dict`` must have exactly the spec's
  parameter names and shapes, in any order (what ``load_state_dict(strict=True)`` needs), else
  ``candidate.params_mismatch``; under kernelbench the state_dicts pair when the names and
  shapes are the spec's, or when each of the spec's shapes, in order, finds an entry of
  ModelNew's (``_by_shape``), and otherwise ModelNew keeps the parameters its seeded
  construction gave it (KernelBench's own semantics: ``set_seed`` before each model's
  construction, no pairing; the supervisor then checks against the reference built under the
  same seed, unperturbed: docs/torch-rules.md, "Parameters"). Returns the model and the names
  that receive the spec's parameters, or None for the seeded case. Failures: ``Fatal`` with
  ``candidate.load_failed``, ``candidate.init_failed``, ``candidate.params_mismatch`` or
  ``worker.bad_plan`` (the task).
- ``record_inline(path, out_path)``: imports the file with ``load_inline`` recording its
  arguments (nothing is compiled; the returned modules cannot be called), checks that
  ``ModelNew`` is defined and writes ``{"specs": [...]}`` (torch_build.inline_spec's form).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import itertools
import json
import os
import sys
import types
from typing import Any

import torch
from torch import nn

from ..errors import BridgeError, exception_text, task_line
from ..tasks import Task, TaskStore, call_task, seed_all
from .events import Fatal
from .plan import Candidate, Plan

MAX_INLINE_CALLS = 64
_counter = itertools.count()
# load_inline's arguments that decide what is built (torch_build.inline_spec takes these).
INLINE_KEYS = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags",
               "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "with_cuda",
               "with_pytorch_error_handling", "no_implicit_headers")


def _exc_line(exc: BaseException, path: str) -> str:
    line = task_line(exc, path)
    return f"{exception_text(exc)} (line {line})" if line else exception_text(exc)


MAX_SOURCE_BYTES = 4 << 20  # static_check.py's cap


def _exec_file(path: str, name: str, what: str) -> types.ModuleType:
    """Runs the candidate's file as module `name` from its source text, the bytes the build
    step's static check read: never through an import loader, which would take a matching
    ``__pycache__`` bytecode file instead of the source (code nobody checked)."""
    if not os.path.isfile(path):
        raise Fatal("candidate.load_failed", f"{path} does not exist")
    try:
        with open(path, "rb") as f:
            source = f.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise Fatal("candidate.load_failed", f"cannot read {path}: {exc.strerror}") from exc
    if len(source) > MAX_SOURCE_BYTES:
        raise Fatal("candidate.load_failed", f"{what} is larger than {MAX_SOURCE_BYTES} bytes")
    module = types.ModuleType(name)
    module.__file__ = path
    sys.modules[name] = module
    try:
        code = compile(source, path, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the candidate's own module, checked statically
    except BaseException as exc:  # the candidate's code: SystemExit and friends included
        sys.modules.pop(name, None)
        raise Fatal("candidate.load_failed",
                    f"importing {what} raised {_exc_line(exc, path)}") from exc
    return module


def load_extension(name: str, path: str) -> types.ModuleType:
    """Imports the extension module `name` from a built shared object (its PyInit_<name>)."""
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise Fatal("candidate.load_failed", f"cannot load {path}")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except BaseException as exc:
        raise Fatal("candidate.load_failed",
                    f"loading {os.path.basename(path)} raised {_exc_line(exc, '')}") from exc
    return module


def inline_arguments(real: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """load_inline's call bound to its signature, defaults applied, INLINE_KEYS only."""
    bound = inspect.signature(real).bind(*args, **kwargs)
    bound.apply_defaults()
    return {k: v for k, v in bound.arguments.items() if k in INLINE_KEYS}


class _Unbuilt(types.ModuleType):
    """What load_inline returns while its calls are being recorded: nothing can be called yet."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def unbuilt(*_args: Any, **_kwargs: Any) -> Any:
            raise RuntimeError(f"{self.__name__}.{attr}() called while the module is imported "
                               "for the build step; call extension functions from forward()")

        return unbuilt


def _not_supported(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("torch.utils.cpp_extension.load() (source files) is not supported in "
                       "kernelbench candidates: pass the sources to load_inline()")


def patch_builders(load_inline: Any) -> Any:
    """Replaces torch.utils.cpp_extension.load_inline (and load, refused) for candidate code;
    returns the real load_inline."""
    from torch.utils import cpp_extension

    real = cpp_extension.load_inline
    cpp_extension.load_inline = load_inline
    cpp_extension.load = _not_supported
    return real


def serve_inline(modules: dict[str, str]) -> None:
    """load_inline answered from the build step's modules (spec key -> shared object): no
    compiler may be started here."""
    from ..torch_build import inline_spec, spec_key

    real: Any = None

    def load_inline(*args: Any, **kwargs: Any) -> types.ModuleType:
        spec = inline_spec(**inline_arguments(real, args, kwargs))
        path = modules.get(spec_key(spec))
        if path is None:
            raise RuntimeError(f"load_inline(name={spec['name']!r}) was called with sources or "
                               "flags the build step did not see (load_inline must be called "
                               "the same way every time the file is imported)")
        loaded = sys.modules.get(spec["name"])
        if isinstance(loaded, types.ModuleType):
            return loaded
        module = load_extension(spec["name"], path)
        sys.modules[spec["name"]] = module
        return module

    real = patch_builders(load_inline)


def record_inline(path: str, out_path: str) -> None:
    """The build step's first half (see the module's contract)."""
    from ..torch_build import inline_spec

    specs: list[dict[str, Any]] = []
    real: Any = None

    def load_inline(*args: Any, **kwargs: Any) -> types.ModuleType:
        spec = inline_spec(**inline_arguments(real, args, kwargs))
        if len(specs) >= MAX_INLINE_CALLS:
            raise RuntimeError(f"more than {MAX_INLINE_CALLS} load_inline calls")
        specs.append(spec)
        return _Unbuilt(spec["name"])

    real = patch_builders(load_inline)
    model_class(Candidate("kernelbench", path, ""))
    data = json.dumps({"specs": specs})
    try:
        with open(out_path, "w", encoding="utf-8") as f:
            f.write(data)
    except OSError as exc:
        raise Fatal("worker.internal", f"cannot write {out_path}: {exc.strerror}") from exc


def model_class(cand: Candidate) -> type[nn.Module]:
    """ModelNew from the kernelbench file or the workdir's model_new.py (whose ``import
    cuda_extension`` gets the prebuilt extension)."""
    name = f"cuda_agent_candidate_{next(_counter)}"
    if cand.format == "kernelbench":
        path, what = cand.path, os.path.basename(cand.path)
    else:
        path, what = os.path.join(cand.path, "model_new.py"), "model_new.py"
        assert cand.extension is not None
        # The prebuilt extension is preloaded; the workdir is not put on sys.path, so no file
        # of it can shadow a module the harness imports (safetensors.py, numpy.py, ...).
        sys.modules["cuda_extension"] = load_extension("cuda_extension", cand.extension)
    module = _exec_file(path, name, what)
    cls = getattr(module, "ModelNew", None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise Fatal("candidate.load_failed", f"{what} defines no class ModelNew(nn.Module)")
    return cls


def _by_shape(want: list[tuple[str, tuple[int, ...]]],
              ours: list[tuple[str, tuple[int, ...]]]) -> list[str] | None:
    """The kernelbench rules' pairing where names differ (KernelBench itself never pairs; both
    of its models are seeded alike): each reference parameter, in order, takes the next entry
    of ModelNew's state_dict (in order) of the same shape; None when one finds none (then
    ModelNew keeps its seeded construction's parameters: ``pairing``). Entries left over
    (buffers of ModelNew's own) keep the values its seeded __init__ gave them."""
    names: list[str] = []
    j = 0
    for _, shape in want:
        while j < len(ours) and ours[j][1] != shape:
            j += 1
        if j == len(ours):
            return None
        names.append(ours[j][0])
        j += 1
    return names


def _mismatch(want: dict[str, tuple[int, ...]], ours: dict[str, tuple[int, ...]]) -> str:
    missing = [k for k in want if k not in ours]
    unexpected = [k for k in ours if k not in want]
    reshaped = [k for k in want if k in ours and ours[k] != want[k]]
    parts = []
    if missing:
        parts.append(f"missing {', '.join(missing[:8])}")
    if unexpected:
        parts.append(f"unexpected {', '.join(unexpected[:8])}")
    if reshaped:
        parts.append("shape differs for " + ", ".join(
            f"{k} ({list(ours[k])} vs {list(want[k])})" for k in reshaped[:8]))
    return "; ".join(parts)


def pairing(model: nn.Module, plan: Plan) -> list[str] | None:
    """The names in ModelNew's state_dict that receive the reference's parameters, in the
    spec's order, or None: ModelNew keeps the parameters of its seeded construction.

    Under the cuda-agent rules they must be the reference's names, with its shapes, and nothing
    more (``load_state_dict`` strict, as the published rules load the reference's state_dict
    into ModelNew); else ``candidate.params_mismatch``. Under kernelbench they are the
    reference's names, or entries matched by order and shape (``_by_shape``); where neither
    pairs (a dropped bias that a following norm cancels, a norm's affine parameters declared
    under other names and in another place), None: KernelBench never pairs state_dicts, it
    builds both models under the same seed, and so does the supervisor then."""
    want = [(p.name, p.shape) for p in plan.spec.params]
    try:
        ours = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    except Exception as exc:
        raise Fatal("candidate.init_failed",
                    f"ModelNew.state_dict() raised {exception_text(exc)}") from exc
    if dict(want) == dict(ours):
        return [name for name, _ in want]
    if plan.candidate.rules == "kernelbench":
        return _by_shape(want, ours)
    raise Fatal("candidate.params_mismatch",
                "ModelNew's state_dict must have the reference Model's names and shapes "
                f"(load_state_dict strict): {_mismatch(dict(want), dict(ours))}")


def _task(plan: Plan) -> Task:
    try:
        return TaskStore(torch.device("cpu")).load(plan.candidate.task_dir)
    except BridgeError as exc:
        raise Fatal("worker.bad_plan",
                    f"task {plan.candidate.task_dir}: {exc.message}") from exc


def build_model(plan: Plan, device: torch.device) -> tuple[nn.Module, list[str] | None]:
    """ModelNew(*get_init_inputs()) as the module's contract says, and ``pairing``."""
    task = _task(plan)
    if plan.candidate.format == "kernelbench":
        serve_inline(plan.candidate.inline_modules)
    cls = model_class(plan.candidate)
    seed_all(plan.candidate.init_seed)
    try:
        init = call_task(task, "task.init_raised", "get_init_inputs()", task.get_init_inputs)
        if not isinstance(init, (list, tuple)):
            raise Fatal("candidate.init_failed", "get_init_inputs() must return a list")
        model = cls(*init)
        model.to(device)
        if task.cast_dtype is not None:
            model.to(task.cast_dtype)
        # the reference's mode (tasks.TaskStore.build, the same module_mode from the supervisor)
        model.train(plan.candidate.module_mode == "train")
    except BridgeError as exc:
        raise Fatal("candidate.init_failed", exc.message) from exc
    except Fatal:
        raise
    except BaseException as exc:
        raise Fatal("candidate.init_failed",
                    f"ModelNew(*get_init_inputs()) raised {exception_text(exc)}") from exc
    return model, pairing(model, plan)
