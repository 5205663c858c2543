// Dereferences NULL on the host: the worker process dies; must end as fault.crash.
#include <cuda_agent/abi.h>

static long long numel(const DLTensor *t)
{
	long long n = 1;
	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	volatile int *p = (volatile int *)(args[0].ndim > 100 ? 1 : 0);
	return *p;
}
