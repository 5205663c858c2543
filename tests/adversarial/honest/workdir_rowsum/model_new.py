"""CUDA-Agent workdir candidate for rowsum (y = x.sum(-1)): forward() calls cuda_extension.rowsum,
built from kernels/rowsum.cu and kernels/rowsum_binding.cpp with the fixed binding.cpp and
binding_registry.h of the published layout."""

import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Same __init__ arguments (none) and state_dict (empty) as the task's Model."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.rowsum(x.contiguous())
