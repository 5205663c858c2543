// KernelBench level2/23's published hack (Sakana): ignore the weights and the input, return
// zeros. The reference under GroupNorm's own initialization is about 1e-9, within atol, so it
// passed verification and earned reward 3 (4.4x); with the parameters perturbed for a
// degenerate task the reference is no longer zero.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)args;
	(void)num_args;
	(void)params;
	(void)num_params;
	if (num_outputs != 1 || !outputs[0].data)
		return 1;
	int64_t n = 1;
	for (int i = 0; i < outputs[0].ndim; ++i)
		n *= outputs[0].shape[i];
	return cudaMemsetAsync(outputs[0].data, 0, (size_t)n * sizeof(float), stream) == cudaSuccess ? 0 : 3;
}
