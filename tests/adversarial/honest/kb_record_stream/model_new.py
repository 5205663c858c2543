"""KernelBench candidate for rowsum (y = x.sum(-1)) computed on a side stream, with the output
handed back to the caching allocator's stream bookkeeping the documented way.

forward() allocates the output with torch.empty on the current stream, makes a side stream
(created once) wait for the current one, launches the row sums there (one warp per row,
shuffles; the C++ launches on at::cuda::getCurrentCUDAStream() inside `with
torch.cuda.stream(side)`), calls out.record_stream(side) so that the allocator never hands the
output's memory to another user before the side stream's work on it is done, and makes the
current stream wait for the side stream before returning. record_stream is bookkeeping of the
caching allocator, not compute (no kernel, no value changes): a false-positive test for the
static checks and the runtime refusal of torch compute, which must let it through.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

rowsum_cuda = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int kThreads = 256, kRowsPerBlock = kThreads / 32;

__global__ void __launch_bounds__(kThreads)
rowsum_warp(const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t d)
{
    const int lane = threadIdx.x & 31;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + (threadIdx.x >> 5);
    if (row >= rows)
        return;
    const float *xr = x + row * d;
    float s = 0.0f;
    if ((d & 3) == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
        const float4 *xv = reinterpret_cast<const float4 *>(xr);
        for (int64_t i = lane; i < d / 4; i += 32) {
            const float4 v = xv[i];
            s += (v.x + v.y) + (v.z + v.w);
        }
    } else {
        for (int64_t i = lane; i < d; i += 32)
            s += xr[i];
    }
    for (int o = 16; o > 0; o >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0)
        y[row] = s;
}

} // namespace

void rowsum_into(torch::Tensor x, torch::Tensor y)
{
    TORCH_CHECK(x.is_cuda() && y.is_cuda() && x.scalar_type() == torch::kFloat && y.scalar_type() == torch::kFloat,
                "rowsum_into: float32 CUDA tensors");
    TORCH_CHECK(x.is_contiguous() && y.is_contiguous() && x.dim() >= 1, "rowsum_into: contiguous input");
    const int64_t d = x.size(-1), rows = d > 0 ? x.numel() / d : 0;
    TORCH_CHECK(y.numel() == rows, "rowsum_into: y must hold one value per row");
    if (rows == 0)
        return;
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    rowsum_warp<<<static_cast<unsigned>(blocks), kThreads, 0, at::cuda::getCurrentCUDAStream().stream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), rows, d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

rowsum_ext = load_inline(
    name="adv_kb_record_stream",
    cpp_sources="void rowsum_into(torch::Tensor x, torch::Tensor y);",
    cuda_sources=rowsum_cuda,
    functions=["rowsum_into"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.side = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
        if self.side is None:
            self.side = torch.cuda.Stream(device=x.device)
        current = torch.cuda.current_stream(x.device)
        self.side.wait_stream(current)
        with torch.cuda.stream(self.side):
            rowsum_ext.rowsum_into(x, out)
        out.record_stream(self.side)
        current.wait_stream(self.side)
        return out
