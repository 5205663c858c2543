import torch
import torch.nn as nn


class Model(nn.Module):
    """log_softmax over the last dimension (log_softmax rather than softmax: its outputs are
    O(10), so the 1e-2 tolerances check something; softmax of a 4096-wide row is mostly < 1e-2)."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.log_softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(16384, 4096) * 2.0]


def get_init_inputs():
    return []
