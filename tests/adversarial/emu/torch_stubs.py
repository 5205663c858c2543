"""CPU stand-ins for the PyTorch-format candidates' load_inline extensions (torch_cpu_check.py).

install() replaces torch.utils.cpp_extension.load_inline with a function that returns a module
whose functions compute on the CPU what the candidates' CUDA code computes (by function name),
and makes torch.cuda.synchronize a no-op. A real extension's kernels are invisible to the
runner's refusal modes; so are these: they compute with torch functions disabled and the Python
dispatch keys excluded. Only for tests: nothing here is a candidate.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable
from typing import Any

import torch

SLOW_S = 0.02  # the "slow kernel" of kb_slow_scale_add and the cheats that run it
_HIDDEN = (torch._C.DispatchKeySet(torch._C.DispatchKey.Python)
           | torch._C.DispatchKeySet(torch._C.DispatchKey.PythonTLSSnapshot))


def _raw(fn: Callable[..., Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:
        with torch._C.DisableTorchFunction(), torch._C._ExcludeDispatchKeyGuard(_HIDDEN):
            return fn(*args)
    return call


def _slow_scale_add(x: torch.Tensor) -> torch.Tensor:
    time.sleep(SLOW_S)
    return x * 2.0 + 1.0


def _slow_scale_add_into(x: torch.Tensor, y: torch.Tensor) -> None:
    time.sleep(SLOW_S)
    y.copy_(x * 2.0 + 1.0)


def _probe(x: torch.Tensor, count: int) -> list[float]:
    flat, n = x.reshape(-1), x.numel()
    return [float(flat[int((i + 0.5) / count * n)]) for i in range(count)]


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "slow_scale_add": _slow_scale_add,
    "slow_scale_add_into": _slow_scale_add_into,
    "scale_add_forward": lambda x: x * 2.0 + 1.0,
    "affine_forward": lambda x: x * 2.0 + 1.0,
    "linear_nt": lambda x, w: x @ w.t(),
    "head": lambda x, n: [float(v) for v in x.reshape(-1)[:n]],
    "probe": _probe,
    "scaled": lambda t, f: t * f,
    "softmax_forward": lambda x: torch.softmax(x, -1),
    "rowsum_forward": lambda x: x.sum(-1),
}


def _load_inline(name: str, *args: Any, functions: Any = None, **kwargs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    for f in functions or []:
        setattr(module, f, _raw(FUNCTIONS[f]))
    return module


def install() -> None:
    import torch.utils.cpp_extension as ce

    ce.load_inline = _load_inline
    torch.cuda.synchronize = lambda *args, **kwargs: None
