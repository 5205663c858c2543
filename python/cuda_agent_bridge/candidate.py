"""``python -m cuda_agent_bridge.candidate PLAN.json``: runs a PyTorch-format candidate with the
GPU worker's plan and events (docs/protocol.md, "PyTorch-format candidates").

Contract: reads the same plan as ``cuda-agent-worker`` plus a ``candidate`` object (format
``kernelbench``: a ``.py`` file defining ``ModelNew``; format ``workdir``: the published
CUDA-Agent layout whose ``cuda_extension`` module is built with torch's JIT builder or loaded
prebuilt) and the task directory. Emits the worker's JSON-line events on the original stdout
(``device``, ``loaded``, ``verify`` per trial, ``verified`` plus the stdin gate, ``timing`` (the
shared protocol with checked and final calls, refusal on for every call), ``profile`` as
``worker.unsupported``, ``error``, ``done``); fd 1 points at stderr and fd 0 at
/dev/null while candidate code runs, so it can neither forge events nor read the gate.
Exit 0 after ``done``, 1 after a fatal ``error``.

``--record CANDIDATE.py SPECS.json`` is the first half of a kernelbench candidate's build (the
supervisor runs it in the sandbox): the file is imported with ``load_inline`` recording its
arguments instead of compiling, and the specs go to SPECS.json for ``torch_build``; events
``done`` or ``error`` as above. In the GPU run, ``candidate.inline_modules`` maps each spec's key
to the module built from it, and ``load_inline`` is answered from there: no compiler runs in the
sandbox.

Per trial: the params file's values are loaded into ModelNew (names from the reference Model's
state_dict), the inputs file is loaded onto the device, forward() runs under
``refusal.Refusal`` (torch compute refused: ``hack.torch_compute``), inputs and params are
compared bitwise before/after (``verify.input_modified``, ``verify.params_modified``), and the
flattened outputs are written as ``outputs.<i>``.
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import itertools
import json
import os
import sys
import time
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO, Any, BinaryIO

MAX_PLAN_BYTES = 1 << 20
MAX_TRIALS = 64
GATE_LINE_MAX = 64
MESSAGE_MAX = 4096
FORMATS = ("kernelbench", "workdir")
MAX_MODULES = 64
MAX_SLOTS = 32
_counter = itertools.count()


class Fatal(Exception):
    """Ends the run: an ``error`` event with this code, exit 1."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class CallFailure(Exception):
    """One call failed: reported in its phase's event, then the run ends early with ``done``, or,
    when ``fatal`` (a CUDA fault leaves the context unusable), with an ``error`` event."""

    def __init__(self, code: str, message: str, fatal: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.fatal = fatal


# Substrings of CUDA error texts (torch's RuntimeError) -> the worker's fault codes.
CUDA_FAULTS = (
    ("illegal memory access", "fault.illegal_address"),
    ("misaligned address", "fault.misaligned_address"),
    ("illegal instruction", "fault.illegal_instruction"),
    ("unspecified launch failure", "fault.launch_failure"),
    ("CUDA error", "fault.cuda_error"),
)


def cuda_fault(text: str) -> str | None:
    """The fault code for a CUDA error text, or None when the text is not one."""
    return next((code for key, code in CUDA_FAULTS if key in text), None)


@dataclass
class Trial:
    """One verification call: files (params, inputs, outputs), or with device data the seeds
    the set is made from and the slot its outputs go to."""

    params: str | None = None
    inputs: str | None = None
    outputs: str | None = None
    model_seed: int = 0
    seed: int = 0
    slot: int = -1


@dataclass
class Checked:
    """A checked call's set: an inputs file and an outputs file, or seeds and a slot."""

    inputs: str | None = None
    outputs: str | None = None
    seed: int = 0
    near_seed: int | None = None  # a near-duplicate of this seed's set (tasks.near_duplicate)
    slot: int = -1


@dataclass
class DataPlan:
    """Device data (docs/protocol.md): sets made here from seeds, outputs left in slots whose
    descriptors this process received as first_fd, first_fd + 1, ..."""

    kind: str
    slots: int
    slot_bytes: int
    first_fd: int


@dataclass
class TimingPlan:
    params: str | None  # None with device data: the params come from model_seed
    rotation: list[Checked]  # inputs files, or seeds (outputs unused)
    checks: list[Checked]
    final: Checked
    seed: int
    protocol: dict[str, Any]
    model_seed: int = 0


@dataclass
class Candidate:
    format: str
    path: str  # the .py file (kernelbench) or the directory (workdir)
    task_dir: str
    build_dir: str | None = None
    extension: str | None = None  # workdir: a prebuilt cuda_extension shared object
    init_seed: int = 0
    torch_device: str = "cuda"
    # kernelbench: spec key (torch_build.spec_key) -> prebuilt module; load_inline is served
    # from here instead of compiling (None: load_inline compiles, as outside the sandbox)
    inline_modules: dict[str, str] | None = None


@dataclass
class Plan:
    candidate: Candidate
    device: int
    spec: dict[str, Any]
    verify: list[Trial]
    timing: TimingPlan | None
    has_profile: bool
    gate_after_verify: bool
    data: DataPlan | None = None


@dataclass
class Runner:
    """What the trials share: the candidate model, the reference's state_dict names, the device."""

    model: Any
    names: list[str]
    device: Any
    scalar_args: list[bool] = field(default_factory=list)
    data: DeviceData | None = None


class Events:
    """JSON lines on the protocol stream, ``event`` first, flushed per line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def emit(self, name: str, fields: dict[str, Any]) -> None:
        self.stream.write(json.dumps({"event": name, **fields}, allow_nan=False) + "\n")
        self.stream.flush()

    def error(self, code: str, message: str) -> None:
        self.emit("error", {"code": code, "message": _cap(message)})


def _cap(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= MESSAGE_MAX else flat[: MESSAGE_MAX - 3] + "..."


def _take_stdio() -> tuple[BinaryIO, IO[str]]:
    """Private copies of fds 0/1 (gate, events); fd 0 becomes /dev/null, fd 1 stderr."""
    sys.stdout.flush()
    gate = os.fdopen(os.dup(0), "rb", buffering=0)
    events = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.set_inheritable(gate.fileno(), False)
    os.set_inheritable(events.fileno(), False)
    os.dup2(2, 1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdout = sys.stderr
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    return gate, events


# ---- plan ---------------------------------------------------------------------------------------

def _path(obj: dict[str, Any], key: str, where: str, required: bool = True) -> str | None:
    v = obj.get(key)
    if v is None:
        if required:
            raise Fatal("worker.bad_plan", f"plan: {where} needs '{key}'")
        return None
    if not isinstance(v, str) or not v or "\0" in v:
        raise Fatal("worker.bad_plan", f"plan: {where}.{key} must be a non-empty string")
    return v


def _parse_candidate(obj: object) -> Candidate:
    if not isinstance(obj, dict):
        raise Fatal("worker.bad_plan", "plan: needs 'candidate' as an object (format, path/dir)")
    fmt = obj.get("format")
    if fmt not in FORMATS:
        raise Fatal("worker.bad_plan",
                    f"plan: candidate.format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    path = _path(obj, "path" if fmt == "kernelbench" else "dir", "candidate")
    task_dir = _path(obj, "task_dir", "candidate")
    seed = _int(obj, "init_seed", "candidate", 2**63, 0)
    torch_device = obj.get("torch_device", "cuda")
    if torch_device not in ("cuda", "cpu"):
        raise Fatal("worker.bad_plan", "plan: candidate.torch_device must be 'cuda' or 'cpu'")
    modules = obj.get("inline_modules")
    if modules is not None and (not isinstance(modules, dict) or len(modules) > MAX_MODULES or
                                not all(isinstance(k, str) and isinstance(v, str) and v
                                        for k, v in modules.items())):
        raise Fatal("worker.bad_plan", "plan: candidate.inline_modules must map spec keys to "
                    f"library paths (at most {MAX_MODULES})")
    assert path is not None and task_dir is not None
    return Candidate(str(fmt), path, task_dir, _path(obj, "build_dir", "candidate", False),
                     _path(obj, "extension", "candidate", False) if fmt == "workdir" else None,
                     seed, torch_device, modules)


def _int(obj: dict[str, Any], key: str, where: str, top: int, default: int | None = None) -> int:
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < top:
        bound = f"2^{top.bit_length() - 1}" if top >= 2**16 and top & (top - 1) == 0 else top
        raise Fatal("worker.bad_plan", f"plan: {where}.{key} must be an integer in [0, {bound})")
    return v


def _parse_data(obj: object) -> DataPlan | None:
    if obj is None:
        return None
    if not isinstance(obj, dict) or obj.get("mode") != "device" or \
            obj.get("kind") not in ("cuda", "cpu"):
        raise Fatal("worker.bad_plan", "plan: 'data' must be {mode: device, kind: cuda|cpu, "
                    "slots, slot_bytes, first_fd}")
    return DataPlan(str(obj["kind"]), _int(obj, "slots", "data", MAX_SLOTS + 1),
                    _int(obj, "slot_bytes", "data", 2**47), _int(obj, "first_fd", "data", 1024))


def _set(c: object, where: str, device: bool, outputs: bool = True) -> Checked:
    """A set: {inputs, outputs} files, or with device data {seed, near_seed?, slot}."""
    if not isinstance(c, dict):
        raise Fatal("worker.bad_plan", f"plan: {where} must be an object")
    if not device:
        return Checked(str(_path(c, "inputs", where)),
                       _path(c, "outputs", where) if outputs else None)
    near = c.get("near_seed")
    return Checked(seed=_int(c, "seed", where, 2**64),
                   near_seed=None if near is None else _int(c, "near_seed", where, 2**64),
                   slot=_int(c, "slot", where, MAX_SLOTS) if outputs else -1)


def _parse_timing(obj: object, device: bool) -> TimingPlan | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise Fatal("worker.bad_plan", "plan: 'timing' must be an object")
    rotation = obj.get("rotation")
    if not isinstance(rotation, list) or not 1 <= len(rotation) <= MAX_TRIALS:
        raise Fatal("worker.bad_plan", "plan: timing.rotation must list 1 to "
                    f"{MAX_TRIALS} input sets")
    rot = []
    for i, f in enumerate(rotation):
        if device:
            rot.append(_set(f, f"timing.rotation[{i}]", True, outputs=False))
        elif isinstance(f, str) and f:
            rot.append(Checked(f))
        else:
            raise Fatal("worker.bad_plan", f"plan: timing.rotation[{i}] must be a file path")
    raw_checks = obj.get("checks", [])
    if not isinstance(raw_checks, list) or len(raw_checks) > MAX_TRIALS:
        raise Fatal("worker.bad_plan", f"plan: timing.checks must be a list of at most {MAX_TRIALS}")
    seed = _int(obj, "seed", "timing", 2**64, 0)
    protocol = obj.get("protocol", {})
    if not isinstance(protocol, dict):
        raise Fatal("worker.bad_plan", "plan: timing.protocol must be an object")
    return TimingPlan(None if device else str(_path(obj, "params", "timing")), rot,
                      [_set(c, f"timing.checks[{i}]", device) for i, c in enumerate(raw_checks)],
                      _set(obj.get("final"), "timing.final", device), seed, protocol,
                      _int(obj, "model_seed", "timing", 2**64) if device else 0)


def parse_plan(root: object) -> Plan:
    """The plan's fields this program uses; raises Fatal(worker.bad_plan)."""
    if not isinstance(root, dict):
        raise Fatal("worker.bad_plan", "plan: expected a JSON object")
    cand = _parse_candidate(root.get("candidate"))
    device = root.get("device", 0)
    if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device <= 1024:
        raise Fatal("worker.bad_plan", "plan: 'device' must be an integer in [0, 1024]")
    spec = root.get("spec")
    if not isinstance(spec, dict) or not all(
        isinstance(spec.get(k), list) for k in ("args", "params", "outputs")
    ):
        raise Fatal("worker.bad_plan", "plan: needs 'spec' (args, params, outputs lists)")
    raw = root.get("verify", [])
    if not isinstance(raw, list) or len(raw) > MAX_TRIALS:
        raise Fatal("worker.bad_plan", f"plan: 'verify' must be a list of at most {MAX_TRIALS}")
    data = _parse_data(root.get("data"))
    trials = []
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise Fatal("worker.bad_plan", f"plan: verify[{i}] must be an object")
        where = f"verify[{i}]"
        if data is None:
            trials.append(Trial(*(str(_path(t, k, where))
                                  for k in ("params", "inputs", "outputs"))))
        else:
            trials.append(Trial(model_seed=_int(t, "model_seed", where, 2**64),
                                seed=_int(t, "seed", where, 2**64),
                                slot=_int(t, "slot", where, data.slots)))
    gate = root.get("gate_after_verify", False)
    if gate is not None and not isinstance(gate, (bool, int)):
        raise Fatal("worker.bad_plan", "plan: 'gate_after_verify' must be a boolean")
    return Plan(cand, device, spec, trials, _parse_timing(root.get("timing"), data is not None),
                root.get("profile") is not None, bool(gate), data)


def load_plan(path: str) -> Plan:
    from .capped import ReadError, read_json

    try:
        root = read_json(path, MAX_PLAN_BYTES)
    except ReadError as exc:
        raise Fatal("worker.bad_plan", f"plan: {exc.message}") from exc
    return parse_plan(root)


# ---- device -------------------------------------------------------------------------------------

def open_device(plan: Plan) -> tuple[Any, dict[str, Any]]:
    """The torch device and the ``device`` event's fields (nulls where not known)."""
    import torch

    if plan.candidate.torch_device == "cpu":
        return torch.device("cpu"), {
            "name": "cpu", "driver": None, "cuda_driver": None, "cuda_runtime": None,
            "sm_count": None, "l2_bytes": None, "sm_clock_mhz": None,
            "compute_capability": None, "memory_bytes": None, "pci_bus_id": None,
            "device": None, "torch": torch.__version__,
        }
    if not torch.cuda.is_available():
        raise Fatal("worker.no_gpu", "no usable CUDA device (torch.cuda.is_available() is false)")
    if plan.device >= torch.cuda.device_count():
        raise Fatal("worker.no_gpu", f"device {plan.device} does not exist "
                    f"({torch.cuda.device_count()} visible)")
    dev = torch.device("cuda", plan.device)
    torch.cuda.set_device(dev)
    p = torch.cuda.get_device_properties(dev)
    bus = getattr(p, "pci_bus_id", None)
    return dev, {
        "name": p.name, "driver": None, "cuda_driver": None, "cuda_runtime": torch.version.cuda,
        "sm_count": p.multi_processor_count, "l2_bytes": getattr(p, "L2_cache_size", None),
        "sm_clock_mhz": None, "compute_capability": f"{p.major}.{p.minor}",
        "memory_bytes": p.total_memory,
        "pci_bus_id": bus if isinstance(bus, str) else None,
        "device": plan.device, "torch": torch.__version__,
    }


# ---- loading the candidate ----------------------------------------------------------------------

def _exec_file(path: str, name: str, what: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise Fatal("candidate.load_failed", f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        raise Fatal("candidate.load_failed",
                    f"importing {what} raised {_exc_line(exc, path)}") from exc
    return module


def _exc_line(exc: BaseException, path: str) -> str:
    from .errors import exception_text, task_line

    line = task_line(exc, path)
    return f"{exception_text(exc)} (line {line})" if line else exception_text(exc)


def _workdir_sources(directory: str) -> list[str]:
    """The published build's translation units: *.cu and *.cpp in the workdir (binding.cpp)
    and in kernels/; binding.cpp first."""
    found: set[str] = set()
    for sub in (directory, os.path.join(directory, "kernels")):
        for ext in ("*.cu", "*.cpp"):
            found.update(glob.glob(os.path.join(sub, ext)))
    binding = os.path.join(directory, "binding.cpp")
    found.discard(binding)
    return [binding, *sorted(found)]


def _load_extension(name: str, path: str) -> types.ModuleType:
    """Imports the extension module `name` from a built shared object (its PyInit_<name>)."""
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    if spec is None:
        raise Fatal("candidate.load_failed", f"cannot load {path}")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        raise Fatal("candidate.load_failed",
                    f"loading {os.path.basename(path)} raised {_exc_line(exc, '')}") from exc
    return module


def load_cuda_extension(cand: Candidate) -> types.ModuleType:
    """The workdir's ``cuda_extension`` module: the prebuilt file (the supervisor builds it with
    torch_build), or built here with torch's JIT builder into ``build_dir``."""
    directory = cand.path
    if cand.extension is not None:
        return _load_extension("cuda_extension", cand.extension)
    sources = _workdir_sources(directory)
    missing = [s for s in (sources[0], os.path.join(directory, "binding_registry.h"))
               if not os.path.isfile(s)]
    if missing:
        raise Fatal("candidate.load_failed",
                    f"workdir {directory} has no {', '.join(os.path.basename(m) for m in missing)}")
    if len(sources) == 1:
        raise Fatal("candidate.load_failed", f"workdir {directory} has no kernels/*.cu or *.cpp")
    from torch.utils import cpp_extension

    build_dir = cand.build_dir or os.path.join(directory, "build", "cuda_agent")
    os.makedirs(build_dir, exist_ok=True)
    try:
        module = cpp_extension.load(
            name="cuda_extension", sources=sources, build_directory=build_dir,
            extra_include_paths=[directory], extra_cflags=["-O3"],
            extra_cuda_cflags=["-O3"], verbose=False,
        )
    except (Exception, SystemExit) as exc:
        raise Fatal("build.error", f"building cuda_extension failed: {_cap(str(exc))}") from exc
    assert isinstance(module, types.ModuleType)
    return module


# load_inline's arguments that decide what is built (torch_build.inline_spec takes these).
INLINE_KEYS = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags",
               "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "with_cuda",
               "with_pytorch_error_handling", "no_implicit_headers")


def inline_arguments(real: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """load_inline's call bound to its signature, defaults applied, INLINE_KEYS only."""
    import inspect

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
    """load_inline answered from the build step's modules (spec key -> shared object): what the
    sandbox runs, where no compiler may be started."""
    from .torch_build import inline_spec, spec_key

    real: Any = None

    def load_inline(*args: Any, **kwargs: Any) -> types.ModuleType:
        spec = inline_spec(**inline_arguments(real, args, kwargs))
        path = modules.get(spec_key(spec))
        if path is None:
            raise RuntimeError(f"load_inline(name={spec['name']!r}) was called with sources or "
                               "flags the build step did not see (load_inline must be called "
                               "the same way every time the file is imported)")
        if spec["name"] in sys.modules:
            return sys.modules[spec["name"]]
        module = _load_extension(spec["name"], path)
        sys.modules[spec["name"]] = module
        return module

    real = patch_builders(load_inline)


def record_inline(path: str, out_path: str) -> int:
    """The build step's first half: imports the kernelbench file with load_inline recording its
    calls (nothing is compiled; the returned modules cannot be called), checks that ModelNew is
    defined, and writes ``{"specs": [...]}`` to out_path for torch_build."""
    from .torch_build import inline_spec

    specs: list[dict[str, Any]] = []
    real: Any = None

    def load_inline(*args: Any, **kwargs: Any) -> types.ModuleType:
        spec = inline_spec(**inline_arguments(real, args, kwargs))
        if len(specs) >= MAX_MODULES:
            raise RuntimeError(f"more than {MAX_MODULES} load_inline calls")
        specs.append(spec)
        return _Unbuilt(spec["name"])

    real = patch_builders(load_inline)
    cand = Candidate("kernelbench", path, "")
    load_model_class(cand)
    data = json.dumps({"specs": specs})
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(data)
    return 0


def load_model_class(cand: Candidate) -> type:
    """ModelNew from the candidate (kernelbench file, or the workdir's model_new.py)."""
    from torch import nn

    if cand.build_dir is not None and cand.format == "kernelbench":
        os.environ["TORCH_EXTENSIONS_DIR"] = cand.build_dir  # load_inline's build cache
    if cand.inline_modules is not None:
        serve_inline(cand.inline_modules)
    name = f"cuda_agent_candidate_{next(_counter)}"
    if cand.format == "kernelbench":
        path, what = cand.path, os.path.basename(cand.path)
    else:
        path, what = os.path.join(cand.path, "model_new.py"), "model_new.py"
        sys.modules["cuda_extension"] = load_cuda_extension(cand)
        sys.path.insert(0, os.path.abspath(cand.path))
    if not os.path.isfile(path):
        raise Fatal("candidate.load_failed", f"{path} does not exist")
    module = _exec_file(path, name, what)
    cls = getattr(module, "ModelNew", None)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise Fatal("candidate.load_failed", f"{what} defines no class ModelNew(nn.Module)")
    return cls


def reference_layout(task: Any, store: Any, seed: int) -> dict[str, tuple[int, ...]]:
    """The reference Model's state_dict names (in order) and shapes: built on the meta device
    (no memory, no random init), or as the bridge builds it when the meta build fails."""
    import torch

    from .tasks import seed_all

    try:
        seed_all(seed)
        init = task.get_init_inputs()
        with torch.device("meta"):
            model = task.model_cls(*init)
    except Exception:  # e.g. __init__ reads values: the real build reports real errors
        model = store.build(task, seed).model
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def build_runner(plan: Plan, device: Any) -> Runner:
    """ModelNew(*get_init_inputs()) under the task's seeding rule, checked against the reference
    Model's state_dict names (strict) and cast like the reference."""
    import torch

    from .errors import BridgeError, exception_text
    from .tasks import TaskStore, call_task, seed_all

    store = TaskStore(torch.device("cpu"))
    try:
        task = store.load(plan.candidate.task_dir)
        reference = reference_layout(task, store, plan.candidate.init_seed)
    except BridgeError as exc:
        raise Fatal("worker.bad_plan", f"task {plan.candidate.task_dir}: {exc.message}") from exc
    names = list(reference)
    shapes = reference
    cls = load_model_class(plan.candidate)
    seed_all(plan.candidate.init_seed)
    try:
        init = call_task(task, "task.init_raised", "get_init_inputs()", task.get_init_inputs)
        if not isinstance(init, (list, tuple)):
            raise Fatal("candidate.init_failed", "get_init_inputs() must return a list")
        model = cls(*init)
        model.to(device)
        if task.cast_dtype is not None:
            model.to(task.cast_dtype)
    except BridgeError as exc:
        raise Fatal("candidate.init_failed", exc.message) from exc
    except Fatal:
        raise
    except (Exception, SystemExit) as exc:
        raise Fatal("candidate.init_failed",
                    f"ModelNew(*get_init_inputs()) raised {exception_text(exc)}") from exc
    model.eval()
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    missing = [k for k in names if k not in ours]
    unexpected = [k for k in ours if k not in shapes]
    reshaped = [k for k in names if k in ours and ours[k] != shapes[k]]
    if missing or unexpected or reshaped:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:8])}")
        if unexpected:
            parts.append(f"unexpected {', '.join(unexpected[:8])}")
        if reshaped:
            parts.append("shape differs for " + ", ".join(
                f"{k} ({list(ours[k])} vs {list(shapes[k])})" for k in reshaped[:8]))
        raise Fatal("candidate.params_mismatch",
                    "ModelNew's state_dict must have the reference Model's names and shapes "
                    f"(load_state_dict strict): {'; '.join(parts)}")
    scalar = [str(a.get("device")) == "cpu" if isinstance(a, dict) else False
              for a in plan.spec["args"]]
    return Runner(model, names, device, scalar)


