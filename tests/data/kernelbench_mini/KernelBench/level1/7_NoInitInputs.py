import torch
import torch.nn as nn


class Model(nn.Module):
    """Broken on purpose: the file lacks get_init_inputs, so the importer skips it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


def get_inputs():
    return [torch.randn(4, 4)]
