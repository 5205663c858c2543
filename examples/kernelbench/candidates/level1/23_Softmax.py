"""KernelBench-format candidate for level1/23_Softmax: softmax over dim 1 of a 2-D fp32 tensor.

One block per row. Rows of up to 8192 floats (a multiple of 4, 16-byte aligned) are read once
into registers as float4s (256 threads x up to 8 float4 each); the block's max and then its sum
of exp(x - max) are reduced with warp shuffles (__shfl_xor_sync) and one shared-memory step
across the 8 warps; the row is written once. Other rows (longer, odd widths, misaligned views)
take a generic kernel with the same reductions that re-reads the row (L1/L2-resident) instead
of keeping it in registers. All arithmetic in fp32 with the accurate expf.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

softmax_cpp_source = "torch::Tensor softmax_rows(torch::Tensor x);"

softmax_cuda_source = r"""
#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxVecPerThread = 8; // register-resident rows: up to 256 * 8 * 4 = 8192 floats

__device__ __forceinline__ float warp_max(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// The block-wide max (is_max) or sum of v, returned to every thread. `scratch` holds kWarps
// floats; the leading __syncthreads() lets a caller reuse it for the next reduction.
__device__ __forceinline__ float block_reduce(float v, bool is_max, float *scratch)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    __syncthreads();
    if (lane == 0)
        scratch[warp] = v;
    __syncthreads();
    float r = lane < kWarps ? scratch[lane] : (is_max ? -INFINITY : 0.0f);
    r = is_max ? warp_max(r) : warp_sum(r);
    return r; // every warp computed the same value from the same scratch
}

// One row per block, kept in registers: cols % 4 == 0, 16-byte aligned rows,
// cols <= kThreads * 4 * VEC.
template <int VEC>
__global__ void __launch_bounds__(kThreads)
softmax_rows_regs(const float *__restrict__ x, float *__restrict__ out, int64_t cols)
{
    __shared__ float scratch[kWarps];
    const int64_t row = blockIdx.x;
    const float4 *in4 = reinterpret_cast<const float4 *>(x + row * cols);
    float4 *out4 = reinterpret_cast<float4 *>(out + row * cols);
    const int64_t cols4 = cols / 4;

    float4 v[VEC];
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * kThreads;
        if (j < cols4) {
            v[k] = __ldcs(in4 + j);
            m = fmaxf(m, fmaxf(fmaxf(v[k].x, v[k].y), fmaxf(v[k].z, v[k].w)));
        }
    }
    m = block_reduce(m, true, scratch);

    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * kThreads;
        if (j < cols4) {
            v[k].x = expf(v[k].x - m);
            v[k].y = expf(v[k].y - m);
            v[k].z = expf(v[k].z - m);
            v[k].w = expf(v[k].w - m);
            s += (v[k].x + v[k].y) + (v[k].z + v[k].w);
        }
    }
    s = block_reduce(s, false, scratch);

    const float inv = 1.0f / s;
#pragma unroll
    for (int k = 0; k < VEC; k++) {
        const int64_t j = threadIdx.x + static_cast<int64_t>(k) * kThreads;
        if (j < cols4) {
            float4 o;
            o.x = v[k].x * inv;
            o.y = v[k].y * inv;
            o.z = v[k].z * inv;
            o.w = v[k].w * inv;
            __stcs(out4 + j, o);
        }
    }
}

// Any row length and alignment: three passes over the row (max, sum, write).
__global__ void __launch_bounds__(kThreads)
softmax_rows_generic(const float *__restrict__ x, float *__restrict__ out, int64_t cols)
{
    __shared__ float scratch[kWarps];
    const float *in = x + static_cast<int64_t>(blockIdx.x) * cols;
    float *o = out + static_cast<int64_t>(blockIdx.x) * cols;

    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads)
        m = fmaxf(m, in[j]);
    m = block_reduce(m, true, scratch);

    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads)
        s += expf(in[j] - m);
    s = block_reduce(s, false, scratch);

    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads)
        o[j] = expf(in[j] - m) * inv;
}

template <int VEC>
void launch_regs(const float *x, float *out, int64_t rows, int64_t cols, cudaStream_t stream)
{
    softmax_rows_regs<VEC><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, out, cols);
}

} // namespace

torch::Tensor softmax_rows(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda(), "softmax_rows: x must be a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == torch::kFloat, "softmax_rows: x must be float32");
    TORCH_CHECK(x.dim() == 2, "softmax_rows: x must be 2-D (rows, cols), got ", x.dim(), "-D");
    TORCH_CHECK(x.is_contiguous(), "softmax_rows: x must be contiguous");
    TORCH_CHECK(x.size(0) <= 0x7fffffff, "softmax_rows: at most 2^31 - 1 rows");

    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor out = torch::empty_like(x);
    const int64_t rows = x.size(0), cols = x.size(1);
    if (rows == 0 || cols == 0)
        return out;
    const float *xp = x.data_ptr<float>();
    float *op = out.data_ptr<float>();
    cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();

    const bool vec = cols % 4 == 0 && (reinterpret_cast<uintptr_t>(xp) & 15u) == 0 &&
                     (reinterpret_cast<uintptr_t>(op) & 15u) == 0;
    const int64_t per_thread = (cols / 4 + kThreads - 1) / kThreads; // float4s per thread
    if (vec && per_thread <= 1)
        launch_regs<1>(xp, op, rows, cols, stream);
    else if (vec && per_thread <= 2)
        launch_regs<2>(xp, op, rows, cols, stream);
    else if (vec && per_thread <= 4)
        launch_regs<4>(xp, op, rows, cols, stream);
    else if (vec && per_thread <= kMaxVecPerThread)
        launch_regs<kMaxVecPerThread>(xp, op, rows, cols, stream);
    else
        softmax_rows_generic<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(xp, op, cols);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

softmax_ext = load_inline(
    name="cuda_agent_example_softmax_v1",
    cpp_sources=softmax_cpp_source,
    cuda_sources=softmax_cuda_source,
    functions=["softmax_rows"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    """Same __init__ arguments (none) and state_dict (empty) as the task's Model."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax_ext.softmax_rows(x.contiguous())
