// Test candidate: y = a * x + y on the device (one kernel, one launcher).
#include "axpy.h"

__global__ void axpy_kernel(int n, float a, const float *__restrict__ x, float *__restrict__ y)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = a * x[i] + y[i];
}

extern "C" int axpy_launch(int n, float a, const float *x, float *y, cudaStream_t stream)
{
	axpy_kernel<<<(n + 255) / 256, 256, 0, stream>>>(n, a, x, y);
	return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
