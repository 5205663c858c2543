"""Tasks: loading model.py, seeding, building models and inputs, running and checking forward().

Contract:
- A task directory holds ``model.py`` (KernelBench convention: ``class Model(nn.Module)``,
  ``get_inputs()``, ``get_init_inputs()``) and an optional ``task.json`` whose ``precision`` is
  ``fp32`` (default), ``fp16`` or ``bf16``.
- ``TaskStore.load`` executes model.py as a fresh module (unique name) per (directory, sha256 of
  the bytes); ``TaskStore.build`` seeds with ``torch.manual_seed(model_seed)`` and builds
  ``Model(*get_init_inputs())`` on the CPU, then moves and casts it and puts it in the module
  mode asked for (``MODULE_MODES``: the mode is part of the model cache's key, so a bridge that
  serves both rules never hands one mode's model to the other); ``TaskStore.inputs`` seeds with
  ``torch.manual_seed(seed)``, calls ``get_inputs()`` and converts the result (CPU copies for the
  files, device copies for forward(), Python numbers kept as numbers). Modules and models are
  cached (LRU).
- Every task failure is raised as ``BridgeError`` with a ``task.*`` code and one line saying what
  to fix. Task code runs with stdout already redirected to stderr by ``__main__``.
"""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import os
import random
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from .degenerate import Degeneracy, Judge, perturb_parameters
from .errors import BridgeError, article, exception_text, task_line
from .structure import STRUCTURE_SEEDS, Structure, detect, mix, probe
from .vary import Plan, vary

try:
    import numpy as _np
except ImportError:  # numpy is optional; seed it when present
    _np = None  # type: ignore[assignment]

MODEL_FILE = "model.py"
TASK_FILE = "task.json"
PRECISIONS: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
}
# The dtypes src/tensor/dtype.h knows.
SUPPORTED_DTYPES = frozenset(
    {
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
        torch.int16, torch.int8, torch.uint8, torch.bool,
    }
)
MAX_MODULES = 32
MAX_MODELS = 4
DETERMINISM_TOL = 1e-6
DEFAULT_TOLERANCE = 1e-2  # atol and rtol when task.json names none (src/task/task.c)
# The model seed of the degeneracy check (fixed: every process that asks finds the same).
DEGENERACY_MODEL_SEED = 0x5EEDDE6E
# The mode Model (and the runner's ModelNew) runs in (docs/torch-rules.md, "Module mode"):
# "eval" under the cuda-agent rules, as the published CUDA-Agent verification builds both models
# (BatchNorm on its running statistics, dropout off); "train" under kernelbench, whose harness
# never calls eval() (batch statistics, dropout active). The supervisor names it in every request
# that builds Model; without it, the default rules' mode.
MODULE_MODES = ("eval", "train")
DEFAULT_MODULE_MODE = "eval"


@dataclass
class Task:
    """A loaded task: its module's entry points and its precision."""

    task_dir: str
    model_path: str
    digest: str
    precision: str
    model_cls: type[nn.Module]
    get_inputs: Callable[[], object]
    get_init_inputs: Callable[[], object]

    @property
    def cast_dtype(self) -> torch.dtype | None:
        """The dtype floating tensors are cast to, or None for fp32 (no cast)."""
        return None if self.precision == "fp32" else PRECISIONS[self.precision]


@dataclass
class Built:
    """A model built under a seed in a module mode, its state right after construction, and its
    compiled form."""

    model: nn.Module
    initial_state: dict[str, torch.Tensor]
    mode: str = DEFAULT_MODULE_MODE
    compiled: Callable[..., object] | None = None
    compile_seconds: float = 0.0
    compile_error: str | None = None  # set when torch.compile failed (not retried)

    def reset(self) -> None:
        """Restores the state right after construction (forward() may update buffers) and the
        module mode (the task's forward() may switch it)."""
        self.model.load_state_dict(self.initial_state)
        self.model.train(self.mode == "train")


@dataclass
class Inputs:
    """One input set: what the inputs file holds and what forward() receives."""

    files: list[torch.Tensor]  # CPU, contiguous, cast; Python numbers as 0-d tensors
    call: list[object]  # tensors on the device; Python numbers as given
    scalar: list[bool] = field(default_factory=list)  # True where the argument is a number

    def fresh_call(self) -> list[object]:
        """Copies of the forward() arguments (so an in-place forward cannot alter this set)."""
        return [a.clone() if isinstance(a, torch.Tensor) else a for a in self.call]


