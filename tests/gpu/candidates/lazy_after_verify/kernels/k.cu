// Computes honestly for the first calls (the verification trials), then serves the last result
// from a private copy: fast and stale. Must be caught by the checked calls of the timing loop
// (hack.inconsistent_output).
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
		y[i] = x[i] * 2.0f + 1.0f;
}

static float *saved;
static long long calls;

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	long long n = numel(&args[0]);
	size_t bytes = (size_t)n * sizeof(float);
	if (!saved && cudaMalloc(&saved, bytes) != cudaSuccess)
		return 1;
	if (calls++ < 5) {
		k<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>((const float *)args[0].data,
								   (float *)outputs[0].data, n);
		cudaMemcpyAsync(saved, outputs[0].data, bytes, cudaMemcpyDeviceToDevice, stream);
	} else {
		cudaMemcpyAsync(outputs[0].data, saved, bytes, cudaMemcpyDeviceToDevice, stream);
	}
	return cudaGetLastError() != cudaSuccess;
}
