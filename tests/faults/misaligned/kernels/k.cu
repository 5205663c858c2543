// FAULT (misaligned address): computes y = 2x + 1 correctly, and every thread also reads x as
// float4 starting one float (4 bytes) after the start of x: a 16-byte vector load from an address
// that is 4 bytes off its alignment (the harness's buffers are at least 256-byte aligned), though
// inside the allocation. The loaded value only decides a store that never happens for real data,
// so the compiler must keep the load. The kernel dies with cudaErrorMisalignedAddress. Must be
// stopped by the worker's CUDA error mapping (fault.misaligned_address); the next evaluation must
// still work.
// Expected: fault.misaligned_address.
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

__global__ void __launch_bounds__(TPB) affine_misaligned(const float *__restrict__ x, float *__restrict__ y, int64_t n)
{
	const int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x;
	if (i >= n)
		return;
	y[i] = 2.0f * x[i] + 1.0f;
	// The fault: x + 1 is only 4-byte aligned, a float4 load needs 16. Vector i covers floats
	// 4i + 1 .. 4i + 4, inside x for 4i + 4 < n.
	const float4 *shifted = reinterpret_cast<const float4 *>(x + 1);
	if (4 * i + 4 < n) {
		const float4 v = shifted[i];
		if (__float_as_uint(v.x) == 0x7fbadbadu && __float_as_uint(v.w) == 0x7fbadbadu)
			y[i] = v.y; // a NaN bit pattern that no real input holds
	}
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
	affine_misaligned<<<(unsigned)((n + TPB - 1) / TPB), TPB, 0, stream>>>(static_cast<const float *>(args[0].data),
									       static_cast<float *>(outputs[0].data), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
