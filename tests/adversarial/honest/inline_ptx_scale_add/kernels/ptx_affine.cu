// scale_add (y = 2x + 1) written with device-side inline PTX: the loads are non-coherent 16-byte
// vector loads through the read-only path (ld.global.nc.v4.f32), the arithmetic one fused
// multiply-add per element (fma.rn.f32), the stores streaming 16-byte stores (st.global.cs.v4.f32,
// evict-first: y is not read again). A scalar PTX path covers the tail and misaligned pointers.
// Inline assembly in device code is ordinary CUDA and must stay allowed (only host-side inline
// assembly, which can issue system calls, is refused at build).
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

__device__ __forceinline__ float4 load_nc_v4(const float4 *p)
{
	float4 v;
	asm volatile("ld.global.nc.v4.f32 {%0, %1, %2, %3}, [%4];"
		     : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
		     : "l"(p));
	return v;
}

__device__ __forceinline__ void store_cs_v4(float4 *p, float4 v)
{
	asm volatile("st.global.cs.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
		     : "memory");
}

__device__ __forceinline__ float affine(float v)
{
	float r;
	asm("fma.rn.f32 %0, %1, 0f40000000, 0f3F800000;" : "=f"(r) : "f"(v)); // 2.0f * v + 1.0f
	return r;
}

__global__ void __launch_bounds__(TPB) affine_vec4(const float4 *__restrict__ x, float4 *__restrict__ y, int64_t n4)
{
	for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < n4; i += (int64_t)gridDim.x * TPB) {
		float4 v = load_nc_v4(x + i);
		v.x = affine(v.x);
		v.y = affine(v.y);
		v.z = affine(v.z);
		v.w = affine(v.w);
		store_cs_v4(y + i, v);
	}
}

// Elements [begin, n), one at a time.
__global__ void __launch_bounds__(TPB) affine_scalar(const float *__restrict__ x, float *__restrict__ y,
						     int64_t begin, int64_t n)
{
	for (int64_t i = begin + (int64_t)blockIdx.x * TPB + threadIdx.x; i < n; i += (int64_t)gridDim.x * TPB) {
		float v;
		asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(x + i));
		asm volatile("st.global.f32 [%0], %1;" ::"l"(y + i), "f"(affine(v)) : "memory");
	}
}

unsigned blocks_for(int64_t n)
{
	const int64_t b = (n + TPB - 1) / TPB;
	return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || numel(x) != numel(y))
		return 2;
	const int64_t n = numel(x);
	if (n == 0)
		return 0;
	const float *xp = static_cast<const float *>(x->data);
	float *yp = static_cast<float *>(y->data);
	int64_t done = 0;
	if (((reinterpret_cast<uintptr_t>(xp) | reinterpret_cast<uintptr_t>(yp)) & 15) == 0) {
		const int64_t n4 = n / 4;
		if (n4 > 0)
			affine_vec4<<<blocks_for(n4), TPB, 0, stream>>>(reinterpret_cast<const float4 *>(xp),
								       reinterpret_cast<float4 *>(yp), n4);
		done = n4 * 4;
	}
	if (done < n)
		affine_scalar<<<blocks_for(n - done), TPB, 0, stream>>>(xp, yp, done, n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
