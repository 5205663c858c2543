// CHEAT (timer interposition, CUDA events): defines and exports cudaEventRecord and
// cudaEventElapsedTime itself (in host-only C++, beside the honest kernel in k.cu), so that a
// harness resolving those names through this library (symbol interposition, a flat namespace,
// LD_PRELOAD-like loading) would record nothing and read back 1 microsecond for every call.
// The symbol check forbids a candidate to define functions of the CUDA runtime.
// Expected: build.forbidden_symbol.
#include <cuda_runtime_api.h>

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	(void)event;
	(void)stream;
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	(void)start;
	(void)end;
	if (ms)
		*ms = 0.001f;
	return cudaSuccess;
}
