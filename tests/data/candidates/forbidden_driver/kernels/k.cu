// Calls the CUDA driver API, which native candidates may not use.
#include <cuda.h>
#include <cuda_agent/abi.h>

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params,
			  int num_params, DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	CUdevice dev;
	return (int)cuDeviceGet(&dev, 0);
}
