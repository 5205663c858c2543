// Off by 0.1 everywhere: must fail verification with max abs err about 0.1 (tiny_task: 2x + 1).
#include <cuda_agent/abi.h>

static long long numel(const DLTensor *t)
{
	long long n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

__global__ void k(const float *x, float *y, long long n)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = x[i] * 2.0f + 1.1f;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	long long n = numel(&args[0]);
	k<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>((const float *)args[0].data,
							   (float *)outputs[0].data, n);
	return cudaGetLastError() != cudaSuccess;
}
