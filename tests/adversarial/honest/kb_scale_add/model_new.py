"""KernelBench-style candidate for scale_add (y = 2x + 1), written the usual way.

A load_inline extension with C++ and CUDA sources: the bulk in 16-byte float4 loads and stores,
a scalar kernel for the tail and for misaligned views, launched on PyTorch's current stream;
forward() checks its input and allocates the output with torch.empty_like in the C++ binding.
The common idioms (os.environ for TORCH_CUDA_ARCH_LIST, x.contiguous(), shape checks, a module
global for the extension) make it a false-positive test for the static checks of PyTorch-format
candidates.
"""

import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

# Build only for the GPU we run on (KernelBench solutions commonly set this).
os.environ["TORCH_CUDA_ARCH_LIST"] = os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0")

scale_add_cuda = r"""
#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
affine_vec4(const float4 *__restrict__ x, float4 *__restrict__ y, int64_t n4)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = fmaf(2.0f, v.x, 1.0f);
        v.y = fmaf(2.0f, v.y, 1.0f);
        v.z = fmaf(2.0f, v.z, 1.0f);
        v.w = fmaf(2.0f, v.w, 1.0f);
        y[i] = v;
    }
}

__global__ void __launch_bounds__(kThreads)
affine_scalar(const float *__restrict__ x, float *__restrict__ y, int64_t begin, int64_t n)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride)
        y[i] = fmaf(2.0f, x[i], 1.0f);
}

unsigned blocks_for(int64_t work)
{
    const int64_t b = (work + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

} // namespace

torch::Tensor scale_add_forward(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda(), "scale_add_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "scale_add_forward: x must be float32");
    TORCH_CHECK(x.is_contiguous(), "scale_add_forward: x must be contiguous");
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0)
        return y;
    const float *xp = x.data_ptr<float>();
    float *yp = y.data_ptr<float>();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    int64_t done = 0;
    if (((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(yp)) & 15u) == 0) {
        const int64_t n4 = n / 4;
        if (n4 > 0) {
            affine_vec4<<<blocks_for(n4), kThreads, 0, stream>>>(
                reinterpret_cast<const float4 *>(xp), reinterpret_cast<float4 *>(yp), n4);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        done = n4 * 4;
    }
    if (done < n) {
        affine_scalar<<<blocks_for(n - done), kThreads, 0, stream>>>(xp, yp, done, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

scale_add_cpp = "torch::Tensor scale_add_forward(torch::Tensor x);"

scale_add_ext = load_inline(
    name="adv_kb_scale_add",
    cpp_sources=scale_add_cpp,
    cuda_sources=scale_add_cuda,
    functions=["scale_add_forward"],
    extra_cuda_cflags=["-O3", "--use_fast_math"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same __init__ arguments (none) and state_dict (empty) as the task's Model."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1:
            raise ValueError(f"expected a tensor, got shape {tuple(x.shape)}")
        return scale_add_ext.scale_add_forward(x.contiguous())
