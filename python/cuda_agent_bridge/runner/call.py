"""What the runner does inside a command: the calibration call, setup, one candidate call.

Contract (``Harness``, made once the slots are mapped):
- ``empty()``: start event; the harness's own fixed work of a call with nothing inside (a
  refusal guard entered and left under ``torch.no_grad()``); the smallest kernel; one
  device-to-device copy per output, of its size, from a scratch buffer into its place in the
  outputs slot; end event; device synchronize. Returns the event time (ms). A call's events
  cover the same fixed work plus forward(), so ``ev_ms - median(empty)`` is forward()'s cost.
- ``load(model, names)``: keeps ModelNew and the state_dict names that receive the spec's
  parameters (load.pairing), or, when ``names`` is None (kernelbench rules, state_dicts that do
  not pair), a copy of ModelNew's state as its seeded construction left it; and makes, once per
  input slot, forward()'s arguments as views of the slot (Python numbers are filled in per
  call). ``params`` says which: ``"paired"`` or ``"seeded"`` (the ``loaded`` answer's field).
- ``setup()``: paired, the params slot into ModelNew with ``load_state_dict`` (strict under the
  cuda-agent rules; under kernelbench, entries the reference has no parameter for keep their
  own values); seeded, ModelNew's state restored to the copy made at load (as the reference is
  reset to its state after construction before each check: forward() may update buffers); an
  exception is ``CallFailed(abi.setup_failed)``.
- ``call(r, scalars)``: start event; ``forward(*args)`` under ``torch.no_grad()`` with the
  refusal guard active around forward() only; the outputs flattened and checked against the
  spec (count, dtype, shape, device: ``verify.mismatch``; a Tensor subclass:
  ``hack.harness_tampering``) and copied into the outputs slot; end event; device synchronize.
  Under the kernelbench rules torch compute is allowed: the guard is a no-op of the same shape
  (the calibration call enters the same one). Returns the event time (ms). Failures:
  ``hack.torch_compute`` (a refused torch op, also when the candidate caught the refusal),
  ``abi.forward_failed`` (an exception, or no tensors returned), ``verify.mismatch``,
  ``fault.*`` (a CUDA error: the process must exit after answering). All raised as ``CallFailed``.
"""

from __future__ import annotations

import ctypes
import os

import torch
from torch import nn

from ..errors import BridgeError, exception_text
from ..refusal import Refusal, Unguarded, refused_in
from ..slots import layout, tensor_views
from ..tasks import dtype_from_name, dtype_name, flatten_outputs
from ..timing import Stopwatch
from .device import Mapped
from .events import CallFailed, Fatal
from .plan import Plan

# Substrings of CUDA error texts (torch's RuntimeError) -> the fault codes.
CUDA_FAULTS = (
    ("illegal memory access", "fault.illegal_address"),
    ("misaligned address", "fault.misaligned_address"),
    ("illegal instruction", "fault.illegal_instruction"),
    ("unspecified launch failure", "fault.launch_failure"),
    ("CUDA error", "fault.cuda_error"),
)


# A launch whose unit has no device code: under the cuda-agent rules on a GPU, the process sees
# torch's libraries without torch's compute kernels (torch_view.py), and the extension is always
# built for this device, so the launch was torch compute, however forward() reached it.
NO_KERNEL_IMAGE = "no kernel image is available"
_LIB_REFUSED = ("ModelNew.forward() made torch call {} (torch's own calls into cuBLAS and cuDNN "
                "are cut in the candidate's process; call the library from your extension)")


def _refused_cell() -> ctypes.Array[ctypes.c_char] | None:
    if os.environ.get("CA_TORCH_VIEW") != "1":
        return None
    try:
        return (ctypes.c_char * 128).in_dll(ctypes.CDLL(None), "ca_torch_refused")
    except (OSError, ValueError):
        return None


_REFUSED = _refused_cell()


def view_refused() -> str | None:
    """The first cuBLAS/cuDNN call torch made and the view's refusal library answered (torch's
    own library calls resolve there: torch_view.py), or None (no view, or no such call)."""
    if _REFUSED is None:
        return None
    return _REFUSED.value.decode("ascii", "replace") or None


