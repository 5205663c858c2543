"""KernelBench candidate for gemm (y = x W^T, nn.Linear without bias) with cuBLAS called directly.

cublasSgemm on PyTorch's own cuBLAS handle and current stream (at::cuda::getCurrentCUDABlasHandle,
which also binds the handle to the current stream), plain fp32 like the reference. Calling the
library through the handle torch gives out is not torch compute: this is a false-positive test
for the build-time check of ATen compute symbols in a candidate's extension (it uses ATen's
context and allocation functions, none of its operators or BLAS wrappers).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

gemm_cpp = r"""
#include <climits>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>

// Row-major y (M x N) = x (M x K) W^T, W (N x K): column-major y^T = W x^T, with W's memory read
// transposed (ld K) and x's as is (ld K).
torch::Tensor linear_nt(torch::Tensor x, torch::Tensor w)
{
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && x.device() == w.device(), "linear_nt: CUDA tensors on one device");
    TORCH_CHECK(x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat, "linear_nt: float32");
    TORCH_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1), "linear_nt: x [M, K] and w [N, K]");
    TORCH_CHECK(x.is_contiguous() && w.is_contiguous(), "linear_nt: contiguous inputs");
    const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
    TORCH_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "linear_nt: sizes fit in int");
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor y = torch::empty({m, n}, x.options());
    if (m == 0 || n == 0)
        return y;
    cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t st = cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                                          static_cast<int>(m), static_cast<int>(k), &one, w.data_ptr<float>(),
                                          static_cast<int>(k), x.data_ptr<float>(), static_cast<int>(k), &zero,
                                          y.data_ptr<float>(), static_cast<int>(n));
    TORCH_CHECK(st == CUBLAS_STATUS_SUCCESS, "linear_nt: cublasSgemm failed with status ", static_cast<int>(st));
    return y;
}
"""

gemm_ext = load_inline(
    name="adv_kb_cublas_gemm",
    cpp_sources=gemm_cpp,
    functions=["linear_nt"],
    extra_ldflags=["-lcublas"],
    with_cuda=True,
    verbose=False,
)


class ModelNew(nn.Module):
    """Same __init__ arguments and state_dict (fc.weight) as the task's Model."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gemm_ext.linear_nt(x.contiguous(), self.fc.weight)
