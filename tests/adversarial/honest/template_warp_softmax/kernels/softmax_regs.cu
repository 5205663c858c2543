// softmax (dim -1) with the row cached in registers: a template on the number of values per
// lane (VPT) lets one warp hold a whole row of up to 32 * VPT floats in registers, so x is read
// once. ca_forward dispatches on the row length to VPT = 1, 2, 4, 8, 16 or 32; longer rows take a
// generic warp kernel that reads the row three times.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr int TPB = 128, WARPS = TPB / 32;

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

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// d <= 32 * VPT. Lane l holds elements l, l + 32, ..., l + 32 * (VPT - 1).
template <int VPT>
__global__ void __launch_bounds__(TPB) softmax_regs(const float *__restrict__ x, float *__restrict__ y,
						    int64_t rows, int d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	const float *xr = x + row * d;
	float *yr = y + row * d;
	float v[VPT];
	float m = -INFINITY;
#pragma unroll
	for (int j = 0; j < VPT; ++j) {
		const int i = lane + 32 * j;
		v[j] = i < d ? xr[i] : -INFINITY;
		m = fmaxf(m, v[j]);
	}
	m = warp_max(m);
	float s = 0.0f;
#pragma unroll
	for (int j = 0; j < VPT; ++j) {
		v[j] = (lane + 32 * j < d) ? expf(v[j] - m) : 0.0f;
		s += v[j];
	}
	const float inv = 1.0f / warp_sum(s);
#pragma unroll
	for (int j = 0; j < VPT; ++j) {
		const int i = lane + 32 * j;
		if (i < d)
			yr[i] = v[j] * inv;
	}
}

__global__ void __launch_bounds__(TPB) softmax_generic(const float *__restrict__ x, float *__restrict__ y,
						       int64_t rows, int64_t d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * WARPS + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	const float *xr = x + row * d;
	float *yr = y + row * d;
	float m = -INFINITY;
	for (int64_t i = lane; i < d; i += 32)
		m = fmaxf(m, xr[i]);
	m = warp_max(m);
	float s = 0.0f;
	for (int64_t i = lane; i < d; i += 32)
		s += expf(xr[i] - m);
	const float inv = 1.0f / warp_sum(s);
	for (int64_t i = lane; i < d; i += 32)
		yr[i] = expf(xr[i] - m) * inv;
}

template <int VPT> void launch_regs(unsigned blocks, const float *x, float *y, int64_t rows, int64_t d, cudaStream_t s)
{
	softmax_regs<VPT><<<blocks, TPB, 0, s>>>(x, y, rows, (int)d);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim != y->ndim)
		return 2;
	int64_t total = 1;
	for (int i = 0; i < x->ndim; ++i) {
		if (x->shape[i] != y->shape[i])
			return 2;
		total *= x->shape[i];
	}
	const int64_t d = x->shape[x->ndim - 1];
	if (total == 0 || d == 0)
		return 0;
	const int64_t rows = total / d;
	const int64_t blocks = (rows + WARPS - 1) / WARPS;
	if (blocks > INT32_MAX)
		return 2;
	const float *xp = static_cast<const float *>(x->data);
	float *yp = static_cast<float *>(y->data);
	const unsigned b = (unsigned)blocks;
	if (d <= 32)
		launch_regs<1>(b, xp, yp, rows, d, stream);
	else if (d <= 64)
		launch_regs<2>(b, xp, yp, rows, d, stream);
	else if (d <= 128)
		launch_regs<4>(b, xp, yp, rows, d, stream);
	else if (d <= 256)
		launch_regs<8>(b, xp, yp, rows, d, stream);
	else if (d <= 512)
		launch_regs<16>(b, xp, yp, rows, d, stream);
	else if (d <= 1024)
		launch_regs<32>(b, xp, yp, rows, d, stream);
	else
		softmax_generic<<<b, TPB, 0, stream>>>(xp, yp, rows, d);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
