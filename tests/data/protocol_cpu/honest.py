# A KernelBench-style candidate whose extension is CPU C++ only (g++), so that the whole protocol
# runs in tests without a GPU (CUDA_AGENT_PROTOCOL_CPU=1, tests/integration/protocol_cpu.sh).
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
torch::Tensor relu_scale_bias(torch::Tensor x, double scale, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "contiguous tensors only");
    torch::Tensor out = torch::empty_like(x);
    const float *xp = x.data_ptr<float>(), *bp = bias.data_ptr<float>();
    float *op = out.data_ptr<float>();
    const int64_t n = bias.numel(), total = x.numel();
    for (int64_t i = 0; i < total; i++) {
        const float v = xp[i] > 0.0f ? xp[i] : 0.0f;
        op[i] = v * static_cast<float>(scale) + bp[i % n];
    }
    return out;
}

torch::Tensor relu_only(torch::Tensor x) {
    torch::Tensor out = torch::empty_like(x);
    const float *xp = x.data_ptr<float>();
    float *op = out.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); i++)
        op[i] = xp[i] > 0.0f ? xp[i] : 0.0f;
    return out;
}
"""

ext = load_inline(name="protocol_cpu_relu_scale_bias", cpp_sources=CPP,
                  functions=["relu_scale_bias", "relu_only"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))
        self.calls = 0
        self.last = None

    def forward(self, x, scale):
        return ext.relu_scale_bias(x.contiguous(), scale, self.bias)
