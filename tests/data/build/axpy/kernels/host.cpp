// Test candidate: the ABI entry point (host code only).
#include <cuda_agent/abi.h>
#include <cstdio>

#include "axpy.h"

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	if (num_args < 1 || num_outputs < 1) {
		fprintf(stderr, "axpy: expected one argument and one output\n");
		return 1;
	}
	int n = (int)args[0].shape[0];
	if (cudaMemcpyAsync(outputs[0].data, args[0].data, sizeof(float) * (size_t)n,
			    cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
		return 1;
	return axpy_launch(n, 2.0f, (const float *)args[0].data, (float *)outputs[0].data, stream);
}
