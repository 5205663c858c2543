import torch
import torch.nn as nn


class Model(nn.Module):
    """Scales each row of a matrix by a per-row factor."""

    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return a * s.unsqueeze(1)


rows = 16
cols = 48


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows)]


def get_init_inputs():
    return []
