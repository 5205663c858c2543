import torch
import torch.nn as nn


class Model(nn.Module):
    """Two outputs: (2x, x + 1)."""

    def forward(self, x):
        return x * 2.0, x + 1.0


def get_inputs():
    return [torch.randn(128, 40)]


def get_init_inputs():
    return []
