// CONTROL (not a fault): a plain, correct y = 2x + 1. The fault runner evaluates it after every
// fault on the same GPU and requires it to be correct with reward >= 1: a fault must end its own
// evaluation only, never the GPU, the torch bridge or the next evaluation.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256;

bool f32_cuda(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 0 || (t->ndim > 0 && !t->shape) || !t->data)
		return false;
	if (t->strides) {
		int64_t expect = 1;
		for (int i = t->ndim - 1; i >= 0; --i) {
			if (t->shape[i] != 1 && t->strides[i] != expect)
				return false;
			expect *= t->shape[i];
		}
	}
	return true;
}

int64_t numel(const DLTensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; ++i)
		n *= t->shape[i];
	return n;
}

__global__ void __launch_bounds__(TPB) affine(const float *__restrict__ x, float *__restrict__ y, int64_t n)
{
	const int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x;
	if (i < n)
		y[i] = 2.0f * x[i] + 1.0f;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1 || !f32_cuda(&args[0]) || !f32_cuda(&outputs[0]) ||
	    numel(&args[0]) != numel(&outputs[0]))
		return 1;
	const int64_t n = numel(&args[0]);
	if (n == 0)
		return 0;
	affine<<<(unsigned)((n + TPB - 1) / TPB), TPB, 0, stream>>>(static_cast<const float *>(args[0].data),
								     static_cast<float *>(outputs[0].data), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
