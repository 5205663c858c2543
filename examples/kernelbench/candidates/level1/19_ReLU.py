"""KernelBench-format candidate for level1/19_ReLU: out = max(x, 0) in one streaming CUDA kernel.

Memory bound (8 bytes moved per element): a grid-stride loop over float4s, 16-byte streaming
loads and stores, one wave of blocks; a scalar kernel covers the tail and misaligned views.
64-bit indices: the big variant of the task has 1.6e9 elements per tensor.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"

relu_cuda_source = r"""
#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 8;

__device__ __forceinline__ float relu1(float v)
{
    // NaN stays NaN, as in torch.relu (NaN > 0 is false, so test v != v as well).
    return (v > 0.0f || v != v) ? v : 0.0f;
}

__global__ void __launch_bounds__(kThreads)
relu_vec4(const float4 *__restrict__ x, float4 *__restrict__ out, int64_t n4)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
         i += stride) {
        float4 v = __ldcs(x + i);
        v.x = relu1(v.x);
        v.y = relu1(v.y);
        v.z = relu1(v.z);
        v.w = relu1(v.w);
        __stcs(out + i, v);
    }
}

__global__ void __launch_bounds__(kThreads)
relu_scalar(const float *__restrict__ x, float *__restrict__ out, int64_t begin, int64_t n)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        out[i] = relu1(x[i]);
}

unsigned grid_for(int64_t work)
{
    const int64_t wave =
        static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) *
        kBlocksPerSm;
    const int64_t need = (work + kThreads - 1) / kThreads;
    return static_cast<unsigned>(need < wave ? (need > 0 ? need : 1) : wave);
}

} // namespace

torch::Tensor relu_forward(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda(), "relu_forward: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "relu_forward: x must be float32");
    TORCH_CHECK(x.is_contiguous(), "relu_forward: x must be contiguous");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0)
        return out;
    const float *xp = x.data_ptr<float>();
    float *op = out.data_ptr<float>();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    int64_t done = 0;
    if ((reinterpret_cast<uintptr_t>(xp) & 15u) == 0 &&
        (reinterpret_cast<uintptr_t>(op) & 15u) == 0) {
        const int64_t n4 = n / 4;
        if (n4 > 0) {
            relu_vec4<<<grid_for(n4), kThreads, 0, stream>>>(
                reinterpret_cast<const float4 *>(xp), reinterpret_cast<float4 *>(op), n4);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        done = n4 * 4;
    }
    if (done < n) {
        relu_scalar<<<grid_for(n - done), kThreads, 0, stream>>>(xp, op, done, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

relu_ext = load_inline(
    name="cuda_agent_example_relu_v1",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_cuda_source,
    functions=["relu_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same __init__ arguments (none) and state_dict (empty) as the task's Model."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_forward(x.contiguous())
