import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last dimension with an affine weight and bias."""

    def __init__(self, dim):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        # Non-trivial affine parameters, so a kernel that ignores them fails.
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.5)
            self.ln.bias.normal_(0.0, 0.5)

    def forward(self, x):
        return self.ln(x)


def get_inputs():
    return [torch.randn(32768, 1024) * 2.0 + 0.5]


def get_init_inputs():
    return [1024]
