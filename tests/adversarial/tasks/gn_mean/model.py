import torch
import torch.nn as nn


class Model(nn.Module):
    """KernelBench level2/23's shape (Conv3d, GroupNorm, mean of everything) on (16, 3, 16, 32,
    32) fp32: under GroupNorm's own initialization (weight 1, bias 0) the output is 0 up to
    rounding, so an output of zeros would pass; the task is degenerate and verified with
    perturbed parameters (docs/evaluation.md, "Degenerate tasks")."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 16, 3)
        self.norm = nn.GroupNorm(8, 16)

    def forward(self, x):
        return self.norm(self.conv(x)).mean(dim=[1, 2, 3, 4])


def get_inputs():
    return [torch.randn(16, 3, 16, 32, 32)]


def get_init_inputs():
    return []