def cuda_fault(text: str) -> str | None:
    """The fault code for a CUDA error text, or None when the text is not one."""
    return next((code for key, code in CUDA_FAULTS if key in text), None)


def safe_text(exc: BaseException) -> str:
    """exception_text(exc), or the type's name when the exception's str() misbehaves."""
    try:
        return exception_text(exc)
    except BaseException:
        return type(exc).__name__


class Harness:
    """The slots as tensors, the stopwatch, and (after load) ModelNew and its arguments."""

    def __init__(self, plan: Plan, device: torch.device, mapped: Mapped) -> None:
        self.plan = plan
        self.device = device
        self.mapped = mapped
        self.watch = Stopwatch(device)
        outputs = [e.layout_entry() for e in plan.spec.outputs]
        self.out_views = tensor_views(mapped.outputs, outputs)
        self.expected = [(dtype_from_name(e.dtype), e.shape) for e in plan.spec.outputs]
        offsets, size = layout(outputs)
        scratch = torch.zeros(size, dtype=torch.uint8, device=device)
        whole = mapped.outputs.bytes()
        self.cal_copies = [(whole[at:at + v.numel() * v.element_size()],
                            scratch[at:at + v.numel() * v.element_size()])
                           for at, v in zip(offsets, self.out_views, strict=True)]
        self.model: nn.Module | None = None
        self.names: list[str] = []
        self.seeded_state: dict[str, torch.Tensor] | None = None
        self.templates: list[list[object]] = []
        self.guarded = plan.candidate.rules == "cuda-agent"

    def guard(self) -> Refusal | Unguarded:
        """The refusal of torch compute around forward() (none under the kernelbench rules)."""
        return Refusal() if self.guarded else Unguarded()

    # -- calibration -------------------------------------------------------------------------

    def empty(self) -> float:
        w = self.watch
        try:
            w.start()
            with torch.no_grad(), self.guard():
                pass
            w.tiny()
            for dst, src in self.cal_copies:
                dst.copy_(src)
            return w.stop()
        except Exception as exc:  # a CUDA error left by earlier work: the context is lost
            text = safe_text(exc)
            code = cuda_fault(text) if self.device.type == "cuda" else None
            if code is None:
                raise
            raise CallFailed(code, f"a CUDA error in the calibration call: {text}",
                             fault=True) from exc

    # -- the candidate -----------------------------------------------------------------------

    @property
    def params(self) -> str:
        """``"seeded"`` when ModelNew keeps its seeded construction's parameters, else
        ``"paired"`` (the params slot is loaded into it at each setup)."""
        return "paired" if self.seeded_state is None else "seeded"

    def load(self, model: nn.Module, names: list[str] | None) -> None:
        self.model = model
        self.names = names or []
        self.seeded_state = None
        if names is None:
            try:
                self.seeded_state = {k: v.detach().clone() if isinstance(v, torch.Tensor) else v
                                     for k, v in model.state_dict().items()}
            except Exception as exc:
                raise Fatal("candidate.init_failed",
                            f"ModelNew.state_dict() raised {safe_text(exc)}") from exc
        tensor_args = self.plan.spec.tensor_args
        entries = [a.layout_entry() for a in tensor_args]
        self.templates = []
        for slot in self.mapped.inputs:
            template: list[object] = [None] * len(self.plan.spec.args)
            for arg, view in zip(tensor_args, tensor_views(slot, entries), strict=True):
                template[arg.index] = view
            self.templates.append(template)

    def setup(self) -> None:
        assert self.model is not None
        params = self.plan.spec.params
        views = tensor_views(self.mapped.params, [p.layout_entry() for p in params])
        try:
            if self.seeded_state is not None:
                self.model.load_state_dict(self.seeded_state)
            else:
                self.model.load_state_dict(dict(zip(self.names, views, strict=True)),
                                           strict=self.guarded)
            self.watch.sync()
        except BaseException as exc:
            raise self._fault() or CallFailed(
                "abi.setup_failed", "loading the parameters into ModelNew "
                f"(load_state_dict) raised {safe_text(exc)}") from exc

    def call(self, r: int, scalars: list[tuple[int, bool | int | float]]) -> float:
        model = self.model
        assert model is not None
        args = list(self.templates[r])
        for i, v in scalars:
            args[i] = v
        guard = self.guard()
        w = self.watch
        try:
            w.start()
            with torch.no_grad():
                with guard:
                    out = model(*args)
                if guard.refused:
                    raise CallFailed("hack.torch_compute",
                                     f"ModelNew.forward() called {guard.refused} and caught the "
                                     "refusal; torch compute is refused while the candidate runs")
                lib_call = view_refused() if self.guarded else None
                if lib_call:
                    raise CallFailed("hack.torch_compute", _LIB_REFUSED.format(lib_call))
                for view, o in zip(self.out_views, self._outputs(out), strict=True):
                    view.copy_(o)
            return w.stop()
        except CallFailed as failure:
            raise self._fault() or failure from None
        except BaseException as exc:
            raise self._failure(exc, guard) from exc

    def _outputs(self, out: object) -> list[torch.Tensor]:
        try:
            outputs = flatten_outputs(out)
        except BridgeError as exc:
            raise CallFailed("abi.forward_failed",
                             exc.message.replace("forward()", "ModelNew.forward()")) from None
        if len(outputs) != len(self.expected):
            raise CallFailed("verify.mismatch", f"ModelNew.forward() returned {len(outputs)} "
                             f"tensors; the reference returns {len(self.expected)}")
        for i, (o, (dtype, shape)) in enumerate(zip(outputs, self.expected, strict=True)):
            if type(o) not in (torch.Tensor, nn.Parameter):
                raise CallFailed(
                    "hack.harness_tampering",
                    f"ModelNew.forward() returned a {type(o).__name__} as output {i}, a "
                    "torch.Tensor subclass: its __torch_function__ would run candidate code "
                    "inside the harness's own work on it (return plain tensors)")
            if o.dtype != dtype or tuple(o.shape) != shape or o.device != self.device:
                name = self.plan.spec.outputs[i].name
                raise CallFailed(
                    "verify.mismatch",
                    f"output {i} ({name}): dtype, shape or device differs from the reference "
                    f"(got {dtype_name(o.dtype)} {list(o.shape)} on {o.device}, expected "
                    f"{dtype_name(dtype)} {list(shape)} on {self.device})")
        return outputs

    # -- failures ----------------------------------------------------------------------------

    def _fault(self) -> CallFailed | None:
        """A CUDA error left by the candidate (the context is then unusable), if any."""
        if self.device.type != "cuda":
            return None
        try:
            torch.cuda.synchronize(self.device)
        except BaseException as exc:
            text = safe_text(exc)
            return CallFailed(cuda_fault(text) or "fault.cuda_error",
                              f"a CUDA error after ModelNew.forward(): {text}", fault=True)
        return None

    def _failure(self, exc: BaseException, guard: Refusal | Unguarded) -> CallFailed:
        text = safe_text(exc)
        lib_call = view_refused() if self.guarded else None
        if lib_call:
            return CallFailed("hack.torch_compute", _LIB_REFUSED.format(lib_call))
        if self.guarded and NO_KERNEL_IMAGE in text:
            return CallFailed("hack.torch_compute", "ModelNew.forward() launched a torch kernel "
                              "(the candidate's process holds no GPU code of torch's compute "
                              f"operators, only fill and copy; torch compute is refused): {text}")
        fault = cuda_fault(text) if self.device.type == "cuda" else None
        if fault is not None:
            return CallFailed(fault, f"ModelNew.forward() raised {text}", fault=True)
        found = self._fault()
        if found is not None:
            return found
        op = guard.refused or (refused_in(exc) if self.guarded else None)
        if op:
            return CallFailed("hack.torch_compute", f"ModelNew.forward() called {op}; torch "
                              "compute is refused while the candidate runs")
        return CallFailed("abi.forward_failed", f"ModelNew.forward() raised {text}")
