"""CHEAT (telling special calls from the others by the time before them, the PyTorch-format
twin of rdtsc_gap_stale): forward() reads time.perf_counter() (allowed: KernelBench files time
things) on entry and on return. The first 12 calls (verification, warm-up) and every call whose
gap since the last return is more than 3 times the median of the last 31 gaps run the real
scale_add kernel; every other call returns the previous call's output tensor as it is, doing no
GPU work at all (the bridge needs milliseconds to place a fresh or special set, so the calls that
get checked were expected to stand out by their gap).

Why it must fail: the supervisor picks the checked calls from its secret after each call has
ended (every call with probability min(1, spot_density / (i + 1))), so a gap says nothing about
a call being checked; the first checked call the gap did not flag compares the previous input's
output with its own reference: hack.inconsistent_output (hack.final_mismatch on the final call,
verify.mismatch during verification).
"""

import time

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

scale_add_cuda = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void scale_add_kernel(const float4 *__restrict__ x, float4 *__restrict__ y, int64_t n4)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 v = x[i];
        v.x = fmaf(2.0f, v.x, 1.0f);
        v.y = fmaf(2.0f, v.y, 1.0f);
        v.z = fmaf(2.0f, v.z, 1.0f);
        v.w = fmaf(2.0f, v.w, 1.0f);
        y[i] = v;
    }
}

__global__ void scale_add_tail(const float *__restrict__ x, float *__restrict__ y, int64_t begin, int64_t n)
{
    const int64_t i = begin + static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fmaf(2.0f, x[i], 1.0f);
}

torch::Tensor scale_add(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat && x.is_contiguous(), "scale_add: bad input");
    torch::Tensor y = torch::empty_like(x);
    const int64_t n = x.numel();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
    const bool aligned = ((reinterpret_cast<uintptr_t>(x.data_ptr<float>()) |
                           reinterpret_cast<uintptr_t>(y.data_ptr<float>())) & 15u) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        const int64_t blocks = (n4 + 255) / 256;
        scale_add_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(
            reinterpret_cast<const float4 *>(x.data_ptr<float>()), reinterpret_cast<float4 *>(y.data_ptr<float>()), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (n4 * 4 < n) {
        scale_add_tail<<<static_cast<unsigned>((n - n4 * 4 + 255) / 256), 256, 0, stream>>>(
            x.data_ptr<float>(), y.data_ptr<float>(), n4 * 4, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

scale_add_ext = load_inline(
    name="adv_kb_perf_counter_stale",
    cpp_sources="torch::Tensor scale_add(torch::Tensor x);",
    cuda_sources=scale_add_cuda,
    functions=["scale_add"],
    verbose=False,
)

HONEST_CALLS = 12
HISTORY = 31


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.last_return = None
        self.gaps = []
        self.previous = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        now = time.perf_counter()
        gap = now - self.last_return if self.last_return is not None else 0.0
        typical = sorted(self.gaps)[len(self.gaps) // 2] if len(self.gaps) >= 8 else None
        fresh = (self.calls < HONEST_CALLS or typical is None or gap > 3.0 * typical
                 or self.previous is None or self.previous.shape != x.shape)
        if fresh:
            self.previous = scale_add_ext.scale_add(x.contiguous())
        if self.last_return is not None:
            self.gaps = (self.gaps + [gap])[-HISTORY:]
        self.calls += 1
        self.last_return = time.perf_counter()
        return self.previous
