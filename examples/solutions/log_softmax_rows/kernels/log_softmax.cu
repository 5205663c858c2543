// log_softmax_rows: y = x - max(x) - log(sum(exp(x - max(x)))) over the last dimension.
//
// Fast path (d a multiple of 4, d <= 8192, 16-byte aligned): one block per row keeps the whole row
// in registers (NV float4 per thread), so x is read once and y written once: block max, block sum
// of exp(x - max), then write x - (max + log(sum)). Other shapes: one block per row with an online
// max/sum pass and a write pass (two reads).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr int GEN_TPB = 256;
constexpr int64_t MAX_BLOCKS = 1 << 20;

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

bool same_shape(const DLTensor *a, const DLTensor *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (int i = 0; i < a->ndim; ++i)
		if (a->shape[i] != b->shape[i])
			return false;
	return true;
}

template <typename T> T *data_ptr(const DLTensor *t)
{
	return reinterpret_cast<T *>(static_cast<char *>(t->data) + t->byte_offset);
}

struct op_sum {
	__device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
	static constexpr float identity = 0.f;
};
struct op_max {
	__device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
	static constexpr float identity = -INFINITY;
};

template <typename Op> __device__ __forceinline__ float warp_reduce(float v, Op op)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// Reduction over the block (blockDim.x a multiple of 32); every thread gets the result.
// sh must hold 33 floats. Safe to call back to back with the same sh.
template <typename Op> __device__ float block_reduce(float v, float *sh, Op op)
{
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	const int nw = blockDim.x >> 5;
	v = warp_reduce(v, op);
	__syncthreads(); // earlier readers of sh are done
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	if (wid == 0) {
		float t = lane < nw ? sh[lane] : Op::identity;
		t = warp_reduce(t, op);
		if (lane == 0)
			sh[32] = t;
	}
	__syncthreads();
	return sh[32];
}

__device__ __forceinline__ float max4(float4 v)
{
	return fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
}

// One block of TPB threads per row, NV float4 per thread: requires d % 4 == 0 and d / 4 <= TPB * NV.
template <int TPB, int NV>
__global__ void __launch_bounds__(TPB)
	log_softmax_reg(const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t d)
{
	__shared__ float sh[33];
	const int64_t d4 = d >> 2;
	for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
		const float4 *xr = reinterpret_cast<const float4 *>(x + row * d);
		float4 *yr = reinterpret_cast<float4 *>(y + row * d);
		float4 v[NV];
		float m = -INFINITY;
#pragma unroll
		for (int j = 0; j < NV; ++j) {
			const int64_t c = threadIdx.x + (int64_t)j * TPB;
			if (c < d4) {
				v[j] = __ldcs(xr + c);
				m = fmaxf(m, max4(v[j]));
			} else {
				v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
			}
		}
		m = block_reduce(m, sh, op_max());
		float s = 0.f;
#pragma unroll
		for (int j = 0; j < NV; ++j) {
			const int64_t c = threadIdx.x + (int64_t)j * TPB;
			if (c < d4)
				s += (__expf(v[j].x - m) + __expf(v[j].y - m)) + (__expf(v[j].z - m) + __expf(v[j].w - m));
		}
		s = block_reduce(s, sh, op_sum());
		const float lse = m + __logf(s);
#pragma unroll
		for (int j = 0; j < NV; ++j) {
			const int64_t c = threadIdx.x + (int64_t)j * TPB;
			if (c < d4)
				__stcs(yr + c, make_float4(v[j].x - lse, v[j].y - lse, v[j].z - lse, v[j].w - lse));
		}
	}
}

// Any d: online max and sum in one pass, then a write pass.
__global__ void __launch_bounds__(GEN_TPB)
	log_softmax_generic(const float *__restrict__ x, float *__restrict__ y, int64_t rows, int64_t d)
{
	__shared__ float sh[33];
	for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
		const float *xr = x + row * d;
		float *yr = y + row * d;
		float m = -INFINITY, s = 0.f;
		for (int64_t i = threadIdx.x; i < d; i += GEN_TPB) {
			const float v = xr[i];
			if (v > m) {
				s = s * __expf(m - v) + 1.f;
				m = v;
			} else if (!(v == -INFINITY)) { // -inf adds 0 (and -inf - -inf would be NaN)
				s += __expf(v - m);
			}
		}
		const float bm = block_reduce(m, sh, op_max());
		const float scaled = m == -INFINITY ? 0.f : s * __expf(m - bm);
		const float lse = bm + __logf(block_reduce(scaled, sh, op_sum()));
		for (int64_t i = threadIdx.x; i < d; i += GEN_TPB)
			yr[i] = xr[i] - lse;
	}
}

unsigned row_blocks(int64_t rows)
{
	return (unsigned)(rows < MAX_BLOCKS ? rows : MAX_BLOCKS);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!is_cuda_f32_contig(x) || !is_cuda_f32_contig(y) || !same_shape(x, y) || x->ndim < 1)
		return 2;
	const int64_t d = x->shape[x->ndim - 1];
	int64_t rows = 1;
	for (int i = 0; i < x->ndim - 1; ++i)
		rows *= x->shape[i];
	if (rows == 0 || d == 0)
		return 0;
	const float *xp = data_ptr<const float>(x);
	float *yp = data_ptr<float>(y);
	const bool vec = d % 4 == 0 && ((uintptr_t)xp | (uintptr_t)yp) % 16 == 0;
	const unsigned blocks = row_blocks(rows);
	if (vec && d / 4 <= 128 * 8)
		log_softmax_reg<128, 8><<<blocks, 128, 0, stream>>>(xp, yp, rows, d);
	else if (vec && d / 4 <= 256 * 8)
		log_softmax_reg<256, 8><<<blocks, 256, 0, stream>>>(xp, yp, rows, d);
	else
		log_softmax_generic<<<blocks, GEN_TPB, 0, stream>>>(xp, yp, rows, d);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
