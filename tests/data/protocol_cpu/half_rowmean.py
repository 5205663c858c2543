# A cheat right only for the generator's distribution (issue 45, item 4): the mean of the first
# half of each row. For i.i.d. randn rows it is about five standard errors inside the tolerance
# and reads half the bytes; on a varied set (steps along the row, a sorted row) it is off by a
# fraction of the rows' spread, and verification must fail it.
import torch
from torch import nn
from torch.utils.cpp_extension import load_inline

CPP = r"""
torch::Tensor half_row_mean(torch::Tensor x) {
    TORCH_CHECK(x.is_contiguous() && x.dim() == 2, "a contiguous matrix");
    const int64_t rows = x.size(0), n = x.size(1), half = n / 2;
    torch::Tensor out = torch::empty({rows}, x.options());
    const float *xp = x.data_ptr<float>();
    float *op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; r++) {
        double s = 0.0;
        for (int64_t i = 0; i < half; i++)
            s += xp[r * n + i];
        op[r] = static_cast<float>(s / static_cast<double>(half));
    }
    return out;
}
"""

ext = load_inline(name="protocol_cpu_half_row_mean", cpp_sources=CPP,
                  functions=["half_row_mean"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.half_row_mean(x.contiguous())
