// kernels.cu: the worker's own device code; the contract is in kernels.h.
// Kernels are extern "C" so their names keep the ca_worker_ prefix unmangled (the profiler
// filters on it). Grid-stride loops with size_t indices: any tensor size works.

#include "worker/kernels.h"

#include <cstring>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace {

constexpr unsigned kThreads = 256;
constexpr size_t kMaxBlocks = 8192;

unsigned blocks_for(size_t n)
{
	size_t b = (n + kThreads - 1) / kThreads;
	if (b > kMaxBlocks)
		b = kMaxBlocks;
	return b ? (unsigned)b : 1u;
}

__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

__host__ __device__ __forceinline__ uint64_t element_hash(uint64_t seed, size_t i)
{
	return mix64(seed ^ mix64((uint64_t)i + 0x9e3779b97f4a7c15ull));
}

__host__ __device__ __forceinline__ float bits_to_float(uint32_t b)
{
	float f;
	memcpy(&f, &b, 4);
	return f;
}

__host__ __device__ __forceinline__ uint32_t float_to_bits(float f)
{
	uint32_t b;
	memcpy(&b, &f, 4);
	return b;
}

// bf16 is the top half of a float: adding 16 random bits below the cut and truncating rounds
// up (in magnitude) with probability (dropped bits) / 2^16: unbiased stochastic rounding.
// Infinities, NaN and products that overflow keep their value.
__host__ __device__ __forceinline__ uint16_t perturb_bf16(uint16_t b, float f, uint64_t h)
{
	if ((b & 0x7f80u) == 0x7f80u)
		return b;
	float y = bits_to_float((uint32_t)b << 16) * f;
	uint32_t yb = float_to_bits(y);
	if ((yb & 0x7f800000u) == 0x7f800000u)
		return b;
	uint32_t rounded = (yb + (uint32_t)(h & 0xffffu)) >> 16;
	if ((rounded & 0x7f80u) == 0x7f80u)
		rounded = yb >> 16; // rounding up would overflow: truncate instead
	return (uint16_t)rounded;
}

// f16: round toward zero, then step one ulp away from zero with probability equal to the
// fraction of an ulp that was dropped.
__host__ __device__ __forceinline__ uint16_t perturb_f16(uint16_t b, float f, uint64_t h)
{
	if ((b & 0x7c00u) == 0x7c00u)
		return b; // inf or NaN
	float y = __half2float(__ushort_as_half(b)) * f;
	__half lo = __float2half_rz(y);
	float lof = __half2float(lo);
	unsigned short lb = __half_as_ushort(lo);
	if ((lb & 0x7c00u) == 0x7c00u)
		return b;
	if (lof == y)
		return lb;
	unsigned short hb = (unsigned short)(lb + 1u); // next magnitude, same sign
	if ((hb & 0x7c00u) == 0x7c00u)
		return lb;
	float hif = __half2float(__ushort_as_half(hb));
	float frac = (fabsf(y) - fabsf(lof)) / (fabsf(hif) - fabsf(lof));
	float u = (float)(h >> 40) * 0x1.0p-24f;
	return u < frac ? hb : lb;
}

__host__ __device__ __forceinline__ unsigned long long checksum_word(unsigned long long w,
								     uint64_t i, uint64_t salt)
{
	return mix64((uint64_t)w ^ mix64(i ^ salt));
}

} // namespace

extern "C" __global__ void ca_worker_empty(void) {}
extern "C" __global__ void ca_worker_audit_marker(void) {}

extern "C" __global__ void ca_worker_fill_u16(uint16_t *p, size_t n, uint16_t v)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

extern "C" __global__ void ca_worker_fill_u32(uint32_t *p, size_t n, uint32_t v)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

extern "C" __global__ void ca_worker_fill_u64(unsigned long long *p, size_t n,
					      unsigned long long v)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = v;
}

extern "C" __global__ void ca_worker_perturb_f64(double *p, size_t n, double f)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] *= f;
}

extern "C" __global__ void ca_worker_perturb_f32(float *p, size_t n, float f)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] *= f;
}

extern "C" __global__ void ca_worker_perturb_bf16(uint16_t *p, size_t n, float f, uint64_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = perturb_bf16(p[i], f, element_hash(seed, i));
}

extern "C" __global__ void ca_worker_perturb_f16(uint16_t *p, size_t n, float f, uint64_t seed)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = perturb_f16(p[i], f, element_hash(seed, i));
}

extern "C" __global__ void ca_worker_checksum(const unsigned long long *words, size_t nwords,
					      const unsigned char *tail, unsigned ntail,
					      uint64_t salt, unsigned long long *out)
{
	__shared__ unsigned long long partial[kThreads / 32];
	size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long acc = 0;
	for (size_t i = tid; i < nwords; i += (size_t)gridDim.x * blockDim.x)
		acc += checksum_word(words[i], (uint64_t)i, salt);
	if (tid == 0 && ntail) {
		unsigned long long w = 0;
		for (unsigned k = 0; k < ntail; k++)
			w |= (uint64_t)tail[k] << (8 * k);
		acc += checksum_word(w, (uint64_t)nwords, salt);
	}
	for (int off = 16; off > 0; off >>= 1)
		acc += __shfl_down_sync(0xffffffffu, acc, off);
	unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	if (lane == 0)
		partial[warp] = acc;
	__syncthreads();
	if (warp == 0) {
		acc = lane < blockDim.x / 32 ? partial[lane] : 0;
		for (int off = 16; off > 0; off >>= 1)
			acc += __shfl_down_sync(0xffffffffu, acc, off);
		if (lane == 0)
			atomicAdd(out, acc);
	}
}

