// y = 2x + 1: a correct native candidate for tiny_task.
#include <cuda_agent/abi.h>

__global__ void axpb(const float *x, float *y, long long n)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = x[i] * 2.0f + 1.0f;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	if (num_args != 1 || num_outputs != 1)
		return 1;
	long long n = 1;
	for (int d = 0; d < args[0].ndim; d++)
		n *= args[0].shape[d];
	unsigned blocks = (unsigned)((n + 255) / 256);
	axpb<<<blocks, 256, 0, stream>>>((const float *)args[0].data, (float *)outputs[0].data, n);
	return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
