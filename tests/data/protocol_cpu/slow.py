# Correct but slow (issue 46): honest.py's work done 1000 times over (0.2 to 0.7 s a call on one
# core), so a run of its calls passes a short --timeout in all while each call stays under it.
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
    for (int rep = 0; rep < 1000; rep++) {
        for (int64_t i = 0; i < total; i++) {
            const float v = xp[i] > 0.0f ? xp[i] : 0.0f;
            op[i] = v * static_cast<float>(scale) + bp[i % n] + 0.0f * static_cast<float>(rep);
        }
        volatile float sink = op[rep % total];
        (void)sink;
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

ext = load_inline(name="protocol_cpu_slow_relu", cpp_sources=CPP,
                  functions=["relu_scale_bias", "relu_only"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))
        self.calls = 0
        self.last = None

    def forward(self, x, scale):
        return ext.relu_scale_bias(x.contiguous(), scale, self.bias)
