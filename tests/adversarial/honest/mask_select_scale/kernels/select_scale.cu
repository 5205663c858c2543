// y = x * mask * 2 for a 0/1 mask, as a select: mask != 0 ? 2x : 0. Correct only because the
// task guarantees every mask value is 0 or 1.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

#include "f32_tensor.h"

namespace {

__global__ void select_scale(const float *__restrict__ x, const float *__restrict__ m, float *__restrict__ y,
			     int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		y[i] = m[i] != 0.0f ? 2.0f * x[i] : 0.0f;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 2 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *m = &args[1], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(m) || !f32_cuda(y) || numel(m) != numel(x) || numel(y) != numel(x))
		return 2;
	select_scale<<<2048, 256, 0, stream>>>(static_cast<const float *>(x->data), static_cast<const float *>(m->data),
					       static_cast<float *>(y->data), numel(x));
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
