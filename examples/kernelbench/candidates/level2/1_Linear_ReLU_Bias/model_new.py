"""Workdir-format candidate for level2/1_Linear_ReLU_Bias:
relu(x @ linear.weight^T + linear.bias + bias) as one cuBLAS fp32 GEMM (no TF32) and one fused
epilogue kernel (both biases and the ReLU in a single pass over the output)."""

import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    """Same __init__ arguments as Model, and the same state_dict names and shapes:
    linear.weight (out, in), linear.bias (out,), bias (bias_shape). nn.Linear only holds the
    parameters here; forward() never calls it."""

    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        return cuda_extension.linear_bias_relu(
            x.contiguous(), self.linear.weight, self.linear.bias, self.bias
        )