def dtype_name(dtype: torch.dtype) -> str:
    """torch.float32 -> 'float32' (the names src/tensor/dtype.h parses)."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """'float32' -> torch.float32, for the supported dtypes; ValueError otherwise."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype) or dtype not in SUPPORTED_DTYPES:
        raise ValueError(f"unsupported dtype {name!r}")
    return dtype


def seed_all(seed: int) -> None:
    """torch.manual_seed(seed) (the protocol's rule), plus Python's and numpy's generators."""
    torch.manual_seed(seed)
    random.seed(seed)
    if _np is not None:
        _np.random.seed(seed % 2**32)


def disable_tf32() -> None:
    """TF32 off for matmul and cuDNN: references are exact fp32, baselines are honest fp32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


@contextmanager
def reference_numerics() -> Iterator[None]:
    """Settings for describe/reference: TF32 off, cuDNN autotuning off, deterministic cuDNN."""
    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
    disable_tf32()
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = saved


def restore_torch_defaults() -> None:
    """Undoes global changes task code may have made (default dtype/device, TF32)."""
    if torch.get_default_dtype() != torch.float32:
        torch.set_default_dtype(torch.float32)
    get_default_device = getattr(torch, "get_default_device", None)
    if get_default_device is not None and get_default_device().type != "cpu":
        torch.set_default_device("cpu")
    disable_tf32()


def call_task(task: Task, code: str, what: str, fn: Callable[..., object], *args: object) -> object:
    """Calls task code; an exception becomes BridgeError(code, 'model.py line N: <what> raised')."""
    try:
        return fn(*args)
    except BridgeError:
        raise
    except (Exception, SystemExit) as exc:
        line = task_line(exc, task.model_path)
        where = f"{MODEL_FILE} line {line}: " if line else ""
        raise BridgeError(code, f"{where}{what} raised {exception_text(exc)}") from exc


def _task_json(task_dir: str) -> dict[str, object]:
    """task.json as an object ({} when the file is absent)."""
    path = os.path.join(task_dir, TASK_FILE)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f)
    except json.JSONDecodeError as exc:
        raise BridgeError(
            "task.syntax_error", f"{TASK_FILE} line {exc.lineno}: invalid JSON ({exc.msg})"
        ) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise BridgeError("task.missing_file", f"cannot read {path}: {exc}") from exc
    if not isinstance(obj, dict):
        raise BridgeError("task.syntax_error", f"{TASK_FILE} must hold a JSON object")
    return obj


def read_precision(task_dir: str) -> str:
    """The precision from task.json ('fp32' when the file or the key is absent)."""
    precision = _task_json(task_dir).get("precision") or "fp32"
    if precision not in PRECISIONS:
        raise BridgeError(
            "task.syntax_error",
            f"{TASK_FILE}: precision must be one of fp32, fp16, bf16 (got {precision!r})",
        )
    return str(precision)


def read_tolerance(task_dir: str) -> tuple[float, float]:
    """(atol, rtol) from task.json, each DEFAULT_TOLERANCE when absent (src/task/task.c)."""
    obj = _task_json(task_dir)
    out = []
    for key in ("atol", "rtol"):
        v = obj.get(key, DEFAULT_TOLERANCE)
        out.append(float(v) if isinstance(v, (int, float)) and not isinstance(v, bool)
                   and v >= 0 else DEFAULT_TOLERANCE)
    return out[0], out[1]


def flatten_outputs(value: object, where: str = "") -> list[torch.Tensor]:
    """A tensor, or nested tuples/lists of tensors, flattened depth-first."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        out: list[torch.Tensor] = []
        for i, item in enumerate(value):
            out.extend(flatten_outputs(item, f"{where}[{i}]"))
        if not where and not out:
            raise BridgeError(
                "task.bad_output",
                "forward() returned no tensors; it must return a tensor or a tuple/list of tensors",
            )
        return out
    what = f"forward() output {where} is" if where else "forward() returned"
    kind = "None" if value is None else article(type(value).__name__)
    subject = "forward()" if where else "it"
    raise BridgeError(
        "task.bad_output",
        f"{what} {kind}; {subject} must return a tensor or a tuple/list of tensors",
    )


def output_name(index: int, count: int) -> str:
    """'output' for a single output, else 'output.<i>'."""
    return "output" if count == 1 else f"output.{index}"


