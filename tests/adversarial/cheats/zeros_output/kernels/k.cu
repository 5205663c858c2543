// CHEAT (constant output): fills y with zeros (cudaMemsetAsync) and launches nothing: the mean
// of the row sums is 0, so a harness that compared means or used a loose absolute tolerance
// would accept it. Expected: verify.mismatch.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256, ROWS_PER_BLOCK = TPB / 32;

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

// The task's tensors: x [..., d], y [...]. Sets rows and d; returns false when they do not fit.
bool rowsum_shapes(const DLTensor *args, int num_args, int num_params, DLTensor *outputs, int num_outputs,
		   int64_t *rows, int64_t *d)
{
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return false;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim < 1 || y->ndim != x->ndim - 1)
		return false;
	*rows = 1;
	for (int i = 0; i < y->ndim; ++i) {
		if (y->shape[i] != x->shape[i])
			return false;
		*rows *= x->shape[i];
	}
	*d = x->shape[x->ndim - 1];
	return *rows > 0 && (*rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK <= INT32_MAX;
}

// One warp per row, rows [0, rows).
__global__ void __launch_bounds__(TPB) rowsum(const float *__restrict__ x, float *__restrict__ y, int64_t rows,
					      int64_t d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	const float *xr = x + row * d;
	float s = 0.0f;
	for (int64_t i = lane; i < d; i += 32)
		s += xr[i];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if (lane == 0)
		y[row] = s;
}

cudaError_t launch_rowsum(const float *x, float *y, int64_t rows, int64_t d, cudaStream_t s)
{
	rowsum<<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), TPB, 0, s>>>(x, y, rows, d);
	return cudaGetLastError();
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	int64_t rows, d;
	if (!rowsum_shapes(args, num_args, num_params, outputs, num_outputs, &rows, &d))
		return 1;
	return cudaMemsetAsync(outputs[0].data, 0, (size_t)rows * sizeof(float), stream) == cudaSuccess ? 0 : 2;
}
