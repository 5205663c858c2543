import torch
import torch.nn as nn


class Model(nn.Module):
    """y = x.mean(-1) on a (512, 262144) fp32 tensor (512 MiB): a bandwidth-bound row mean,
    output (512,). Each row is randn around its own mean (randn(512, 1)), so no constant
    output passes (the task is not degenerate). The mean of the first half of a row is off by
    one standard error, 1/512, for i.i.d. rows: about nine inside the tolerance (issue 45, item
    4; docs/protocol.md, "In-distribution inputs")."""

    def forward(self, x):
        return x.mean(dim=-1)


def get_inputs():
    return [torch.randn(512, 262144) + torch.randn(512, 1)]


def get_init_inputs():
    return []
