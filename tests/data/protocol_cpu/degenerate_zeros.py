# Does not compute: returns zeros, which pass the degenerate task under Model's own
# initialization. Its state_dict does not pair with Model's (the norm's affine parameters are its
# own, declared first), so under the kernelbench rules both models keep their construction under
# one seed and nothing can be perturbed: it passes, and the result must say that the task was
# verified without perturbed parameters (issue 46).
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CUDA = r"""
__global__ void zero_kernel(float *y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = 0.0f;
}
"""

CPP = r"""
torch::Tensor zeros_for(torch::Tensor x) {
    return torch::zeros({x.size(0)}, x.options());
}
"""

ext = load_inline(name="protocol_cpu_degenerate_zeros", cpp_sources=CPP, cuda_sources=CUDA,
                  functions=["zeros_for"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(cout))
        self.beta = nn.Parameter(torch.zeros(cout))
        self.conv = nn.Conv1d(cin, cout, 3)

    def forward(self, x):
        return ext.zeros_for(x)
