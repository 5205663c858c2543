import torch
import torch.nn as nn


class Model(nn.Module):
    """y = conv2d(x, W, b): nn.Conv2d(32, 64, 3, padding=1) on (8, 32, 64, 64), NCHW fp32."""

    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)

    def forward(self, x):
        return self.conv(x)


def get_inputs():
    return [torch.randn(8, 32, 64, 64)]


def get_init_inputs():
    return [32, 64, 3]