extern "C" cudaError_t ca_launch_empty(cudaStream_t stream)
{
	ca_worker_empty<<<1, 1, 0, stream>>>();
	return cudaGetLastError();
}

extern "C" cudaError_t ca_launch_audit_marker(cudaStream_t stream)
{
	ca_worker_audit_marker<<<1, 1, 0, stream>>>();
	return cudaGetLastError();
}

extern "C" cudaError_t ca_launch_fill_nan(void *ptr, size_t n, enum ca_dtype t,
					  cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	switch (t) {
	case CA_DTYPE_F64:
		ca_worker_fill_u64<<<blocks_for(n), kThreads, 0, stream>>>(
			(unsigned long long *)ptr, n, 0x7ff8000000000000ull);
		break;
	case CA_DTYPE_F32:
		ca_worker_fill_u32<<<blocks_for(n), kThreads, 0, stream>>>((uint32_t *)ptr, n,
									   0x7fc00000u);
		break;
	case CA_DTYPE_F16:
		ca_worker_fill_u16<<<blocks_for(n), kThreads, 0, stream>>>((uint16_t *)ptr, n,
									   (uint16_t)0x7e00u);
		break;
	case CA_DTYPE_BF16:
		ca_worker_fill_u16<<<blocks_for(n), kThreads, 0, stream>>>((uint16_t *)ptr, n,
									   (uint16_t)0x7fc0u);
		break;
	case CA_DTYPE_I64:
		return cudaMemsetAsync(ptr, 0xff, n * 8, stream);
	case CA_DTYPE_I32:
		return cudaMemsetAsync(ptr, 0xff, n * 4, stream);
	case CA_DTYPE_I16:
		return cudaMemsetAsync(ptr, 0xff, n * 2, stream);
	case CA_DTYPE_I8:
	case CA_DTYPE_U8:
	case CA_DTYPE_BOOL:
		return cudaMemsetAsync(ptr, 0xff, n, stream);
	default:
		return cudaErrorInvalidValue;
	}
	return cudaGetLastError();
}

extern "C" cudaError_t ca_launch_perturb(void *ptr, size_t n, enum ca_dtype t, double factor,
					 uint64_t seed, cudaStream_t stream)
{
	if (n == 0)
		return cudaSuccess;
	switch (t) {
	case CA_DTYPE_F64:
		ca_worker_perturb_f64<<<blocks_for(n), kThreads, 0, stream>>>((double *)ptr, n,
									      factor);
		break;
	case CA_DTYPE_F32:
		ca_worker_perturb_f32<<<blocks_for(n), kThreads, 0, stream>>>((float *)ptr, n,
									      (float)factor);
		break;
	case CA_DTYPE_F16:
		ca_worker_perturb_f16<<<blocks_for(n), kThreads, 0, stream>>>(
			(uint16_t *)ptr, n, (float)factor, seed);
		break;
	case CA_DTYPE_BF16:
		ca_worker_perturb_bf16<<<blocks_for(n), kThreads, 0, stream>>>(
			(uint16_t *)ptr, n, (float)factor, seed);
		break;
	default:
		return cudaSuccess;
	}
	return cudaGetLastError();
}

extern "C" cudaError_t ca_launch_checksum(const void *ptr, size_t nbytes, uint64_t salt,
					  unsigned long long *out, cudaStream_t stream)
{
	if (nbytes == 0)
		return cudaSuccess;
	if ((uintptr_t)ptr % 8 != 0)
		return cudaErrorInvalidValue; // cudaMalloc memory is 256-byte aligned
	size_t nwords = nbytes / 8;
	unsigned ntail = (unsigned)(nbytes % 8);
	ca_worker_checksum<<<blocks_for(nwords), kThreads, 0, stream>>>(
		(const unsigned long long *)ptr, nwords, (const unsigned char *)ptr + nwords * 8,
		ntail, salt, out);
	return cudaGetLastError();
}

// Reads the whole flush buffer (16-byte loads). Reading, not writing, is what empties L2 of the
// previous call's data: every dirty line (perturbed inputs, poisoned outputs) is written back
// during the flush, and L2 is left holding clean lines of this buffer, so the timed call pays
// no write-back of someone else's data. The sink write keeps the loads from being removed.
extern "C" __global__ void ca_worker_l2_flush(const uint4 *__restrict__ buf, size_t n, int value,
				   unsigned *sink)
{
	unsigned acc = 0;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = buf[i];
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (acc == (unsigned)value + 0x9E3779B9u)
		*sink = acc;
}

extern "C" cudaError_t ca_launch_l2_flush(void *buf, size_t nbytes, int value,
					  cudaStream_t stream)
{
	size_t n = nbytes / sizeof(uint4) - 1; // the last 16 bytes are the sink
	if (nbytes < 2 * sizeof(uint4))
		return cudaSuccess;
	ca_worker_l2_flush<<<blocks_for(n), kThreads, 0, stream>>>(
		(const uint4 *)buf, n, value, (unsigned *)((uint4 *)buf + n));
	return cudaGetLastError();
}