# ---- device data ---------------------------------------------------------------------------------

class DeviceData:
    """The runner's side of device data: every set made from its seeds on the device exactly as
    the bridge makes it (same code, same device, same seeds), outputs copied into the bridge's
    slots. No tensor goes through a file."""

    def __init__(self, plan: Plan, device: Any) -> None:
        from .errors import BridgeError
        from .slots import Slot, SlotError, layout
        from .tasks import TaskStore

        assert plan.data is not None
        d = plan.data
        self.device = device
        self.store = TaskStore(device)
        try:
            self.task = self.store.load(plan.candidate.task_dir)
        except BridgeError as exc:
            raise Fatal("worker.bad_plan", f"task {plan.candidate.task_dir}: {exc.message}") from exc
        self.outputs: list[dict[str, Any]] = list(plan.spec["outputs"])
        try:
            self.offsets, size = layout(self.outputs)
        except (KeyError, TypeError, ValueError) as exc:
            raise Fatal("worker.bad_plan", f"plan: spec.outputs: {exc}") from exc
        if size > d.slot_bytes:
            raise Fatal("worker.bad_plan", f"plan: the outputs need {size} bytes per slot; "
                        f"data.slot_bytes is {d.slot_bytes}")
        self.slots = []
        for i in range(d.slots):
            try:
                self.slots.append(Slot.attach(d.kind, d.first_fd + i, d.slot_bytes,
                                              device.index or 0))
            except SlotError as exc:
                raise Fatal("worker.bad_input", f"cannot map output slot {i}: {exc.message}") \
                    from exc

    def params(self, model_seed: int) -> list[Any]:
        """The reference Model's initial state under model_seed, in state_dict order."""
        from .errors import BridgeError

        try:
            return list(self.store.build(self.task, model_seed).initial_state.values())
        except BridgeError as exc:
            raise Fatal("worker.bad_input", f"making the params: {exc.message}") from exc

    def inputs(self, seed: int, near_seed: int | None = None) -> list[object]:
        """forward()'s arguments for a seed (or a near-duplicate of near_seed's set)."""
        from .errors import BridgeError
        from .tasks import near_duplicate

        try:
            made = self.store.inputs(self.task, seed if near_seed is None else near_seed,
                                     files=False)
        except BridgeError as exc:
            raise Fatal("worker.bad_input", f"making the inputs: {exc.message}") from exc
        return (made if near_seed is None else near_duplicate(made, seed)).call

    def store_outputs(self, slot: int, outputs: list[Any], what: str, code: str) -> None:
        """Copies the outputs into a slot (the bridge compares them there); a count, dtype or
        shape that differs from the spec is CallFailure(code)."""
        import torch

        from .tasks import dtype_from_name, dtype_name

        if len(outputs) != len(self.outputs):
            raise CallFailure(code, f"ModelNew.forward() returned {len(outputs)} tensors; the "
                              f"reference returns {len(self.outputs)} ({what})")
        for i, (o, spec, at) in enumerate(zip(outputs, self.outputs, self.offsets, strict=True)):
            dtype, shape = dtype_from_name(str(spec["dtype"])), [int(n) for n in spec["shape"]]
            if o.dtype != dtype or list(o.shape) != shape:
                raise CallFailure(code, f"output {i} ({spec.get('name', i)}): dtype or shape "
                                  f"differs from the reference (got {dtype_name(o.dtype)} "
                                  f"{list(o.shape)}, expected {spec['dtype']} {shape}) ({what})")
            self.slots[slot].view(at, dtype, shape).copy_(o.detach())
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


