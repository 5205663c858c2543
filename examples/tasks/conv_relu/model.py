import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(conv2d(x, W, b)), 3x3, stride 1, padding 1."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        with torch.no_grad():
            self.conv.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(16, 64, 56, 56)]


def get_init_inputs():
    return [64, 128, 3]
