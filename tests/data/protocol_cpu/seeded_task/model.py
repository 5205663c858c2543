# A Conv1d and an InstanceNorm1d with affine parameters (issue 46): the norm cancels the conv's
# bias (a per-channel constant), and its affine parameters start at ones and zeros. KernelBench
# builds Model and ModelNew under the same seed and never pairs their state_dicts.
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, 3)
        self.norm = nn.InstanceNorm1d(cout, affine=True)

    def forward(self, x):
        return self.norm(self.conv(x))


def get_inputs():
    return [torch.randn(8, 3, 64)]


def get_init_inputs():
    return [3, 8]
