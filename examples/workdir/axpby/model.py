import torch
import torch.nn as nn


class Model(nn.Module):
    """out = alpha * x + beta * y for two fp32 vectors; alpha and beta are plain Python floats
    (attributes, not parameters: the state_dict is empty)."""

    def __init__(self, alpha: float, beta: float):
        super().__init__()
        self.alpha = float(alpha)
        self.beta = float(beta)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.alpha * x + self.beta * y


N = 1 << 24


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return [2.0, 0.5]
