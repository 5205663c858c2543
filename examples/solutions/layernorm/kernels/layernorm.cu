// layernorm: y = (x - mean) / sqrt(var + eps) * weight + bias over the last dimension.
//
// Fast path (last dim d a multiple of 4, d <= 1024, 16-byte aligned pointers): one warp per row;
// the row is read once into registers (NV float4 per lane), mean and variance come from two warp
// shuffle reductions over the registers (two-pass variance, as exact as torch's), then the row is
// written once. Global traffic is the floor: one read and one write of x, no shared memory, no
// __syncthreads. Any other shape takes the generic path: one block per row, three passes over
// global memory with block reductions.
//
// params (state_dict order): ln.weight [d], ln.bias [d]. eps = 1e-5 (nn.LayerNorm's default).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr float EPS = 1e-5f;
constexpr int WARP_TPB = 256; // 8 rows per block on the fast path
constexpr int ROWS_PER_BLOCK = WARP_TPB / 32;
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

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

// Sum over the block; every thread gets the result. sh must hold 33 floats.
__device__ float block_sum(float v, float *sh)
{
	const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
	const int nw = (blockDim.x + 31) >> 5;
	v = warp_sum(v);
	__syncthreads(); // earlier readers of sh are done
	if (lane == 0)
		sh[wid] = v;
	__syncthreads();
	if (wid == 0) {
		float t = lane < nw ? sh[lane] : 0.f;
		t = warp_sum(t);
		if (lane == 0)
			sh[32] = t;
	}
	__syncthreads();
	return sh[32];
}

// One warp per row, NV float4 per lane: requires d % 4 == 0 and d / 4 <= 32 * NV.
template <int NV>
__global__ void __launch_bounds__(WARP_TPB)
	ln_warp(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
		float *__restrict__ y, int64_t rows, int d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	if (row >= rows) // uniform per warp: the whole warp leaves together
		return;
	const int d4 = d >> 2;
	const float4 *xr = reinterpret_cast<const float4 *>(x + row * d);
	float4 *yr = reinterpret_cast<float4 *>(y + row * d);
	const float4 *w4 = reinterpret_cast<const float4 *>(w);
	const float4 *b4 = reinterpret_cast<const float4 *>(b);

	float4 v[NV];
	float s = 0.f;
#pragma unroll
	for (int j = 0; j < NV; ++j) {
		const int c = lane + 32 * j;
		if (c < d4) {
			v[j] = __ldcs(xr + c);
			s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
		} else {
			v[j] = make_float4(0.f, 0.f, 0.f, 0.f);
		}
	}
	const float inv_d = 1.0f / (float)d;
	const float mean = warp_sum(s) * inv_d;
	float q = 0.f;
#pragma unroll
	for (int j = 0; j < NV; ++j) {
		const int c = lane + 32 * j;
		if (c < d4) {
			const float a = v[j].x - mean, bb = v[j].y - mean, cc = v[j].z - mean, dd = v[j].w - mean;
			q += (a * a + bb * bb) + (cc * cc + dd * dd);
		}
	}
	const float rstd = rsqrtf(warp_sum(q) * inv_d + EPS);
#pragma unroll
	for (int j = 0; j < NV; ++j) {
		const int c = lane + 32 * j;
		if (c < d4) {
			const float4 g = __ldg(w4 + c), be = __ldg(b4 + c);
			float4 o;
			o.x = (v[j].x - mean) * rstd * g.x + be.x;
			o.y = (v[j].y - mean) * rstd * g.y + be.y;
			o.z = (v[j].z - mean) * rstd * g.z + be.z;
			o.w = (v[j].w - mean) * rstd * g.w + be.w;
			__stcs(yr + c, o);
		}
	}
}

// Any d: one block per row (grid-stride over rows), three passes over global memory.
__global__ void __launch_bounds__(GEN_TPB)
	ln_generic(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b,
		   float *__restrict__ y, int64_t rows, int64_t d)
{
	__shared__ float sh[33];
	for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
		const float *xr = x + row * d;
		float *yr = y + row * d;
		float s = 0.f;
		for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
			s += xr[i];
		const float mean = block_sum(s, sh) / (float)d;
		float q = 0.f;
		for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
			const float a = xr[i] - mean;
			q += a * a;
		}
		const float rstd = rsqrtf(block_sum(q, sh) / (float)d + EPS);
		for (int64_t i = threadIdx.x; i < d; i += blockDim.x)
			yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
	}
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_params != 2 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *w = &params[0], *b = &params[1], *y = &outputs[0];
	if (!is_cuda_f32_contig(x) || !is_cuda_f32_contig(w) || !is_cuda_f32_contig(b) ||
	    !is_cuda_f32_contig(y) || !same_shape(x, y) || x->ndim < 1)
		return 2;
	const int64_t d = x->shape[x->ndim - 1];
	if (w->ndim != 1 || b->ndim != 1 || w->shape[0] != d || b->shape[0] != d)
		return 2;
	int64_t rows = 1;
	for (int i = 0; i < x->ndim - 1; ++i)
		rows *= x->shape[i];
	if (rows == 0)
		return 0;
	if (d == 0)
		return 0;

	const float *xp = data_ptr<const float>(x), *wp = data_ptr<const float>(w), *bp = data_ptr<const float>(b);
	float *yp = data_ptr<float>(y);
	const bool aligned = ((uintptr_t)xp | (uintptr_t)wp | (uintptr_t)bp | (uintptr_t)yp) % 16 == 0;
	const int64_t warp_blocks = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;

	if (aligned && d % 4 == 0 && d <= 4 * 32 * 8 && warp_blocks <= 0x7fffffff) {
		if (d <= 4 * 32 * 4)
			ln_warp<4><<<(unsigned)warp_blocks, WARP_TPB, 0, stream>>>(xp, wp, bp, yp, rows, (int)d);
		else
			ln_warp<8><<<(unsigned)warp_blocks, WARP_TPB, 0, stream>>>(xp, wp, bp, yp, rows, (int)d);
	} else {
		const unsigned blocks = (unsigned)(rows < MAX_BLOCKS ? rows : MAX_BLOCKS);
		ln_generic<<<blocks, GEN_TPB, 0, stream>>>(xp, wp, bp, yp, rows, d);
	}
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
