"""KernelBench candidate for scale_add (y = 2x + 1) that splits the work over two side streams.

forward() allocates y with torch.empty_like, records an event on torch.cuda.current_stream()
and makes two side streams (created once, kept on self) wait for it; the extension then scales
the first half of the elements on side stream 0, entered with `with torch.cuda.stream(...)` (the
C++ launches on at::cuda::getCurrentCUDAStream()), and the second half on side stream 1, whose
handle is passed to the C++ as an integer (cuda_stream); the current stream then waits for both
(wait_stream), so the runner's copy of y and everything after it is ordered behind the work. y
stays allocated on the current stream and is used on the side streams only before that join, so
no record_stream is needed. Only allocation, metadata and views of torch are used in forward();
streams and events are not torch functions: a false-positive test for the static checks and the
refusal of torch compute.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

scale_add_cuda = r"""
#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
affine_range(const float *__restrict__ x, float *__restrict__ y, int64_t begin, int64_t end)
{
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
    for (int64_t i = begin + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < end; i += stride)
        y[i] = fmaf(2.0f, x[i], 1.0f);
}

void launch(const torch::Tensor &x, torch::Tensor &y, int64_t begin, int64_t end, cudaStream_t stream)
{
    TORCH_CHECK(x.is_cuda() && y.is_cuda() && x.scalar_type() == torch::kFloat && y.scalar_type() == torch::kFloat,
                "scale_add: float32 CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && x.numel() == y.numel(), "scale_add: contiguous, same size");
    TORCH_CHECK(0 <= begin && begin <= end && end <= x.numel(), "scale_add: bad range");
    if (begin == end)
        return;
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t blocks = (end - begin + kThreads - 1) / kThreads;
    affine_range<<<static_cast<unsigned>(blocks < 32768 ? blocks : 32768), kThreads, 0, stream>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), begin, end);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}

} // namespace

// On PyTorch's current stream (the caller entered the side stream with torch.cuda.stream).
void scale_add_current(torch::Tensor x, torch::Tensor y, int64_t begin, int64_t end)
{
    launch(x, y, begin, end, at::cuda::getCurrentCUDAStream(x.device().index()).stream());
}

// On the stream whose handle the caller passes (torch.cuda.Stream.cuda_stream).
void scale_add_on(torch::Tensor x, torch::Tensor y, int64_t begin, int64_t end, int64_t stream)
{
    launch(x, y, begin, end, reinterpret_cast<cudaStream_t>(static_cast<intptr_t>(stream)));
}
"""

scale_add_cpp = r"""
void scale_add_current(torch::Tensor x, torch::Tensor y, int64_t begin, int64_t end);
void scale_add_on(torch::Tensor x, torch::Tensor y, int64_t begin, int64_t end, int64_t stream);
"""

scale_add_ext = load_inline(
    name="adv_kb_two_side_streams",
    cpp_sources=scale_add_cpp,
    cuda_sources=scale_add_cuda,
    functions=["scale_add_current", "scale_add_on"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sides = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        if self.sides is None:
            self.sides = (torch.cuda.Stream(device=x.device), torch.cuda.Stream(device=x.device))
        current = torch.cuda.current_stream(x.device)
        fork = torch.cuda.Event()
        fork.record(current)
        first, second = self.sides
        first.wait_event(fork)
        second.wait_event(fork)
        half = n // 2
        with torch.cuda.stream(first):
            scale_add_ext.scale_add_current(x, y, 0, half)
        scale_add_ext.scale_add_on(x, y, half, n, second.cuda_stream)
        current.wait_stream(first)
        current.wait_stream(second)
        return y
