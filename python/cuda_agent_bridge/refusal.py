"""Refusal of torch compute while a PyTorch-format candidate's forward() runs.

Contract: ``with Refusal() as r: model(*args)`` refuses every torch function (``torch.*``,
``torch.nn.functional.*``, ``Tensor`` methods, at the Python level through a
``TorchFunctionMode``) and every ATen operator (at the dispatcher, through a
``TorchDispatchMode``, which also sees ``torch::``/``at::`` calls made from a candidate's C++
extension) except the allowlists below: allocation, metadata, views and copies. A refused call
raises ``TorchComputeRefused`` and is recorded in ``r.refused`` (first one kept), so a candidate
that swallows the exception is still caught. Calls into a compiled extension's own functions are
not torch functions and pass; so do raw kernels launched from it (they never reach the dispatcher).

While ``active`` is False the guard lets everything through (the harness's own work between
timed calls: flushes, perturbations, copies), so one guard can stay entered for a whole timing
loop and the candidate sees the same torch state on every call, checked or not.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

# Python-level names (torch.<name>) that may be called: tensor allocation, metadata, and the
# torch.<f> spellings of the views and copies ALLOWED_TENSOR allows as methods (torch.flatten(x, 1)
# is x.flatten(1); issue 46).
ALLOWED_TORCH = frozenset({
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "tensor", "as_tensor", "is_tensor", "is_floating_point", "is_complex", "numel",
    "result_type", "promote_types", "can_cast", "device", "Size", "finfo", "iinfo",
    "get_default_dtype",
    "flatten", "unflatten", "reshape", "permute", "transpose", "t", "squeeze", "unsqueeze",
    "narrow", "select", "split", "chunk", "unbind", "as_strided", "detach", "clone",
})
# Tensor methods and properties (torch.Tensor.<name>): metadata, views, copies, allocation.
ALLOWED_TENSOR = frozenset({
    # metadata
    "shape", "size", "dim", "ndim", "ndimension", "numel", "nelement", "dtype", "device",
    "layout", "is_cuda", "is_cpu", "is_contiguous", "stride", "storage_offset", "data_ptr",
    "element_size", "itemsize", "nbytes", "get_device", "is_floating_point", "is_complex",
    "requires_grad", "is_leaf", "grad", "grad_fn", "data", "T", "mT", "__len__", "__repr__",
    "__format__", "__hash__", "__bool__", "item", "untyped_storage", "is_sparse", "is_quantized",
    "is_meta", "names", "_version", "__dlpack__", "__dlpack_device__", "__cuda_array_interface__",
    # views
    "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze",
    "permute", "transpose", "t", "expand", "expand_as", "narrow", "select", "unbind", "split",
    "chunk", "as_strided", "unfold", "detach", "__getitem__",
    # copies and allocation
    "contiguous", "to", "cuda", "cpu", "clone", "copy_", "float", "half", "bfloat16", "double",
    "new_empty", "new_zeros", "new_ones", "new_full", "new_tensor", "new_empty_strided",
    "requires_grad_", "detach_", "zero_", "fill_", "type",
    # the caching allocator's bookkeeping of a tensor used on a side stream
    "record_stream",
})
# ATen operator packets allowed at the dispatcher: what the calls above lower to, plus the
# allocation a C++ binding does (torch::empty_like and friends).
ALLOWED_ATEN = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros",
    "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full",
    "zero_", "fill_", "scalar_tensor", "lift_fresh", "lift_fresh_copy", "resize_",
    "view", "_unsafe_view", "reshape", "_reshape_alias", "alias", "as_strided", "expand",
    "permute", "transpose", "t", "squeeze", "unsqueeze", "select", "slice", "narrow", "split",
    "split_with_sizes", "unbind", "chunk", "flatten", "unflatten", "detach", "view_as",
    "contiguous", "clone", "copy_", "_to_copy", "to", "_copy_from", "_copy_from_and_resize",
    "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "unsafe_split", "unsafe_chunk", "record_stream", "unfold",
})
_BASIC_INDEX = (int, slice, type(None), type(Ellipsis))


class TorchComputeRefused(RuntimeError):
    """A torch compute op called during a candidate's forward()."""

    def __init__(self, op: str) -> None:
        super().__init__(
            f"{op} is not allowed in ModelNew.forward(): compute with your own kernels "
            "(allowed from torch: allocation, shape/metadata, views, copies)"
        )
        self.op = op


def _name(func: Callable[..., Any]) -> str:
    try:
        return str(resolve_name(func) or getattr(func, "__qualname__", repr(func)))
    except Exception:  # resolve_name walks torch's namespaces; never fail on a lookup
        return getattr(func, "__qualname__", repr(func))


def _basic_index(index: object) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, _BASIC_INDEX) for i in items)


def function_allowed(name: str, args: tuple[Any, ...]) -> bool:
    """Whether the torch function with the resolved name may run."""
    if name.startswith("torch.Tensor."):
        member = name.removeprefix("torch.Tensor.").removesuffix(".__get__")
        if member == "__getitem__":  # tensor (advanced) indices gather: compute
            return len(args) > 1 and _basic_index(args[1])
        return member in ALLOWED_TENSOR
    if name.startswith("torch.functional."):  # torch.split is torch.functional.split
        name = "torch." + name.removeprefix("torch.functional.")
    if name.startswith("torch.") and name.count(".") == 1:
        return name.removeprefix("torch.") in ALLOWED_TORCH
    return False


class _FunctionGuard(TorchFunctionMode):
    def __init__(self, owner: Refusal) -> None:
        super().__init__()
        self.owner = owner

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if not self.owner.active:
            return func(*args, **(kwargs or {}))
        name = _name(func)
        if not function_allowed(name, args):
            raise self.owner.refuse(name)
        return func(*args, **(kwargs or {}))


class _DispatchGuard(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, owner: Refusal) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.owner = owner

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ to keep Dynamo out of it, and that wrapper
        # imports torch._dynamo on the first call: 1 s here, 3 to 6 s on the GPU host, paid in
        # every evaluation's first trial. Nothing the guard watches is compiled by Dynamo.
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        packet = getattr(func, "overloadpacket", func)
        op = getattr(packet, "__name__", str(func))
        if self.owner.active and op not in ALLOWED_ATEN:
            raise self.owner.refuse(f"aten.{op}")
        with torch._C.DisableTorchFunction():  # an allowed op is not a torch function call
            return func(*args, **(kwargs or {}))


class Refusal:
    """Context manager: torch compute refused inside; ``refused`` names the first refused op."""

    def __init__(self) -> None:
        self.refused: str | None = None
        self.active = True
        self._modes: list[Any] = []

    def refuse(self, op: str) -> TorchComputeRefused:
        if self.refused is None:
            self.refused = op
        return TorchComputeRefused(op)

    def __enter__(self) -> Refusal:
        self._modes = [_DispatchGuard(self), _FunctionGuard(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        self._modes = []


class Unguarded:
    """Refusal's shape with nothing refused: forward() under the kernelbench rules, where torch
    compute is allowed (docs/torch-rules.md, "Rules profiles")."""

    refused: str | None = None

    def __enter__(self) -> Unguarded:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None


def refused_in(exc: BaseException) -> str | None:
    """The op named by a TorchComputeRefused in exc or its causes/contexts, if any."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, TorchComputeRefused):
            return cur.op
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None


__all__ = ["Refusal", "TorchComputeRefused", "function_allowed", "refused_in"]
