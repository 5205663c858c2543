"""CHEAT (PyTorch's BLAS wrapper from the candidate's C++): at::cuda::blas::gemm<float> is a plain
C++ function of libtorch_cuda (ATen's cuBLAS wrapper: its handle, its stream, its math mode), not
an operator, so it never reaches the dispatcher and no dispatch mode can see it. The binding
allocates y with torch::empty (allowed) and lets ATen do the GEMM: the extension's own code does
nothing. kb_cublas_gemm, honest, calls cuBLAS itself on the same handle.

Why it must fail now: the build checks the extension for ATen compute symbols
(at::cuda::blas::gemm here) and refuses it: hack.torch_compute
(or build.forbidden_symbol naming the symbol).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

blas_cpp = r"""
#include <ATen/cuda/CUDABlas.h>
#include <c10/cuda/CUDAGuard.h>

// Row-major y = x W^T as column-major y^T = W x^T.
torch::Tensor linear_nt(torch::Tensor x, torch::Tensor w)
{
    TORCH_CHECK(x.is_cuda() && x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && x.is_contiguous() &&
                    w.is_contiguous() && x.scalar_type() == torch::kFloat, "linear_nt: bad input");
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
    torch::Tensor y = torch::empty({m, n}, x.options());
    at::cuda::blas::gemm<float>('t', 'n', n, m, k, 1.0f, w.data_ptr<float>(), k, x.data_ptr<float>(), k, 0.0f,
                                y.data_ptr<float>(), n);
    return y;
}
"""

blas_ext = load_inline(
    name="adv_kb_cxx_blas",
    cpp_sources=blas_cpp,
    functions=["linear_nt"],
    with_cuda=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return blas_ext.linear_nt(x.contiguous(), self.fc.weight)
