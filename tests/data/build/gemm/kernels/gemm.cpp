// Test candidate: C = A @ B with cuBLAS (row-major, as C^T = B^T A^T in column-major).
#include <cuda_agent/abi.h>
#include <cublas_v2.h>

static cublasHandle_t handle;

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	(void)stream;
	return handle || cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS ? 0 : 1;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	if (num_args != 2 || num_outputs != 1 || (!handle && ca_setup(nullptr, 0, stream)))
		return 1;
	int m = (int)args[0].shape[0], k = (int)args[0].shape[1], n = (int)args[1].shape[1];
	const float one = 1.0f, zero = 0.0f;
	cublasSetStream(handle, stream);
	return cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
			   (const float *)args[1].data, n, (const float *)args[0].data, k, &zero,
			   (float *)outputs[0].data, n) != CUBLAS_STATUS_SUCCESS;
}

extern "C" void ca_teardown(void)
{
	if (handle)
		cublasDestroy(handle);
	handle = nullptr;
}
