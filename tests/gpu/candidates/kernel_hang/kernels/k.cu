// Spins forever on the GPU: the watchdog must kill the worker (reason timeout).
#include <cuda_agent/abi.h>

static long long numel(const DLTensor *t)
{
	long long n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

__device__ int never_set;

__global__ void spin(void)
{
	while (*(volatile int *)&never_set == 0) {
	}
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	spin<<<1, 1, 0, stream>>>();
	return 0;
}
