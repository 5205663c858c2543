import torch
import torch.nn as nn


class Model(nn.Module):
    """
    Softmax over the second dimension of a 2-D input.
    """

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Args:
            x (torch.Tensor): input of shape (batch_size, num_features).

        Returns:
            torch.Tensor: softmax of x over dim 1, same shape as x.
        """
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 4096


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []  # no special initialization inputs
