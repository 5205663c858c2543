# Honest under KernelBench's rules, refused under cuda-agent's: the parameter has another name
# than the reference's (paired by order and shape under the kernelbench rules), forward() finishes
# with torch operators (allowed there), and the CUDA sources define a kernel (KernelBench's
# cuda_impl check; on this CPU-only test host the C++ function does the work).
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void relu_kernel(const float *x, float *y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
"""

CPP = r"""
torch::Tensor relu_only(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous(), "contiguous tensors only");
    torch::Tensor out = torch::empty_like(x);
    const float *xp = x.data_ptr<float>();
    float *op = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); i++)
        op[i] = xp[i] > 0.0f ? xp[i] : 0.0f;
    return out;
}
"""

ext = load_inline(name="protocol_cpu_kb_rules", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["relu_only"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.shift = nn.Parameter(torch.randn(n))

    def forward(self, x, scale):
        return ext.relu_only(x.contiguous()) * scale + self.shift
