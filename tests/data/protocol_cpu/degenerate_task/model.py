# Degenerate (KernelBench level2/23's shape, in one dimension): a conv, a GroupNorm, then the mean
# of everything. Under GroupNorm's own initialization (weight 1, bias 0) the output is 0 up to
# rounding; with perturbed parameters it depends on the input again (docs/evaluation.md,
# "Degenerate tasks").
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 3)
        self.norm = nn.GroupNorm(2, cout)

    def forward(self, x):
        return self.norm(self.conv(x)).mean(dim=[1, 2])


def get_inputs():
    return [torch.randn(8, 3, 32)]


def get_init_inputs():
    return [3, 8]
