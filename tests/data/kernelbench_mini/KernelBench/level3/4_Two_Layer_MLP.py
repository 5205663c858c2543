import torch
import torch.nn as nn


class Model(nn.Module):
    """Two linear layers with a GELU between them."""

    def __init__(self, width: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.up(x)))


batch_size = 4
width = 16
hidden = 64


def get_inputs():
    return [torch.randn(batch_size, width)]


def get_init_inputs():
    return [width, hidden]
