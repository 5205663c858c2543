"""CHEAT (the link writes host files through pass-through flags): an honest cuBLAS GEMM whose
load_inline call has clean compile flags and puts everything in extra_ldflags, the flags of the
host compiler driving the link, where the words are handed on to ld: -Wl,--dependency-file=
(ld lists every input of the link there), -Xlinker -Map=... (the link map) and -Wl,-Map, each
pointing at a file on the build host (/tmp/ca_pwn_ld_dep, /tmp/ca_pwn_ld_map). Outside a
sandbox the link writes them wherever the candidate says, as the user the build runs as.

Why it must fail: link flags have their own allow list (docs/torch-build.md, "Flags": -l of
the allowed libraries, -L inside the visible directories, and -Wl/-Xlinker parts that change
linking behaviour only); --dependency-file and -Map are not on it, so the build stops with
build.error before the link. Were one to get past the list, ld runs in the build sandbox,
whose /tmp is private and whose only writable directory is the staging one.
"""

import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

gemm_cpp = r"""
#include <climits>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>

torch::Tensor linear_nt(torch::Tensor x, torch::Tensor w)
{
    TORCH_CHECK(x.is_cuda() && w.is_cuda() && x.scalar_type() == torch::kFloat && w.scalar_type() == torch::kFloat &&
                    x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1) && x.is_contiguous() && w.is_contiguous(),
                "linear_nt: bad input");
    const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
    TORCH_CHECK(m <= INT_MAX && n <= INT_MAX && k <= INT_MAX, "linear_nt: sizes fit in int");
    const c10::cuda::CUDAGuard guard(x.device());
    torch::Tensor y = torch::empty({m, n}, x.options());
    const float one = 1.0f, zero = 0.0f;
    TORCH_CHECK(cublasSgemm(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n),
                            static_cast<int>(m), static_cast<int>(k), &one, w.data_ptr<float>(), static_cast<int>(k),
                            x.data_ptr<float>(), static_cast<int>(k), &zero, y.data_ptr<float>(),
                            static_cast<int>(n)) == CUBLAS_STATUS_SUCCESS,
                "linear_nt: cublasSgemm failed");
    return y;
}
"""

gemm_ext = load_inline(
    name="adv_kb_flag_ld_depfile",
    cpp_sources=gemm_cpp,
    functions=["linear_nt"],
    extra_cflags=["-O3"],
    extra_ldflags=["-lcublas", "-Wl,--dependency-file=/tmp/ca_pwn_ld_dep", "-Xlinker", "-Map=/tmp/ca_pwn_ld_map",
                   "-Wl,-Map,/tmp/ca_pwn_ld_map2"],
    with_cuda=True,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.fc = nn.Linear(in_features, out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gemm_ext.linear_nt(x.contiguous(), self.fc.weight)
