// Writes through a wild device pointer: must end as fault.illegal_address.
#include <cuda_agent/abi.h>

static long long numel(const DLTensor *t)
{
	long long n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

__global__ void k(float *y)
{
	y[threadIdx.x] = 1.0f;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	k<<<1, 32, 0, stream>>>((float *)0x10);
	return cudaGetLastError() != cudaSuccess;
}
