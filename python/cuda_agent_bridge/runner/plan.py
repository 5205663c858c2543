"""The runner's plan (docs/protocol.md, "The candidate's process: plan, commands, events"),
parsed defensively: it crosses a process boundary.

Contract: ``load_plan(path)`` reads at most MAX_PLAN_BYTES and returns a ``Plan`` or raises
``Fatal("worker.bad_plan", one line)``. Checked: ``version`` 2; ``device``; the spec (args,
params, outputs: supported dtypes, shapes of non-negative integers, Python-number arguments as
0-d ``bool``/``int64``/``float64`` with ``"device": "cpu"``); the slots (kind ``cuda`` or
``cpu``, matching ``candidate.torch_device``; distinct descriptors >= 3; sizes that hold the
spec's layout: params, the tensor arguments, the outputs); the candidate (format
``kernelbench`` with ``path`` and optional ``inline_modules``, or ``workdir`` with ``dir`` and
``extension``; ``task_dir``; ``init_seed``; ``rules``, ``cuda-agent`` or ``kernelbench``;
``module_mode``, ``eval`` or ``train``, by default the rules' own: ``RULES_MODULE_MODE``).
Unknown keys are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..capped import ReadError, read_json
from ..slots import MAX_INPUTS, MAX_SLOT_BYTES, layout
from ..tasks import MODULE_MODES, dtype_from_name
from ..wire import SCALAR_KINDS
from .events import Fatal

MAX_PLAN_BYTES = 1 << 20
MAX_ENTRIES = 4096
MAX_DIMS = 32
MAX_MODULES = 64
MAX_FD = 1 << 16
FORMATS = ("kernelbench", "workdir")
RULES = ("cuda-agent", "kernelbench")  # docs/torch-rules.md, "Rules profiles"
# The mode ModelNew runs in, as the bridge runs Model (tasks.MODULE_MODES): the published
# CUDA-Agent verification puts both models in eval mode; KernelBench's harness never leaves
# training mode. The supervisor names it in the plan (src/eval/spawn.c) from the same rules.
RULES_MODULE_MODE = {"cuda-agent": "eval", "kernelbench": "train"}


@dataclass(frozen=True)
class Entry:
    """A spec entry. ``scalar``: the Python type of a number argument (None for tensors)."""

    index: int
    name: str
    dtype: str
    shape: tuple[int, ...]
    scalar: type | None = None

    def layout_entry(self) -> dict[str, object]:
        return {"dtype": self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class Spec:
    args: list[Entry]
    params: list[Entry]
    outputs: list[Entry]

    @property
    def tensor_args(self) -> list[Entry]:
        return [a for a in self.args if a.scalar is None]

    @property
    def scalar_kinds(self) -> dict[int, type]:
        return {a.index: a.scalar for a in self.args if a.scalar is not None}


@dataclass(frozen=True)
class SlotRef:
    fd: int
    nbytes: int


@dataclass(frozen=True)
class Slots:
    kind: str
    params: SlotRef
    inputs: list[SlotRef]
    outputs: SlotRef


@dataclass(frozen=True)
class Candidate:
    format: str
    path: str  # the .py file (kernelbench) or the directory (workdir)
    task_dir: str
    extension: str | None = None  # workdir: the prebuilt cuda_extension shared object
    # kernelbench: spec key (torch_build.spec_key) -> built module; load_inline is served from
    # here, and a call whose spec is not in it fails (nothing is compiled in this process)
    inline_modules: dict[str, str] = field(default_factory=dict)
    init_seed: int = 0
    torch_device: str = "cuda"
    # cuda-agent: torch compute refused in forward(), parameters matched by name;
    # kernelbench: torch compute allowed, parameters matched by name or by order and shape,
    # else ModelNew keeps those of its construction under init_seed (load.pairing)
    rules: str = "cuda-agent"
    # "eval" or "train": the mode ModelNew is put in at load (the reference's, in the bridge)
    module_mode: str = "eval"


@dataclass(frozen=True)
class Plan:
    device: int
    spec: Spec
    slots: Slots
    candidate: Candidate


def _bad(message: str) -> Fatal:
    return Fatal("worker.bad_plan", f"plan: {message}")


def _int(obj: dict[str, Any], key: str, where: str, low: int, high: int,
         default: int | None = None) -> int:
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v < high:
        raise _bad(f"{where}.{key} must be an integer in [{low}, {high})")
    return v


def _text(obj: dict[str, Any], key: str, where: str, required: bool = True) -> str | None:
    v = obj.get(key)
    if v is None and not required:
        return None
    if not isinstance(v, str) or not v or "\0" in v or len(v) > 4096:
        raise _bad(f"{where} needs '{key}' as a non-empty string")
    return v


def _entry(raw: object, index: int, where: str, is_arg: bool) -> Entry:
    if not isinstance(raw, dict):
        raise _bad(f"{where} must be an object")
    dtype = raw.get("dtype")
    try:
        size = dtype_from_name(dtype).itemsize if isinstance(dtype, str) else 0
    except ValueError:
        size = 0
    if not size:
        raise _bad(f"{where}.dtype {dtype!r} is not a supported dtype")
    shape = raw.get("shape")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS or not all(
            isinstance(n, int) and not isinstance(n, bool) and 0 <= n < MAX_SLOT_BYTES
            for n in shape):
        raise _bad(f"{where}.shape must be a list of at most {MAX_DIMS} non-negative integers")
    count = size
    for n in shape:
        count *= n
    if count >= MAX_SLOT_BYTES:
        raise _bad(f"{where} is larger than 2^47 bytes")
    name = raw.get("name", f"{index}")
    if not isinstance(name, str) or len(name) > 1024:
        raise _bad(f"{where}.name must be a string")
    scalar: type | None = None
    device = raw.get("device", "cuda")
    if device not in ("cuda", "cpu"):
        raise _bad(f"{where}.device must be 'cuda' or 'cpu'")
    if is_arg and device == "cpu":
        scalar = SCALAR_KINDS.get(dtype)  # type: ignore[arg-type]
        if scalar is None or shape:
            raise _bad(f"{where}: a Python-number argument must be a 0-d bool, int64 or float64")
    return Entry(index, name, str(dtype), tuple(shape), scalar)


def _entries(spec: dict[str, Any], key: str) -> list[Entry]:
    raw = spec.get(key)
    if not isinstance(raw, list) or len(raw) > MAX_ENTRIES:
        raise _bad(f"spec.{key} must be a list of at most {MAX_ENTRIES} entries")
    return [_entry(e, i, f"spec.{key}[{i}]", key == "args") for i, e in enumerate(raw)]


def parse_spec(raw: object) -> Spec:
    if not isinstance(raw, dict):
        raise _bad("needs 'spec' (args, params, outputs lists)")
    spec = Spec(_entries(raw, "args"), _entries(raw, "params"), _entries(raw, "outputs"))
    if not spec.outputs:
        raise _bad("spec.outputs is empty")
    return spec


def _slot(raw: object, where: str) -> SlotRef:
    if not isinstance(raw, dict):
        raise _bad(f"{where} must be an object {{fd, bytes}}")
    return SlotRef(_int(raw, "fd", where, 3, MAX_FD), _int(raw, "bytes", where, 1, MAX_SLOT_BYTES))


def parse_slots(raw: object, spec: Spec) -> Slots:
    if not isinstance(raw, dict):
        raise _bad("needs 'slots' (kind, params, inputs, outputs)")
    kind = raw.get("kind")
    if kind not in ("cuda", "cpu"):
        raise _bad("slots.kind must be 'cuda' or 'cpu'")
    inputs = raw.get("inputs")
    if not isinstance(inputs, list) or not 1 <= len(inputs) <= MAX_INPUTS:
        raise _bad(f"slots.inputs must list 1 to {MAX_INPUTS} slots")
    slots = Slots(str(kind), _slot(raw.get("params"), "slots.params"),
                  [_slot(s, f"slots.inputs[{i}]") for i, s in enumerate(inputs)],
                  _slot(raw.get("outputs"), "slots.outputs"))
    fds = [slots.params.fd, *(s.fd for s in slots.inputs), slots.outputs.fd]
    if len(set(fds)) != len(fds):
        raise _bad("slots: two slots with the same descriptor")
    for name, entries, refs in (("params", spec.params, [slots.params]),
                                ("inputs", spec.tensor_args, slots.inputs),
                                ("outputs", spec.outputs, [slots.outputs])):
        need = layout([e.layout_entry() for e in entries])[1]
        for ref in refs:
            if ref.nbytes < need:
                raise _bad(f"slots.{name}: the spec's tensors need {need} bytes; the slot has "
                           f"{ref.nbytes}")
    return slots


def parse_candidate(raw: object) -> Candidate:
    if not isinstance(raw, dict):
        raise _bad("needs 'candidate' as an object (format, path or dir, task_dir)")
    fmt = raw.get("format")
    if fmt not in FORMATS:
        raise _bad(f"candidate.format must be one of {', '.join(FORMATS)} (got {fmt!r})")
    path = _text(raw, "path" if fmt == "kernelbench" else "dir", "candidate")
    task_dir = _text(raw, "task_dir", "candidate")
    extension = _text(raw, "extension", "candidate") if fmt == "workdir" else None
    modules = raw.get("inline_modules") or {}
    if fmt == "workdir":
        modules = {}
    if not isinstance(modules, dict) or len(modules) > MAX_MODULES or not all(
            isinstance(k, str) and isinstance(v, str) and v and "\0" not in v
            for k, v in modules.items()):
        raise _bad("candidate.inline_modules must map spec keys to library paths (at most "
                   f"{MAX_MODULES})")
    device = raw.get("torch_device", "cuda")
    if device not in ("cuda", "cpu"):
        raise _bad("candidate.torch_device must be 'cuda' or 'cpu'")
    rules = raw.get("rules", "cuda-agent")
    if rules not in RULES:
        raise _bad(f"candidate.rules must be one of {', '.join(RULES)} (got {rules!r})")
    mode = raw.get("module_mode", RULES_MODULE_MODE[str(rules)])
    if mode not in MODULE_MODES:
        raise _bad(f"candidate.module_mode must be one of {', '.join(MODULE_MODES)} "
                   f"(got {mode!r})")
    assert path is not None and task_dir is not None
    return Candidate(str(fmt), path, task_dir, extension, dict(modules),
                     _int(raw, "init_seed", "candidate", 0, 2**63, 0), str(device), str(rules),
                     str(mode))


def parse_plan(root: object) -> Plan:
    """The plan's fields this program uses; raises Fatal(worker.bad_plan)."""
    if not isinstance(root, dict):
        raise _bad("expected a JSON object")
    if root.get("version") != 2 or isinstance(root.get("version"), bool):
        raise _bad(f"version must be 2 (got {root.get('version')!r})")
    candidate = parse_candidate(root.get("candidate"))
    spec = parse_spec(root.get("spec"))
    slots = parse_slots(root.get("slots"), spec)
    if slots.kind != candidate.torch_device:
        raise _bad(f"slots.kind {slots.kind!r} does not match candidate.torch_device "
                   f"{candidate.torch_device!r}")
    return Plan(_int(root, "device", "plan", 0, 1025, 0), spec, slots, candidate)


def load_plan(path: str) -> Plan:
    try:
        root = read_json(path, MAX_PLAN_BYTES)
    except ReadError as exc:
        raise _bad(exc.message) from exc
    return parse_plan(root)
