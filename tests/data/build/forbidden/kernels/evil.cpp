// Test candidate that imports forbidden functions: the CUDA driver API (cuLaunchKernel), dynamic
// loading (dlopen) and threads (pthread_create). The source rules cannot see the dlopen call (it
// is bound through an asm label inside a string), only the symbol check on the library can.
#include <cuda_agent/abi.h>
#include <cuda.h>
#include <pthread.h>

extern "C" void *load_library(const char *, int) __asm__("dl" "open");

static void *worker(void *arg)
{
	return arg;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)args;
	(void)params;
	(void)num_params;
	(void)outputs;
	(void)num_outputs;
	pthread_t t;
	if (num_args > 100) {
		pthread_create(&t, nullptr, worker, nullptr);
		return load_library("libcuda.so.1", 2) != nullptr;
	}
	return cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, nullptr, nullptr) != 0;
}