# ---- trials -------------------------------------------------------------------------------------

def _bits(t: Any) -> Any:
    import torch

    return t.detach().reshape(-1).contiguous().view(torch.uint8).clone()


def _load(path: str, prefix: str) -> list[Any]:
    from .files import load_tensors

    try:
        return load_tensors(path, prefix)
    except Exception as exc:  # safetensors raises several types for unreadable files
        raise Fatal("worker.bad_input", f"cannot read {prefix} from {path}: {exc}") from exc


def _device_args(r: Runner, files: list[Any]) -> list[object]:
    """The call's arguments: tensors on the device, 0-d CPU scalars (per the spec) as numbers."""
    args: list[object] = []
    for i, f in enumerate(files):
        scalar = i < len(r.scalar_args) and r.scalar_args[i] and f.dim() == 0
        args.append(f.item() if scalar else f.to(r.device))
    return args


def _call_failure(exc: BaseException, guard: Any, r: Runner, what: str) -> CallFailure:
    from .errors import exception_text
    from .refusal import refused_in

    op = guard.refused or refused_in(exc)
    if op:
        return CallFailure("hack.torch_compute", f"ModelNew.forward() called {op} ({what}); "
                           "torch compute is refused while the candidate runs")
    fault = cuda_fault(str(exc)) if r.device.type == "cuda" else None
    return CallFailure(fault or "abi.forward_failed",
                       f"ModelNew.forward() raised {exception_text(exc)} ({what})",
                       fatal=fault is not None)