def forward(task: Task, fn: Callable[..., object], args: Sequence[object]) -> list[torch.Tensor]:
    """Runs fn(*args) and returns the flattened, dtype-checked outputs."""
    outputs = flatten_outputs(call_task(task, "task.forward_raised", "forward()", fn, *args))
    for i, t in enumerate(outputs):
        if t.dtype not in SUPPORTED_DTYPES:
            raise BridgeError(
                "task.bad_output",
                f"forward() {output_name(i, len(outputs))} has dtype {dtype_name(t.dtype)}; "
                f"supported: {', '.join(sorted(dtype_name(d) for d in SUPPORTED_DTYPES))}",
            )
    return outputs


def check_deterministic(first: Sequence[torch.Tensor], second: Sequence[torch.Tensor]) -> None:
    """Raises task.nondeterministic unless both runs are bitwise equal or allclose(1e-6)."""
    hint = "remove randomness (dropout in training mode, torch.rand* in forward()) or racy ops"
    if len(first) != len(second):
        raise BridgeError(
            "task.nondeterministic",
            f"forward() returned {len(first)} then {len(second)} tensors on the same inputs; "
            + hint,
        )
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        name = output_name(i, len(first))
        if a.shape != b.shape or a.dtype != b.dtype:
            raise BridgeError(
                "task.nondeterministic",
                f"forward() {name} changed shape or dtype between two calls on the same inputs",
            )
        if torch.equal(a, b):
            continue
        if a.is_floating_point() and torch.allclose(
            a, b, rtol=DETERMINISM_TOL, atol=DETERMINISM_TOL, equal_nan=True
        ):
            continue
        diff = (a.double() - b.double()).abs().nan_to_num(nan=float("inf")).max().item()
        raise BridgeError(
            "task.nondeterministic",
            f"forward() {name} differs between two calls on the same inputs "
            f"(max abs diff {diff:.3g}); {hint}",
        )


def arg_names(model: nn.Module, count: int) -> list[str]:
    """Names of forward()'s positional parameters ('x', 'args.0' for *args, else 'arg<i>')."""
    names: list[str] = []
    var: str | None = None
    try:
        params = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        params = []  # type: ignore[assignment]
    for p in params:
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
        elif p.kind == p.VAR_POSITIONAL:
            var = p.name
            break
    return [
        names[i] if i < len(names) else f"{var}.{i - len(names)}" if var else f"arg{i}"
        for i in range(count)
    ]


def _syntax_message(exc: SyntaxError) -> str:
    detail = "" if exc.msg == "invalid syntax" else f" ({exc.msg})"
    return f"{MODEL_FILE} line {exc.lineno}: invalid syntax{detail}"


