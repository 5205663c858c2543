import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x @ W^T + b) with nn.Linear(4096, 4096)."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)
        # A bias large enough that a kernel which drops it fails the check.
        with torch.no_grad():
            self.fc.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.relu(self.fc(x))


def get_inputs():
    return [torch.randn(2048, 4096)]


def get_init_inputs():
    return [4096, 4096]
