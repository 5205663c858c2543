"""CHEAT (the build writes host files through compiler flags): an honest scale_add extension whose
load_inline call adds nvcc's --time (nvcc appends a CSV line of its phase timings to the file it
names, creating it) and the linker's --dependency-file (ld writes the list of every input file
of the link there). Outside a sandbox both write wherever the candidate says, as the user the
build runs as: here /tmp/ca_pwn_time and /tmp/ca_pwn_dep, but the same flags could overwrite a
file in the build cache, a shell start-up file or a later evaluation's inputs.

Why it must fail: every word of a PyTorch-format candidate's extra_cflags, extra_cuda_cflags and
extra_ldflags must match the flag allow list (docs/torch-build.md, "Flags"); --time and
-Wl,--dependency-file= are not on it, so the build stops with build.error before any compiler
runs. Were a flag to get past the list, the compiler runs in the build sandbox, whose /tmp is
private and whose only writable directory is the staging one: nothing lands on the host.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

scale_add_cuda = r"""
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

__global__ void scale_add_kernel(const float *__restrict__ x, float *__restrict__ y, int64_t n)
{
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = fmaf(2.0f, x[i], 1.0f);
}

torch::Tensor scale_add(torch::Tensor x)
{
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat && x.is_contiguous(), "scale_add: bad input");
    torch::Tensor y = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n > 0) {
        scale_add_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0,
                           at::cuda::getCurrentCUDAStream().stream()>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return y;
}
"""

scale_add_ext = load_inline(
    name="adv_kb_flag_time_write",
    cpp_sources="torch::Tensor scale_add(torch::Tensor x);",
    cuda_sources=scale_add_cuda,
    functions=["scale_add"],
    extra_cuda_cflags=["-O3", "--time", "/tmp/ca_pwn_time"],
    extra_ldflags=["-Wl,--dependency-file=/tmp/ca_pwn_dep"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale_add_ext.scale_add(x.contiguous())
