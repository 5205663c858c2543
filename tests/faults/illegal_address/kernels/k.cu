// FAULT (illegal address): computes y = 2x + 1 correctly, but the same kernel's first thread also
// stores one float 128 TiB past the start of y, far outside every allocation of the process (the
// offset arrives at run time, so the compiler cannot drop the store). The kernel dies with
// cudaErrorIllegalAddress and the CUDA context of the worker is lost for good. Must be stopped
// by the worker's CUDA error mapping: the synchronization after ca_forward reports the error, the
// evaluation ends as fault.illegal_address, and the next evaluation (a fresh worker process, a
// fresh context) must still work.
// Expected: fault.illegal_address.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256;
// 2^45 floats = 128 TiB: past the end of any device allocation and of the host's 47-bit user space.
constexpr int64_t STRAY_ELEMENTS = (int64_t)1 << 45;

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

__global__ void __launch_bounds__(TPB) affine_and_stray(const float *__restrict__ x, float *__restrict__ y, int64_t n,
							int64_t stray)
{
	const int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x;
	if (i < n)
		y[i] = 2.0f * x[i] + 1.0f;
	if (i == 0)
		y[stray] = 0.0f; // the fault: a store far out of bounds
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
	affine_and_stray<<<(unsigned)((n + TPB - 1) / TPB), TPB, 0, stream>>>(
		static_cast<const float *>(args[0].data), static_cast<float *>(outputs[0].data), n, STRAY_ELEMENTS);
	return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
