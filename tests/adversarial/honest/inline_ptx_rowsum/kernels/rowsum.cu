// rowsum (y = x.sum(-1)) with one warp per row, written with device inline PTX: the lane index
// is read from %laneid and the 32 partial sums are added by a butterfly of shfl.sync.bfly.b32.
// Each lane sums a strided part of its row with float4 loads (scalar loads when the row length
// is not a multiple of 4 or x is misaligned). 8 rows per 256-thread block. Inline PTX lives in
// device code only, which never reaches the host assembly: the build's host inline-asm check
// (src/build/hostasm.h) leaves it alone.
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

__device__ __forceinline__ unsigned lane_id()
{
	unsigned lane;
	asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
	return lane;
}

// v + the value of the lane whose index differs in bit `mask`, for all 32 lanes.
__device__ __forceinline__ float bfly_add(float v, unsigned mask)
{
	float other;
	asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(other) : "f"(v), "r"(mask));
	return v + other;
}

__device__ __forceinline__ float warp_sum(float v)
{
	v = bfly_add(v, 16);
	v = bfly_add(v, 8);
	v = bfly_add(v, 4);
	v = bfly_add(v, 2);
	return bfly_add(v, 1);
}

template <bool VEC>
__global__ void __launch_bounds__(TPB) rowsum(const float *__restrict__ x, float *__restrict__ y, int64_t rows,
					      int64_t d)
{
	const unsigned lane = lane_id();
	const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	if (row >= rows) // uniform per warp
		return;
	const float *xr = x + row * d;
	float s = 0.0f;
	if (VEC) {
		const float4 *xv = reinterpret_cast<const float4 *>(xr);
		for (int64_t i = lane; i < d / 4; i += 32) {
			const float4 v = __ldg(xv + i);
			s += (v.x + v.y) + (v.z + v.w);
		}
	} else {
		for (int64_t i = lane; i < d; i += 32)
			s += __ldg(xr + i);
	}
	s = warp_sum(s);
	if (lane == 0)
		y[row] = s;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim < 1 || y->ndim != x->ndim - 1)
		return 2;
	int64_t rows = 1;
	for (int i = 0; i < y->ndim; ++i) {
		if (y->shape[i] != x->shape[i])
			return 2;
		rows *= x->shape[i];
	}
	const int64_t d = x->shape[x->ndim - 1];
	if (rows == 0)
		return 0;
	const int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
	if (blocks > INT32_MAX)
		return 2;
	const float *xp = static_cast<const float *>(x->data);
	float *yp = static_cast<float *>(y->data);
	if (d % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0)
		rowsum<true><<<(unsigned)blocks, TPB, 0, stream>>>(xp, yp, rows, d);
	else
		rowsum<false><<<(unsigned)blocks, TPB, 0, stream>>>(xp, yp, rows, d);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
