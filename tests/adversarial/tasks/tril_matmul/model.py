import torch
import torch.nn as nn


class Model(nn.Module):
    """C = tril(A @ B) for lower triangular A and B (1024 x 1024 fp32), as KernelBench level1/15:
    get_inputs guarantees both triangles above the diagonal are zero."""

    def forward(self, A, B):
        return torch.tril(torch.matmul(A, B))


def get_inputs():
    n = 1024
    return [torch.tril(torch.randn(n, n)), torch.tril(torch.randn(n, n))]


def get_init_inputs():
    return []
