// Test candidate with a syntax error on line 6 (nvcc reports it on line 7).
#include <cuda_agent/abi.h>

__global__ void broken(float *x)
{
	x[0] = 1.0f
}
