"""Honest, deliberately slow KernelBench candidate for scale_add (y = 2x + 1).

Each element runs a chain of 1024 dependent fused multiply-adds that change nothing
(v = fma(v, one, zero) with one = 1 and zero = 0 passed at run time, so the compiler cannot drop
them) before y = 2v + 1: about 17 times slower than eager PyTorch, and correct. It is the twin of
the cheats kb_timer_patch, kb_timer_patch_cxx and kb_late_thread, which run exactly this kernel
and launch and claim to be fast: the suite requires their medians to be held to this one's.
"""

import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

slow_cuda_source = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int kThreads = 256;
constexpr int kRounds = 1024;

__global__ void __launch_bounds__(kThreads)
slow_affine(const float *__restrict__ x, float *__restrict__ y, int64_t n, int rounds, float one, float zero)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        for (int r = 0; r < rounds; ++r)
            v = fmaf(v, one, zero);
        y[i] = fmaf(2.0f, v, 1.0f);
    }
}

void slow_affine_launch(const torch::Tensor &x, torch::Tensor &y)
{
    const int64_t n = x.numel();
    if (n == 0)
        return;
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    slow_affine<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0,
                  at::cuda::getCurrentCUDAStream().stream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n, kRounds, 1.0f, 0.0f);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

torch::Tensor slow_scale_add(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat && x.is_contiguous(),
                "slow_scale_add: x must be a contiguous float32 CUDA tensor");
    torch::Tensor y = torch::empty_like(x);
    slow_affine_launch(x, y);
    return y;
}
"""

slow_cpp_source = "torch::Tensor slow_scale_add(torch::Tensor x);"

slow_ext = load_inline(
    name="adv_kb_slow_scale_add",
    cpp_sources=slow_cpp_source,
    cuda_sources=slow_cuda_source,
    functions=["slow_scale_add"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return slow_ext.slow_scale_add(x.contiguous())
