// The PyTorch side of kernels/axpby.cu: checks the tensors, allocates the output, launches on
// PyTorch's current stream, and registers `cuda_extension.axpby(x, y, alpha, beta)`.
#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

cudaError_t axpby_launch(const float *x, const float *y, float *out, float alpha, float beta,
			 int64_t n, cudaStream_t stream);

static torch::Tensor axpby(const torch::Tensor &x, const torch::Tensor &y, double alpha,
			   double beta)
{
	TORCH_CHECK(x.is_cuda() && y.is_cuda(), "axpby: x and y must be CUDA tensors");
	TORCH_CHECK(x.device() == y.device(), "axpby: x and y must be on the same device");
	TORCH_CHECK(x.scalar_type() == torch::kFloat && y.scalar_type() == torch::kFloat,
		    "axpby: x and y must be float32");
	TORCH_CHECK(x.is_contiguous() && y.is_contiguous(), "axpby: x and y must be contiguous");
	TORCH_CHECK(x.sizes() == y.sizes(), "axpby: x and y must have the same shape, got ",
		    x.sizes(), " and ", y.sizes());

	const c10::cuda::CUDAGuard guard(x.device());
	torch::Tensor out = torch::empty_like(x);
	C10_CUDA_CHECK(axpby_launch(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(),
				    static_cast<float>(alpha), static_cast<float>(beta), x.numel(),
				    at::cuda::getCurrentCUDAStream().stream()));
	return out;
}

static void bind_axpby(pybind11::module &m)
{
	m.def("axpby", &axpby, "out = alpha * x + beta * y (fp32, CUDA, contiguous, same shape)",
	      pybind11::arg("x"), pybind11::arg("y"), pybind11::arg("alpha"), pybind11::arg("beta"));
}

REGISTER_BINDING(axpby, bind_axpby);
