# A cheat: computes the right outputs, but from its 15th call on also writes into its input (as
# a kernel that uses its input as scratch would). A checked call's input checksum must catch it
# (verify.input_modified), whether the check is made at once or kept for after the loop.
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
torch::Tensor relu_scale_bias_scratch(torch::Tensor x, double scale, torch::Tensor bias,
                                      bool scratch) {
    TORCH_CHECK(x.is_contiguous() && bias.is_contiguous(), "contiguous tensors only");
    torch::Tensor out = torch::empty_like(x);
    float *xp = x.data_ptr<float>();
    const float *bp = bias.data_ptr<float>();
    float *op = out.data_ptr<float>();
    const int64_t n = bias.numel(), total = x.numel();
    for (int64_t i = 0; i < total; i++) {
        const float v = xp[i] > 0.0f ? xp[i] : 0.0f;
        op[i] = v * static_cast<float>(scale) + bp[i % n];
    }
    if (scratch && total > 0)
        xp[total - 1] = 12345.0f;
    return out;
}
"""

ext = load_inline(name="protocol_cpu_relu_scale_bias_scratch", cpp_sources=CPP,
                  functions=["relu_scale_bias_scratch"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))
        self.calls = 0

    def forward(self, x, scale):
        self.calls += 1
        return ext.relu_scale_bias_scratch(x.contiguous(), scale, self.bias, self.calls > 14)