class TaskStore:
    """Loads tasks and builds models and inputs on one device, caching modules and models."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._modules: OrderedDict[tuple[str, str], types.ModuleType] = OrderedDict()
        self._models: OrderedDict[tuple[str, int, str, str, bool, str], Built] = OrderedDict()
        self._surveys: OrderedDict[
            tuple[str, str, str], tuple[list[Structure | None], Degeneracy | None]] = OrderedDict()
        self._counter = itertools.count()

    def load(self, task_dir: str) -> Task:
        """Reads task_dir/model.py (and task.json) and returns its checked entry points."""
        directory = os.path.abspath(task_dir)
        path = os.path.join(directory, MODEL_FILE)
        if not os.path.isdir(directory):
            raise BridgeError("task.missing_file", f"task directory {task_dir} does not exist")
        try:
            with open(path, "rb") as f:
                source = f.read()
        except FileNotFoundError as exc:
            raise BridgeError("task.missing_file", f"{task_dir} has no {MODEL_FILE}") from exc
        except OSError as exc:
            raise BridgeError("task.missing_file", f"cannot read {path}: {exc.strerror}") from exc
        precision = read_precision(directory)
        digest = hashlib.sha256(source).hexdigest()
        key = (directory, digest)
        module = self._modules.get(key)
        if module is None:
            module = self._execute(path, source, digest)
            self._modules[key] = module
            if len(self._modules) > MAX_MODULES:
                _, old = self._modules.popitem(last=False)
                sys.modules.pop(old.__name__, None)
        self._modules.move_to_end(key)
        return self._entry_points(directory, path, digest, precision, module)

    def _execute(self, path: str, source: bytes, digest: str) -> types.ModuleType:
        try:
            code = compile(source, path, "exec", dont_inherit=True)
        except SyntaxError as exc:
            raise BridgeError("task.syntax_error", _syntax_message(exc)) from exc
        except ValueError as exc:  # e.g. null bytes
            raise BridgeError("task.syntax_error", f"{MODEL_FILE}: {exc}") from exc
        name = f"cuda_agent_task_{digest[:16]}_{next(self._counter)}"
        module = types.ModuleType(name)
        module.__file__ = path
        sys.modules[name] = module  # dataclasses and pickling look modules up by name
        try:
            exec(code, module.__dict__)
        except (Exception, SystemExit) as exc:
            sys.modules.pop(name, None)
            line = task_line(exc, path)
            where = f"{MODEL_FILE} line {line}" if line else MODEL_FILE
            if isinstance(exc, ImportError):
                raise BridgeError("task.import_error", f"{where}: {exception_text(exc)}") from exc
            raise BridgeError(
                "task.import_error", f"{where}: importing raised {exception_text(exc)}"
            ) from exc
        return module

    @staticmethod
    def _entry_points(
        directory: str, path: str, digest: str, precision: str, module: types.ModuleType
    ) -> Task:
        model_cls = getattr(module, "Model", None)
        if model_cls is None:
            raise BridgeError("task.no_model", f"{MODEL_FILE} defines no class Model")
        if not (isinstance(model_cls, type) and issubclass(model_cls, nn.Module)):
            raise BridgeError(
                "task.no_model", f"{MODEL_FILE}: Model must be a subclass of torch.nn.Module"
            )
        get_inputs = getattr(module, "get_inputs", None)
        if not callable(get_inputs):
            raise BridgeError(
                "task.no_get_inputs", f"{MODEL_FILE} defines no function get_inputs()"
            )
        get_init_inputs = getattr(module, "get_init_inputs", None)
        if not callable(get_init_inputs):
            raise BridgeError(
                "task.no_get_init_inputs", f"{MODEL_FILE} defines no function get_init_inputs()"
            )
        return Task(directory, path, digest, precision, model_cls, get_inputs, get_init_inputs)

    def build(self, task: Task, model_seed: int, perturb: bool | None = None,
              mode: str = DEFAULT_MODULE_MODE) -> Built:
        """Model(*get_init_inputs()) under torch.manual_seed(model_seed), on the device, cast,
        in module ``mode`` (``MODULE_MODES``); its parameters perturbed
        (degenerate.perturb_parameters under model_seed) when ``perturb``, which by default is
        what the task needs in that mode (``degeneracy``: a task that is degenerate under its own
        initialization is verified with perturbed parameters)."""
        if mode not in MODULE_MODES:
            raise ValueError(f"module mode must be one of {', '.join(MODULE_MODES)}")
        if perturb is None:
            found = self.degeneracy(task, mode)
            perturb = found is not None and found.params_perturbed
        key = (task.digest, model_seed, str(self.device), task.precision, perturb, mode)
        built = self._models.get(key)
        if built is None:
            built = self._construct(task, model_seed, perturb, mode)
            self._models[key] = built
            if len(self._models) > MAX_MODELS:
                _, old = self._models.popitem(last=False)
                if old.compiled is not None:
                    torch._dynamo.reset()  # drop compiled graphs of evicted models
        self._models.move_to_end(key)
        return built

    def _construct(self, task: Task, model_seed: int, perturb: bool, mode: str) -> Built:
        seed_all(model_seed)
        init = call_task(task, "task.init_raised", "get_init_inputs()", task.get_init_inputs)
        if not isinstance(init, (list, tuple)):
            raise BridgeError(
                "task.init_raised",
                f"get_init_inputs() returned {article(type(init).__name__)}; "
                "it must return a list of Model() arguments",
            )
        model = call_task(
            task, "task.init_raised", "Model(*get_init_inputs())", task.model_cls, *init
        )
        assert isinstance(model, nn.Module)
        try:
            model.to(self.device)
            if task.cast_dtype is not None:
                model.to(task.cast_dtype)
        except Exception as exc:
            raise BridgeError(
                "task.init_raised",
                f"moving Model to {self.device} ({task.precision}) raised {exception_text(exc)}",
            ) from exc
        # MODULE_MODES: eval under the cuda-agent rules, training under kernelbench (the
        # runner puts ModelNew in the same mode: runner/load.py)
        model.train(mode == "train")
        if perturb:
            perturb_parameters(model, model_seed)
        state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        return Built(model, state, mode)

    def structure(self, task: Task, mode: str = DEFAULT_MODULE_MODE) -> list[Structure | None]:
        """What get_inputs() guarantees about each argument (structure.detect over draws under
        fixed seeds: the same for every process that asks, and in either mode); see
        ``_survey`` (the survey of ``mode`` is made when none of the task's is kept)."""
        for m in (mode, *MODULE_MODES):
            found = self._surveys.get((task.task_dir, task.digest, m))
            if found is not None:
                return found[0]
        return self._survey(task, mode)[0]

    def degeneracy(self, task: Task, mode: str = DEFAULT_MODULE_MODE) -> Degeneracy | None:
        """Whether the task's reference outputs in module ``mode`` are degenerate, and whether
        its models are then built with perturbed parameters (``params_perturbed``); see
        ``_survey``. None also when the task cannot run: that is said where it runs (describe,
        check, bench)."""
        try:
            return self._survey(task, mode)[1]
        except BridgeError:
            return None

    def _survey(self, task: Task, mode: str
                ) -> tuple[list[Structure | None], Degeneracy | None]:
        """One pass over the structure draws (STRUCTURE_SEEDS), cached per task version: each
        draw's corners (structure.probe) for ``structure``, and its reference output under its
        own fixed model seed for degenerate.Judge, with the task's tolerance. A degenerate task
        whose model has floating-point parameters is judged again with them perturbed (new
        draws), and is then verified with perturbed parameters. The models run in ``mode`` (a
        BatchNorm's output may be degenerate in one mode only); they are built outside the model
        cache, which must keep the evaluation's (and their compiled forms)."""
        key = (task.task_dir, task.digest, mode)
        if key not in self._surveys:
            atol, rtol = read_tolerance(task.task_dir)
            judge: Judge | None = Judge(atol, rtol)
            probes: list[list[object]] = []
            scalar: list[bool] = []
            has_params = False
            for k, s in enumerate(STRUCTURE_SEEDS):  # one draw at a time: only corners kept
                made = self.inputs(task, s, files=False)
                probes.append([probe(t) for t in made.files])
                scalar = made.scalar
                if judge is not None:
                    try:
                        model = self._construct(task, DEGENERACY_MODEL_SEED + k, False,
                                                mode).model
                        has_params = has_params or any(
                            p.is_floating_point() for p in model.parameters())
                        judge.add(forward(task, model, made.fresh_call()))
                    except BridgeError:
                        judge = None  # a task that cannot run: nothing to say about it
                del made
            found = None if judge is None else judge.result()
            if found is not None and has_params:
                try:
                    after = self._judge_perturbed(task, atol, rtol, mode)
                    found = replace(found, params_perturbed=True,
                                    after=None if after is None else after.kind)
                except BridgeError:
                    pass  # fails only with perturbed parameters: they stay off
            self._surveys[key] = (detect(probes, scalar), found)
            while len(self._surveys) > MAX_MODULES:
                self._surveys.popitem(last=False)
        self._surveys.move_to_end(key)
        return self._surveys[key]

    def _judge_perturbed(self, task: Task, atol: float, rtol: float,
                         mode: str) -> Degeneracy | None:
        """Judge over the draws with each model's parameters perturbed under its own model seed,
        as verification's trials have them: a constant that depends on the parameters is not
        one a kernel can hard-code."""
        judge = Judge(atol, rtol)
        for k, s in enumerate(STRUCTURE_SEEDS):
            model = self._construct(task, DEGENERACY_MODEL_SEED + k, True, mode).model
            made = self.inputs(task, s, files=False)
            judge.add(forward(task, model, made.fresh_call()))
            del made, model
        return judge.result()

    def inputs(self, task: Task, seed: int, files: bool = True) -> Inputs:
        """get_inputs() under torch.manual_seed(seed), with the bridge's device as the default
        device (tensors made by factory functions are born there: generating hundreds of MB of
        random inputs on the CPU costs seconds per set), then cast; tensors get_inputs() puts
        elsewhere are moved. Values depend on the seed and the device type. files=False leaves
        ``files`` empty for tensors (no CPU copies: the set never goes to a file)."""
        seed_all(seed)
        with torch.device(self.device):
            raw = call_task(task, "task.inputs_raised", "get_inputs()", task.get_inputs)
        if not isinstance(raw, (list, tuple)):
            raise BridgeError(
                "task.inputs_raised",
                f"get_inputs() returned {article(type(raw).__name__)}; "
                "it must return a list of forward() arguments",
            )
        result = Inputs([], [])
        for i, value in enumerate(raw):
            if isinstance(value, torch.Tensor):
                t = value.detach().to(self.device)
                if task.cast_dtype is not None and t.is_floating_point():
                    t = t.to(task.cast_dtype)
                t = t.contiguous()
                if t.dtype not in SUPPORTED_DTYPES:
                    raise BridgeError(
                        "task.bad_input",
                        f"get_inputs()[{i}] has dtype {dtype_name(t.dtype)}; supported: "
                        f"{', '.join(sorted(dtype_name(d) for d in SUPPORTED_DTYPES))}",
                    )
                result.files.append(t.to("cpu") if files else t)
                result.call.append(t if t is not value else t.clone())
                result.scalar.append(False)
                continue
            if isinstance(value, bool):
                scalar = torch.tensor(value, dtype=torch.bool)
            elif isinstance(value, int) and -(2**63) <= value < 2**63:
                scalar = torch.tensor(value, dtype=torch.int64)
            elif isinstance(value, float):
                scalar = torch.tensor(value, dtype=torch.float64)
            else:
                raise BridgeError(
                    "task.bad_input",
                    f"get_inputs()[{i}] is {article(type(value).__name__)}; forward() arguments "
                    "must be tensors or Python numbers (int within int64, float, bool)",
                )
            result.files.append(scalar)
            result.call.append(value)
            result.scalar.append(True)
        return result


def near_duplicate(inputs: Inputs, donor: Inputs, seed: int,
                   structure: Sequence[Structure | None]) -> Inputs:
    """The set with a few elements of every floating-point tensor argument replaced by those of
    ``donor`` (another draw of the same task) at the same positions.

    A checked call on such a set defeats caches keyed by sampled input values (a hash of a few
    elements, scalar ratios): the set looks like one the candidate has already seen, but its
    correct output differs in the rows those elements feed. About one element in 4096 (1 to 256
    per tensor) changes; positions come from ``seed`` (a CPU generator). Every new value is one
    ``get_inputs()`` could have put there, and ``structure`` (structure.detect) is kept: mirrored
    positions of symmetric tensors, sorted tensors sorted again, so an honest kernel that relies
    on what its task guarantees (zeros of a triangle, symmetry, order, label values) still
    computes the right output. Integer and boolean tensors and Python numbers are left as they
    are.
    """
    gen = torch.Generator().manual_seed(seed & (2**63 - 1))
    files, call = list(inputs.files), list(inputs.call)
    for i, t in enumerate(files):
        if inputs.scalar[i] or not t.is_floating_point() or t.numel() == 0:
            continue
        other = donor.files[i] if i < len(donor.files) else None
        if not isinstance(other, torch.Tensor) or other.shape != t.shape:
            continue  # shapes vary between draws: no element of this tensor can be matched
        files[i] = mix(t, other, gen, structure[i] if i < len(structure) else None)
        target = call[i]
        if isinstance(target, torch.Tensor):
            call[i] = files[i].to(device=target.device, dtype=target.dtype)
    return Inputs(files=files, call=call, scalar=list(inputs.scalar))


def varied(inputs: Inputs, seed: int, structure: Sequence[Structure | None]) -> tuple[Inputs, Plan]:
    """The set with its floating-point tensor arguments varied by the plan of ``seed``
    (vary.vary: off the generator's distribution, inside what ``structure`` and the tensors
    themselves say the task guarantees), and the plan. Python numbers stay as they are."""
    tensors: list[object] = [None if inputs.scalar[i] else t for i, t in enumerate(inputs.call)]
    out, plan = vary(tensors, seed, structure)
    if plan.plain:
        return inputs, plan
    files, call = list(inputs.files), list(inputs.call)
    for i, t in enumerate(out):
        if inputs.scalar[i] or not isinstance(t, torch.Tensor) or t is inputs.call[i]:
            continue
        call[i] = t
        if i < len(files):
            before = files[i]
            files[i] = t if before.device == t.device else t.to(before.device)
    return Inputs(files=files, call=call, scalar=list(inputs.scalar)), plan
