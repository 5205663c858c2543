// CHEAT (input mutation): computes the softmax in place in the input buffer (one warp per row,
// as if x were scratch space it owns) and then copies x to y. The output is right, but the
// harness's input is destroyed; a harness that reuses its inputs (the next trial, the
// baselines, the timing rotation) would be fooled. Caught today by the input checksums.
// Expected: verify.input_modified.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr int TPB = 256, WARPS = TPB / 32;

bool f32_cuda(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 1 || !t->shape || !t->data)
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

// The task's tensors: x and y of the same shape [..., d]. Sets rows and d.
bool softmax_shapes(const DLTensor *args, int num_args, int num_params, DLTensor *outputs, int num_outputs,
		    int64_t *rows, int64_t *d)
{
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return false;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim != y->ndim)
		return false;
	int64_t total = 1;
	for (int i = 0; i < x->ndim; ++i) {
		if (x->shape[i] != y->shape[i])
			return false;
		total *= x->shape[i];
	}
	*d = x->shape[x->ndim - 1];
	*rows = *d > 0 ? total / *d : 0;
	return *rows > 0 && (*rows + WARPS - 1) / WARPS <= INT32_MAX;
}

__global__ void __launch_bounds__(TPB) softmax_in_place(float *x, int64_t rows, int64_t d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	float *xr = x + row * d;
	float m = -INFINITY;
	for (int64_t i = lane; i < d; i += 32)
		m = fmaxf(m, xr[i]);
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
	float s = 0.0f;
	for (int64_t i = lane; i < d; i += 32) {
		const float e = expf(xr[i] - m);
		xr[i] = e;
		s += e;
	}
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	const float inv = 1.0f / s;
	for (int64_t i = lane; i < d; i += 32)
		xr[i] *= inv;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	int64_t rows, d;
	if (!softmax_shapes(args, num_args, num_params, outputs, num_outputs, &rows, &d))
		return 1;
	float *x = static_cast<float *>(args[0].data); // casting away the harness's const
	softmax_in_place<<<(unsigned)((rows + WARPS - 1) / WARPS), TPB, 0, stream>>>(x, rows, d);
	if (cudaGetLastError() != cudaSuccess)
		return 2;
	return cudaMemcpyAsync(outputs[0].data, x, (size_t)(rows * d) * sizeof(float), cudaMemcpyDeviceToDevice,
			       stream) == cudaSuccess
		       ? 0
		       : 3;
}
