// two_outputs: (x.sum(-1), x.amax(-1)) in one pass over x.
//
// One warp per row: each lane strides through the row in float4 steps with 4 independent loads in
// flight, keeping a running sum and max; two warp shuffle reductions finish the row and lane 0
// writes both outputs. x is read exactly once (eager reads it twice: one kernel per output).
// amax propagates NaN like torch. Rows whose length is not a multiple of 4, or a misaligned x,
// take the scalar-load variant of the same kernel.
//
// outputs.0: sums [rows], outputs.1: maxima [rows] (rows = product of the leading dims).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr int TPB = 256;
constexpr int ROWS_PER_BLOCK = TPB / 32;

bool is_cuda_f32_contig(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 0 || (t->ndim > 0 && !t->shape))
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

template <typename T> T *data_ptr(const DLTensor *t)
{
	return reinterpret_cast<T *>(static_cast<char *>(t->data) + t->byte_offset);
}

// max that propagates NaN (torch.amax does): one max.NaN instruction on sm_80 and newer.
__device__ __forceinline__ float nan_max(float a, float b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
	float r;
	asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
	return r;
#else
	return (a != a || a > b) ? a : b;
#endif
}

__device__ __forceinline__ void warp_reduce(float &s, float &m)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1) {
		s += __shfl_xor_sync(0xffffffffu, s, o);
		m = nan_max(m, __shfl_xor_sync(0xffffffffu, m, o));
	}
}

__device__ __forceinline__ void acc4(const float4 v, float &s, float &m)
{
	s += (v.x + v.y) + (v.z + v.w);
	m = nan_max(m, nan_max(nan_max(v.x, v.y), nan_max(v.z, v.w)));
}

// VEC: rows are d4 float4 long (d % 4 == 0, 16-byte aligned x); otherwise d floats, scalar loads.
template <bool VEC>
__global__ void __launch_bounds__(TPB) sum_amax(const float *__restrict__ x, float *__restrict__ out_sum,
						float *__restrict__ out_max, int64_t rows, int64_t d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	if (row >= rows) // uniform per warp
		return;
	const float *xr = x + row * d;
	float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
	float m0 = -INFINITY, m1 = -INFINITY, m2 = -INFINITY, m3 = -INFINITY;
	if (VEC) {
		const float4 *xv = reinterpret_cast<const float4 *>(xr);
		const int64_t d4 = d >> 2;
		int64_t c = lane;
		for (; c + 96 < d4; c += 128) {
			const float4 a = __ldcs(xv + c), b = __ldcs(xv + c + 32), e = __ldcs(xv + c + 64),
				     f = __ldcs(xv + c + 96);
			acc4(a, s0, m0);
			acc4(b, s1, m1);
			acc4(e, s2, m2);
			acc4(f, s3, m3);
		}
		for (; c < d4; c += 32)
			acc4(__ldcs(xv + c), s0, m0);
	} else {
		int64_t c = lane;
		for (; c + 96 < d; c += 128) {
			const float a = xr[c], b = xr[c + 32], e = xr[c + 64], f = xr[c + 96];
			s0 += a;
			s1 += b;
			s2 += e;
			s3 += f;
			m0 = nan_max(m0, a);
			m1 = nan_max(m1, b);
			m2 = nan_max(m2, e);
			m3 = nan_max(m3, f);
		}
		for (; c < d; c += 32) {
			s0 += xr[c];
			m0 = nan_max(m0, xr[c]);
		}
	}
	float s = (s0 + s1) + (s2 + s3);
	float m = nan_max(nan_max(m0, m1), nan_max(m2, m3));
	warp_reduce(s, m);
	if (lane == 0) {
		out_sum[row] = s;
		out_max[row] = m;
	}
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 2)
		return 1;
	const DLTensor *x = &args[0], *os = &outputs[0], *om = &outputs[1];
	if (!is_cuda_f32_contig(x) || !is_cuda_f32_contig(os) || !is_cuda_f32_contig(om) || x->ndim < 1 ||
	    os->ndim != x->ndim - 1 || om->ndim != x->ndim - 1)
		return 2;
	int64_t rows = 1;
	for (int i = 0; i < x->ndim - 1; ++i) {
		if (os->shape[i] != x->shape[i] || om->shape[i] != x->shape[i])
			return 2;
		rows *= x->shape[i];
	}
	const int64_t d = x->shape[x->ndim - 1];
	if (rows == 0)
		return 0;
	if (d == 0) // torch.amax over an empty dimension raises
		return 2;
	const int64_t blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
	if (blocks > 0x7fffffff)
		return 2;
	const float *xp = data_ptr<const float>(x);
	float *sp = data_ptr<float>(os), *mp = data_ptr<float>(om);
	if (d % 4 == 0 && (uintptr_t)xp % 16 == 0)
		sum_amax<true><<<(unsigned)blocks, TPB, 0, stream>>>(xp, sp, mp, rows, d);
	else
		sum_amax<false><<<(unsigned)blocks, TPB, 0, stream>>>(xp, sp, mp, rows, d);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
