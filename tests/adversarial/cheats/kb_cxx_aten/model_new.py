"""CHEAT (ATen compute from the candidate's own C++, below the Python dispatch key): the runner's
TorchDispatchMode sees operators a C++ binding calls through at::/torch:: because the Python
dispatch key is in the thread's included set while the mode is active. The binding excludes that
key (and PythonTLSSnapshot) with c10::impl::ExcludeDispatchKeyGuard and calls at::softmax: the
dispatcher goes straight to PyTorch's CUDA softmax and no mode is ever asked. forward() and its
Python look like any KernelBench solution.

Why it must fail now: the build checks the extension for ATen compute symbols
(at::_ops::softmax_int::call here) and refuses it: hack.torch_compute
(or build.forbidden_symbol naming the symbol).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cpp = r"""
#include <c10/core/impl/LocalDispatchKeySet.h>

torch::Tensor softmax_forward(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "softmax_forward: float32 CUDA tensor");
    const c10::impl::ExcludeDispatchKeyGuard below_python(
        c10::DispatchKeySet(c10::DispatchKey::Python) | c10::DispatchKeySet(c10::DispatchKey::PythonTLSSnapshot));
    return at::softmax(x, -1);
}
"""

softmax_ext = load_inline(
    name="adv_kb_cxx_aten",
    cpp_sources=softmax_cpp,
    functions=["softmax_forward"],
    with_cuda=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_forward(x.contiguous())
