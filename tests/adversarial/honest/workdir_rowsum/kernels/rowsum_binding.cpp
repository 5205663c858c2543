// The PyTorch side of kernels/rowsum.cu: checks x, allocates y with torch::empty, launches on
// PyTorch's current stream and registers `cuda_extension.rowsum(x)`.
#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

cudaError_t rowsum_launch(const float *x, float *y, int64_t rows, int64_t cols, cudaStream_t stream);

static torch::Tensor rowsum(const torch::Tensor &x)
{
	TORCH_CHECK(x.is_cuda(), "rowsum: x must be a CUDA tensor");
	TORCH_CHECK(x.scalar_type() == torch::kFloat, "rowsum: x must be float32");
	TORCH_CHECK(x.dim() >= 1 && x.is_contiguous(), "rowsum: x must be contiguous with at least one dimension");
	const c10::cuda::CUDAGuard guard(x.device());
	const int64_t cols = x.size(-1);
	TORCH_CHECK(cols > 0, "rowsum: rows must not be empty");
	const int64_t rows = x.numel() / cols;
	std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 1);
	torch::Tensor y = torch::empty(shape, x.options());
	C10_CUDA_CHECK(rowsum_launch(x.data_ptr<float>(), y.data_ptr<float>(), rows, cols,
				     at::cuda::getCurrentCUDAStream().stream()));
	return y;
}

static void bind_rowsum(pybind11::module &m)
{
	m.def("rowsum", &rowsum, "y = x.sum(-1) (fp32, CUDA, contiguous)", pybind11::arg("x"));
}

REGISTER_BINDING(rowsum, bind_rowsum);
