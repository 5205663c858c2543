# A task with BatchNorm (issue 46): in training mode (the kernelbench rules', as KernelBench's
# harness runs both models) the output is normalized by the batch's statistics; in eval mode (the
# cuda-agent rules', as the published CUDA-Agent verification runs them) by the running ones (0
# and 1 at construction), which these inputs (mean about 1, spread about 3) are far from.
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bn = nn.BatchNorm1d(c)

    def forward(self, x):
        return self.bn(torch.relu(x))


def get_inputs():
    return [torch.randn(128, 64) * 3 + 1]


def get_init_inputs():
    return [64]
