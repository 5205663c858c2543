// kernels.cu: the worker's own device code; the contract is in kernels.h. Kernels are
// extern "C" so their names keep the ca_worker_ prefix unmangled (the profiler filters on it).

#include "worker/kernels.h"

#include <cuda_runtime.h>

extern "C" __global__ void ca_worker_empty(void) {}
extern "C" __global__ void ca_worker_audit_marker(void) {}

extern "C" cudaError_t ca_launch_empty(cudaStream_t stream)
{
	ca_worker_empty<<<1, 1, 0, stream>>>();
	return cudaGetLastError();
}

extern "C" cudaError_t ca_launch_audit_marker(cudaStream_t stream)
{
	ca_worker_audit_marker<<<1, 1, 0, stream>>>();
	return cudaGetLastError();
}
