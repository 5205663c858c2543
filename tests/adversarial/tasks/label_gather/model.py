import torch
import torch.nn as nn


class Model(nn.Module):
    """The logit of each row's class (x: 16384 x 1000 fp32; labels: 16384 class indices stored
    as float32, as some pipelines do): get_inputs guarantees every label is an integer in
    [0, 1000)."""

    def forward(self, x, labels):
        return x.gather(1, labels.long().unsqueeze(1)).squeeze(1)


def get_inputs():
    return [torch.randn(16384, 1000), torch.randint(0, 1000, (16384,)).float()]


def get_init_inputs():
    return []
