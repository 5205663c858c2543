// cuda_extension.linear_bias_relu(x, weight, b1, b2) = relu(x @ weight^T + b1 + b2):
// cublasSgemm on PyTorch's cuBLAS handle and current stream (plain fp32, TF32 off), then the
// fused bias + bias + ReLU epilogue of kernels/linear_bias_relu.cu over the GEMM's output.
//
// Layouts: x is (M, K) row-major, weight is nn.Linear's (N, K) row-major, y is (M, N)
// row-major. cuBLAS is column-major, where y's memory is the N x M matrix Y^T (ld N), x's is
// X^T (K x M, ld K) and weight's is W^T (K x N, ld K). Y^T = W X^T, so the call is
// C (N x M) = op(A) B with A = weight's memory transposed (CUBLAS_OP_T, lda K) and
// B = x's memory as is (CUBLAS_OP_N, ldb K).
#include <climits>
#include <cstdint>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/Exceptions.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <cublas_v2.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/types.h>

#include "../binding_registry.h"

cudaError_t bias2_relu_launch(float *y, const float *b1, const float *b2, int64_t rows,
			      int64_t cols, cudaStream_t stream);

static void check_operand(const torch::Tensor &t, const char *name, const torch::Tensor &x)
{
	TORCH_CHECK(t.is_cuda(), "linear_bias_relu: ", name, " must be a CUDA tensor");
	TORCH_CHECK(t.device() == x.device(), "linear_bias_relu: ", name,
		    " must be on the device of x");
	TORCH_CHECK(t.scalar_type() == torch::kFloat, "linear_bias_relu: ", name,
		    " must be float32");
	TORCH_CHECK(t.is_contiguous(), "linear_bias_relu: ", name, " must be contiguous");
}

static torch::Tensor linear_bias_relu(const torch::Tensor &x, const torch::Tensor &weight,
				      const torch::Tensor &b1, const torch::Tensor &b2)
{
	check_operand(x, "x", x);
	check_operand(weight, "weight", x);
	check_operand(b1, "linear.bias", x);
	check_operand(b2, "bias", x);
	TORCH_CHECK(x.dim() == 2, "linear_bias_relu: x must be 2-D (batch, in_features)");
	TORCH_CHECK(weight.dim() == 2 && weight.size(1) == x.size(1),
		    "linear_bias_relu: weight must be (out_features, in_features), got ",
		    weight.sizes(), " for x ", x.sizes());
	const int64_t M = x.size(0), K = x.size(1), N = weight.size(0);
	TORCH_CHECK(b1.numel() == N && b2.numel() == N, "linear_bias_relu: both biases must have ",
		    N, " elements, got ", b1.numel(), " and ", b2.numel());
	TORCH_CHECK(M <= INT_MAX && N <= INT_MAX && K <= INT_MAX,
		    "linear_bias_relu: dimensions must fit cuBLAS's int");

	const c10::cuda::CUDAGuard guard(x.device());
	torch::Tensor y = torch::empty({M, N}, x.options());
	if (M == 0 || N == 0)
		return y;
	cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();

	if (K == 0) {
		// No products: y = 0 before the epilogue (cuBLAS needs lda >= 1).
		C10_CUDA_CHECK(cudaMemsetAsync(y.data_ptr<float>(), 0,
					       static_cast<size_t>(M * N) * sizeof(float), stream));
	} else {
		cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
		TORCH_CUDABLAS_CHECK(cublasSetStream(handle, stream));
		// Plain fp32 FMA math: no TF32 tensor cores, as the reference (TF32 off).
		TORCH_CUDABLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
		const float one = 1.0f, zero = 0.0f;
		const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
		TORCH_CUDABLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &one,
						 weight.data_ptr<float>(), k, x.data_ptr<float>(), k,
						 &zero, y.data_ptr<float>(), m));
	}
	C10_CUDA_CHECK(bias2_relu_launch(y.data_ptr<float>(), b1.data_ptr<float>(),
					 b2.data_ptr<float>(), M, N, stream));
	return y;
}

static void bind_linear_bias_relu(pybind11::module &m)
{
	m.def("linear_bias_relu", &linear_bias_relu,
	      "relu(x @ weight^T + b1 + b2): cuBLAS fp32 GEMM + fused epilogue",
	      pybind11::arg("x"), pybind11::arg("weight"), pybind11::arg("b1"),
	      pybind11::arg("b2"));
}

REGISTER_BINDING(linear_bias_relu, bind_linear_bias_relu);
