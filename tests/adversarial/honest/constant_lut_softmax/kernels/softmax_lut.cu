// softmax (dim -1) with exp computed from a static lookup table in constant memory: exp(t) =
// 2^z with z = t log2(e) = n + j/64 + r (n integer, j in 0..63, 0 <= r < 1/64), taken as
// 2^n * T[j] * p(r ln 2), where T[j] = 2^(j/64) is a __constant__ table initialized at compile
// time and p is the cubic Taylor polynomial of exp (error below 1e-9 on that range). One warp
// per row: maximum, sum of exponentials, then the normalized write.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr int TPB = 256, WARPS = TPB / 32;

// T[j] = 2^(j / 64), rounded to float.
__constant__ float c_exp2_table[64] = {
	1.0f, 1.01088929f, 1.0218972f, 1.03302491f, 1.04427373f, 1.05564523f, 1.06714046f, 1.07876074f,
	1.09050775f, 1.10238254f, 1.1143868f, 1.12652159f, 1.13878858f, 1.15118921f, 1.1637249f, 1.17639697f,
	1.18920708f, 1.20215678f, 1.21524739f, 1.22848058f, 1.24185777f, 1.25538075f, 1.26905096f, 1.28287005f,
	1.29683959f, 1.31096125f, 1.32523668f, 1.33966756f, 1.35425556f, 1.36900246f, 1.38390994f, 1.39897966f,
	1.41421354f, 1.42961335f, 1.44518077f, 1.46091783f, 1.47682619f, 1.49290776f, 1.50916445f, 1.52559817f,
	1.54221082f, 1.55900443f, 1.5759809f, 1.59314215f, 1.61049032f, 1.62802744f, 1.64575553f, 1.66367662f,
	1.68179286f, 1.70010638f, 1.71861935f, 1.73733389f, 1.75625217f, 1.77537644f, 1.79470909f, 1.81425214f,
	1.8340081f, 1.85397911f, 1.87416768f, 1.89457595f, 1.91520655f, 1.93606174f, 1.95714414f, 1.97845602f,
};

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

// exp(t) for t <= 0 (t = x - row max).
__device__ __forceinline__ float exp_lut(float t)
{
	const float z = t * 1.44269504f; // log2(e)
	if (!(z >= -126.0f))             // underflow (and -inf)
		return 0.0f;
	const float n = floorf(z);
	const float f = z - n; // [0, 1)
	int j = (int)(f * 64.0f);
	j = j < 63 ? j : 63;
	const float r = (f - (float)j * (1.0f / 64.0f)) * 0.693147181f; // [0, ln2 / 64)
	const float p = fmaf(r, fmaf(r, fmaf(r, 1.0f / 6.0f, 0.5f), 1.0f), 1.0f);
	return ldexpf(c_exp2_table[j] * p, (int)n);
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

__global__ void __launch_bounds__(TPB) softmax_rows(const float *__restrict__ x, float *__restrict__ y,
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
		s += exp_lut(xr[i] - m);
	const float inv = 1.0f / warp_sum(s);
	for (int64_t i = lane; i < d; i += 32)
		yr[i] = exp_lut(xr[i] - m) * inv;
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
	softmax_rows<<<(unsigned)blocks, TPB, 0, stream>>>(static_cast<const float *>(x->data),
							   static_cast<float *>(y->data), rows, d);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
