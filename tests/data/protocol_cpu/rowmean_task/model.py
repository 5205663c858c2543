import torch
from torch import nn


class Model(nn.Module):
    """y = x.mean(-1) on (16, 262144) fp32 rows: a row mean. Each row is randn around its own
    mean (so that no constant passes: the task is not degenerate); the mean of the first half
    of a row is off by about 1/512 (one standard error), the tolerance about ten: only sets off
    the generator's distribution catch a kernel that reads half (docs/protocol.md,
    "In-distribution inputs")."""

    def forward(self, x):
        return x.mean(dim=-1)


def get_inputs():
    return [torch.randn(16, 262144) + torch.randn(16, 1)]


def get_init_inputs():
    return []
