import torch
import torch.nn as nn


class Model(nn.Module):
    """
    A linear layer, plus a second learned bias, then ReLU:
    relu(x @ linear.weight^T + linear.bias + bias).
    """

    def __init__(self, in_features, out_features, bias_shape):
        super(Model, self).__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.bias = nn.Parameter(torch.randn(bias_shape) * 0.1)

    def forward(self, x):
        """
        Args:
            x (torch.Tensor): input of shape (batch_size, in_features).

        Returns:
            torch.Tensor: output of shape (batch_size, out_features).
        """
        x = self.linear(x)
        x = x + self.bias
        x = torch.relu(x)
        return x


batch_size = 1024
in_features = 1024
out_features = 1024
bias_shape = (out_features,)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features, bias_shape]