def run_trial(r: Runner, t: Trial, what: str) -> None:
    """One verification call; raises CallFailure for a per-call failure, Fatal otherwise."""
    import torch

    from .errors import BridgeError, exception_text
    from .files import save_tensors
    from .refusal import Refusal
    from .tasks import flatten_outputs

    if r.data is None:
        params = _load(str(t.params), "params")
        args = _device_args(r, _load(str(t.inputs), "args"))
    else:
        params, args = r.data.params(t.model_seed), r.data.inputs(t.seed)
    if len(params) != len(r.names):
        raise Fatal("worker.bad_input", f"{t.params} holds {len(params)} params; the reference "
                    f"state_dict has {len(r.names)}")
    try:
        r.model.load_state_dict({n: p for n, p in zip(r.names, params, strict=True)},
                                strict=True)
    except Exception as exc:
        raise Fatal("worker.bad_input", f"loading {t.params or 'the params'} into ModelNew "
                    f"raised {exception_text(exc)}") from exc
    tensors = [(i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    before = [_bits(a) for _, a in tensors]
    state = r.model.state_dict()
    before_params = [_bits(state[n]) for n in r.names]
    guard = Refusal()
    out: object = None
    with torch.no_grad():
        try:
            with guard:
                out = r.model(*args)
            if r.device.type == "cuda":
                torch.cuda.synchronize(r.device)
        except (Exception, SystemExit) as exc:
            raise _call_failure(exc, guard, r, what) from exc
    if guard.refused:
        raise CallFailure("hack.torch_compute",
                          f"ModelNew.forward() called {guard.refused} ({what}) and caught the "
                          "refusal; torch compute is refused while the candidate runs")
    for k, (i, a) in enumerate(tensors):
        if not torch.equal(_bits(a), before[k]):
            raise CallFailure("verify.input_modified",
                              f"ModelNew.forward() modified input args.{i} ({what}); inputs are "
                              "read-only (write results only into new output tensors)")
    state = r.model.state_dict()
    for k, n in enumerate(r.names):
        if not torch.equal(_bits(state[n]), before_params[k]):
            raise CallFailure("verify.params_modified",
                              f"ModelNew.forward() modified parameter params.{k} ({n}) ({what}); "
                              "parameters are read-only")
    try:
        outputs = flatten_outputs(out)
    except BridgeError as exc:
        raise CallFailure("abi.forward_failed", exc.message.replace(
            "forward()", "ModelNew.forward()") + f" ({what})") from exc
    if r.data is not None:
        r.data.store_outputs(t.slot, outputs, what, "verify.mismatch")
        return
    try:
        save_tensors(str(t.outputs), "outputs", outputs, {"kind": "candidate"})
    except OSError as exc:
        raise Fatal("worker.bad_input", f"cannot write {t.outputs}: {exc}") from exc


# ---- timing -------------------------------------------------------------------------------------

def _poison(outputs: list[Any], inputs: list[Any]) -> None:
    """Fills returned outputs with 0xFF bytes (NaN for floats) once they are used, so that a
    later call served the same memory by the caching allocator finds garbage, not the last
    answer. Outputs that share storage with an input are left alone."""
    import torch

    held = {a.untyped_storage().data_ptr() for a in inputs if isinstance(a, torch.Tensor)}
    for o in outputs:
        if o.is_contiguous() and o.untyped_storage().data_ptr() not in held:
            o.detach().view(-1).view(torch.uint8).fill_(255)


def _place(slot: list[object], fresh: list[object]) -> None:
    """Copies a fresh set's values into a rotation slot's buffers (tensors) or takes its
    scalars: a checked call looks like any other call to the candidate."""
    import torch

    for i, v in enumerate(fresh):
        cur = slot[i]
        if isinstance(cur, torch.Tensor) and isinstance(v, torch.Tensor):
            cur.copy_(v)
        else:
            slot[i] = v


def time_candidate(r: Runner, t: TimingPlan) -> dict[str, Any]:
    """The shared timing protocol over the rotation sets, with checked calls at seed-chosen
    indices among the first min_samples and a final checked call (docs/protocol.md): the same
    events as the native worker's ``timing``. Raises CallFailure/Fatal like run_trial."""
    import random
    import statistics

    import torch

    from .files import save_tensors
    from .refusal import Refusal
    from .tasks import flatten_outputs
    from .timing import Clock, Protocol, _Stats, median_rse

    t_start = time.monotonic()
    try:
        proto = Protocol.from_json(t.protocol)
    except ValueError as exc:
        raise Fatal("worker.bad_plan", f"plan: timing.protocol: {exc}") from exc
    if len(t.checks) > proto.min_samples:
        raise Fatal("worker.bad_plan", "plan: more checked calls than min_samples")
    data = r.data
    params = data.params(t.model_seed) if data else _load(str(t.params), "params")
    try:
        r.model.load_state_dict(dict(zip(r.names, params, strict=True)), strict=True)
    except Exception as exc:
        raise Fatal("worker.bad_input", f"loading {t.params or 'the params'} into ModelNew "
                    f"failed: {exc}") from exc

    def make(c: Checked) -> list[object]:
        return data.inputs(c.seed, c.near_seed) if data else \
            _device_args(r, _load(str(c.inputs), "args"))

    slots = [make(c) for c in t.rotation]
    # Checked and final sets: files are read ahead; device sets are made when needed (outside
    # the timed region), so that a task with gigabyte tensors holds one at a time.
    checked_sets = [*t.checks, t.final]
    ahead = None if data else [make(c) for c in checked_sets]

    def fresh(i: int) -> list[object]:
        return ahead[i] if ahead is not None else make(checked_sets[i])

    checks = t.checks
    rng = random.Random(t.seed)
    check_at = sorted(rng.sample(range(proto.min_samples), len(checks)))
    clock = Clock(r.device)
    flush_bytes = clock.flush_bytes(proto.l2_flush_factor)
    floats = [[a for a in s if isinstance(a, torch.Tensor) and a.is_floating_point()]
              for s in slots]
    overhead, event_overhead = clock.calibrate()
    guard = Refusal()
    guard.active = False
    last: list[Any] = []
    turn = 0

    def prepare(slot: int, fresh: list[object] | None) -> None:
        _poison(last, slots[slot])
        last.clear()
        if fresh is not None:
            _place(slots[slot], fresh)
        elif proto.perturb_scale > 0:
            u = 0.0
            while u == 0.0:
                u = rng.uniform(-1.0, 1.0)
            for x in floats[slot]:
                x.mul_(1.0 + proto.perturb_scale * u)
        clock.flush(flush_bytes)
        clock.sync()

    def timed(slot: int, what: str) -> tuple[float, float]:
        box: list[object] = []

        def call() -> None:
            guard.active = True
            try:
                box.append(r.model(*slots[slot]))
            finally:
                guard.active = False

        try:
            ev_raw, host_raw = clock.measure(call)
        except (Exception, SystemExit) as exc:
            guard.active = False
            raise _call_failure(exc, guard, r, what) from exc
        if guard.refused:
            raise CallFailure("hack.torch_compute",
                              f"ModelNew.forward() called {guard.refused} ({what}) and caught "
                              "the refusal; torch compute is refused while the candidate runs")
        try:
            last.extend(flatten_outputs(box[0]))
        except Exception as exc:
            raise CallFailure("abi.forward_failed",
                              f"ModelNew.forward() returned no tensors ({what}): {exc}") from exc
        ev = 0.0 if ev_raw is None else max(0.0, ev_raw - event_overhead)
        return ev, max(0.0, host_raw - overhead)

    def save(c: Checked, what: str) -> None:
        if data is not None:
            data.store_outputs(c.slot, last, what, "hack.inconsistent_output")
            return
        try:
            save_tensors(str(c.outputs), "outputs", last, {"kind": "candidate"})
        except OSError as exc:
            raise Fatal("worker.bad_input", f"cannot write {c.outputs}: {exc}") from exc

    samples: list[float] = []
    events: list[float] = []
    hosts: list[float] = []
    stats = _Stats()
    warmup_calls = 0
    stop_reason = "converged"
    with torch.no_grad(), guard:
        w0 = time.perf_counter()
        while warmup_calls < proto.warmup_min_calls or \
                (time.perf_counter() - w0) * 1e3 < proto.warmup_min_ms:
            slot = turn % len(slots)
            turn += 1
            prepare(slot, None)
            timed(slot, f"warm-up call {warmup_calls + 1}")
            warmup_calls += 1
        warmup_ms = (time.perf_counter() - w0) * 1e3
        loop0 = time.perf_counter()
        done = 0
        while True:
            i = len(samples)
            slot = turn % len(slots)
            turn += 1
            is_check = done < len(checks) and check_at[done] == i
            what = f"timed call {i + 1}" + (f", checked call {done + 1}" if is_check else "")
            prepare(slot, fresh(done) if is_check else None)
            ev, host = timed(slot, what)
            sample = max(ev, host)
            samples.append(sample)
            hosts.append(host)
            events.append(ev)
            stats.add(sample)
            if is_check:
                save(t.checks[done], what)
                done += 1
            n = len(samples)
            pending = done < len(checks)
            if n >= proto.min_samples and not pending and stats.rse() < proto.target_rse:
                break
            if not pending and n >= proto.max_samples:
                stop_reason = "max_samples"
                break
            if not pending and n >= proto.min_samples and \
                    time.perf_counter() - loop0 >= proto.budget_s:
                stop_reason = "budget"
                break
        loop_s = time.perf_counter() - loop0
        prepare(0, fresh(len(checks)))
        ev, host = timed(0, "final call")
        final_ms = max(ev, host)
        save(t.final, "final call")
        _poison(last, slots[0])
    rse = median_rse(samples)
    return {
        "ok": True, "method": "cuda_event+host" if clock.is_cuda else "host",
        "median_ms": statistics.median(samples),
        "event_median_ms": statistics.median(events) if clock.is_cuda else None,
        "host_median_ms": statistics.median(hosts), "overhead_ms": overhead,
        "event_overhead_ms": event_overhead if clock.is_cuda else None,
        "rse": rse if rse != float("inf") else None, "samples": len(samples),
        "samples_ms": samples, "warmup_calls": warmup_calls, "warmup_ms": warmup_ms,
        "budget_exhausted": stop_reason != "converged", "stop_reason": stop_reason,
        "l2_flush_bytes": flush_bytes, "checks": len(checks), "checks_done": done,
        "final_done": True, "final_ms": final_ms, "loop_seconds": loop_s,
        "sm_clock_mhz_before": None, "sm_clock_mhz_after": None,
        "refusal": "on for every call (verification, warm-up, timed, checked)",
        "seconds": time.monotonic() - t_start,
    }


# ---- the run ------------------------------------------------------------------------------------

def read_gate(gate: BinaryIO) -> bool:
    line = b""
    while len(line) < GATE_LINE_MAX:
        ch = gate.read(1)
        if not ch or ch == b"\n":
            break
        line += ch
    return line.rstrip(b"\r") == b"continue"


def run(plan_path: str, gate: BinaryIO, ev: Events) -> int:
    plan = load_plan(plan_path)
    device, info = open_device(plan)
    ev.emit("device", info)
    runner = build_runner(plan, device)
    if plan.data is not None:
        runner.data = DeviceData(plan, device)
    ev.emit("loaded", {"has_setup": False, "has_teardown": False,
                       "format": plan.candidate.format})
    failed = False
    trials = 0
    for k, t in enumerate(plan.verify):
        t0 = time.monotonic()
        trials = k + 1
        try:
            run_trial(runner, t, f"verification trial {k + 1} of {len(plan.verify)}")
        except CallFailure as exc:
            ev.emit("verify", {"trial": k, "ok": False, "seconds": time.monotonic() - t0,
                               "code": exc.code, "message": _cap(exc.message)})
            if exc.fatal:
                raise Fatal(exc.code, exc.message) from exc
            failed = True
            break
        ev.emit("verify", {"trial": k, "ok": True, "seconds": time.monotonic() - t0})
    if plan.gate_after_verify:
        ev.emit("verified", {"trials": trials, "ok": not failed})
        go = read_gate(gate)
    else:
        go = not failed
    if go and plan.timing is not None:
        t0 = time.monotonic()
        try:
            ev.emit("timing", time_candidate(runner, plan.timing))
        except CallFailure as exc:
            ev.emit("timing", {"ok": False, "code": exc.code, "message": _cap(exc.message),
                               "samples": 0, "warmup_calls": 0, "checks_done": 0,
                               "seconds": time.monotonic() - t0})
            if exc.fatal:
                raise Fatal(exc.code, exc.message) from exc
    if go and not failed and plan.timing is None and plan.has_profile:
        ev.emit("profile", {"ok": False, "code": "worker.unsupported", "kernels": [],
                            "total_ns": 0, "seconds": 0.0,
                            "message": "profiling PyTorch-format candidates is not implemented "
                                       "yet"})
    ev.emit("done", {})
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    sys.dont_write_bytecode = True  # candidate code is imported from read-only places
    gate, events = _take_stdio()
    ev = Events(events)
    usage = ("usage: python -m cuda_agent_bridge.candidate PLAN.json\n"
             "       python -m cuda_agent_bridge.candidate --record CANDIDATE.py SPECS.json")
    record = len(args) == 3 and args[0] == "--record"
    if not record and (len(args) != 1 or args[0] in ("-h", "--help")):
        print(usage, file=sys.stderr)
        if len(args) == 1:
            return 0
        ev.error("worker.bad_plan", usage.replace("\n", " "))
        return 1
    try:
        if record:
            record_inline(args[1], args[2])
            ev.emit("done", {})
            return 0
        return run(args[0], gate, ev)
    except Fatal as exc:
        ev.error(exc.code, exc.message)
        return 1
    except Exception as exc:  # a bug here, not the candidate's: say so plainly
        from .errors import exception_text

        ev.error("worker.internal", f"candidate runner failed: {exception_text(exc)}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
