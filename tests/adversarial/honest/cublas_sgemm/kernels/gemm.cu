// gemm (y = x @ W^T) with cublasSgemm: the handle is created in ca_setup, the stream is set on
// every call (the harness may pass a different stream). Plain fp32 math (CUBLAS_DEFAULT_MATH:
// no TF32), like the reference.
//
// Row-major y (M x N) is column-major y^T (N x M): y^T = W x^T, where the row-major W (N x K) is
// column-major W^T (K x N, ld K) used transposed, and the row-major x (M x K) is column-major
// x^T (K x M, ld K).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

cublasHandle_t handle;

bool f32_cuda(const DLTensor *t, int ndim)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim != ndim || !t->shape || !t->data)
		return false;
	if (t->strides) {
		int64_t expect = 1;
		for (int i = t->ndim - 1; i >= 0; --i) {
			if (t->shape[i] != 1 && t->strides[i] != expect)
				return false;
			expect *= t->shape[i];
		}
	}
	return true;
}

bool fits_int(int64_t v)
{
	return v > 0 && v <= INT32_MAX;
}

int ensure_handle(void)
{
	if (handle)
		return 0;
	if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
		handle = nullptr;
		return 1;
	}
	if (cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
		return 1;
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)stream;
	if (num_params != 1 || !f32_cuda(&params[0], 2))
		return 1;
	return ensure_handle() == 0 ? 0 : 2;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_params != 1 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *w = &params[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !f32_cuda(w, 2) || !f32_cuda(y, 2))
		return 2;
	const int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
	if (w->shape[1] != k || y->shape[0] != m || y->shape[1] != n || !fits_int(m) || !fits_int(n) ||
	    !fits_int(k))
		return 2;
	if (ensure_handle() != 0)
		return 3;
	const float one = 1.0f, zero = 0.0f;
	if (cublasSetStream(handle, stream) != CUBLAS_STATUS_SUCCESS)
		return 4;
	if (cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, (int)n, (int)m, (int)k, &one,
			static_cast<const float *>(w->data), (int)k, static_cast<const float *>(x->data), (int)k,
			&zero, static_cast<float *>(y->data), (int)n) != CUBLAS_STATUS_SUCCESS)
		return 5;
	return 0;
}

extern "C" void ca_teardown(void)
{
	if (handle)
		cublasDestroy(handle);
	handle = nullptr;
}
