// out[r] = x[r][labels[r]] with the labels stored as floats: each is converted to an index.
// Correct only because the task guarantees every label is an integer in [0, classes).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

#include "f32_tensor.h"

namespace {

__global__ void gather(const float *__restrict__ x, const float *__restrict__ labels, float *__restrict__ out,
		       int64_t rows, int64_t classes)
{
	for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
		int64_t c = (int64_t)labels[r];
		out[r] = c >= 0 && c < classes ? x[r * classes + c] : 0.0f;
	}
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 2 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *l = &args[1], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(l) || !f32_cuda(y) || x->ndim != 2 || numel(l) != x->shape[0] ||
	    numel(y) != x->shape[0])
		return 2;
	gather<<<256, 256, 0, stream>>>(static_cast<const float *>(x->data), static_cast<const float *>(l->data),
					static_cast<float *>(y->data), x->shape[0], x->shape[1]);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
