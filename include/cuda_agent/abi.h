/* cuda_agent/abi.h: the native candidate ABI (see docs/abi.md).
 *
 * A native candidate is one shared library, built by nvcc alone from the sources in kernels/, that exports
 * these functions with C linkage. Tensors are DLPack DLTensors (dlpack/dlpack.h): data points to
 * device memory (device_type kDLCUDA) except for Python scalars, which arrive as 0-d tensors on
 * the CPU (kDLCPU). Every tensor is compact row-major; strides are given explicitly anyway.
 * bool tensors carry type code CA_DLPACK_BOOL (kDLBool of DLPack >= 0.8) with 8 bits. */
#ifndef CUDA_AGENT_ABI_H
#define CUDA_AGENT_ABI_H

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#define CA_DLPACK_BOOL 6

#ifdef __cplusplus
extern "C" {
#endif

/* Required. args: forward() arguments in order. params: parameters and buffers in state_dict
 * order. outputs: the flattened return value of forward(), allocated by the harness with the
 * reference's shapes and dtypes and filled with NaN (or 0xFF bytes for integers) before every
 * call. Enqueue all work on `stream` (other streams must join it before returning). Inputs and
 * params must not be modified. Return 0, or nonzero on error. */
int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
	       DLTensor *outputs, int num_outputs, cudaStream_t stream);

/* Optional, untimed: called after load and whenever params change (before the first
 * ca_forward with those params). May allocate, pack weights, create handles. Return 0 or nonzero. */
int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream);

/* Optional: called once before the library is unloaded. */
void ca_teardown(void);

#ifdef __cplusplus
}
#endif

#endif
