// scaled_residual_params_scalar: y = x * (weight[c] * alpha) + shift[c], then `steps` times
// y = y + 0.5 * tanh(y), for x [B, C, L].
//
// The Python scalars arrive as 0-d CPU tensors (alpha: float64, steps: int64) and are read on the
// host; they become kernel arguments. One block per (b, c) plane loads that channel's weight and
// shift once; each thread keeps U float4 loads in flight, with plain loads and stores (the
// streaming hints cost time when L2 is full: bench/l2state.sh). One read and one write of x in
// total (eager does 4 + 7 * steps passes). A scalar kernel handles L not a multiple of 4 or misaligned
// pointers.
//
// args: x, alpha, steps. params (state_dict order): weight [C] (parameter), shift [C] (buffer).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256;
constexpr int U = 4;
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

// A 0-d CPU scalar as a double: float64 (Python float), float32, int64 (Python int), int32.
bool read_cpu_scalar(const DLTensor *t, double *out)
{
	if (!t || t->device.device_type != kDLCPU || t->ndim != 0 || t->dtype.lanes != 1 || !t->data)
		return false;
	const void *p = data_ptr<const void>(t);
	if (t->dtype.code == kDLFloat && t->dtype.bits == 64)
		*out = *static_cast<const double *>(p);
	else if (t->dtype.code == kDLFloat && t->dtype.bits == 32)
		*out = *static_cast<const float *>(p);
	else if (t->dtype.code == kDLInt && t->dtype.bits == 64)
		*out = (double)*static_cast<const int64_t *>(p);
	else if (t->dtype.code == kDLInt && t->dtype.bits == 32)
		*out = *static_cast<const int32_t *>(p);
	else
		return false;
	return true;
}

// A 0-d CPU integer scalar (Python int: int64).
bool read_cpu_int(const DLTensor *t, int64_t *out)
{
	if (!t || t->device.device_type != kDLCPU || t->ndim != 0 || t->dtype.lanes != 1 || !t->data ||
	    t->dtype.code != kDLInt)
		return false;
	const void *p = data_ptr<const void>(t);
	if (t->dtype.bits == 64)
		*out = *static_cast<const int64_t *>(p);
	else if (t->dtype.bits == 32)
		*out = *static_cast<const int32_t *>(p);
	else
		return false;
	return true;
}

__device__ __forceinline__ float apply(float x, float scale, float shift, int steps)
{
	float y = x * scale + shift;
	for (int s = 0; s < steps; ++s)
		y = y + 0.5f * tanhf(y);
	return y;
}

// One block per plane (grid-stride over planes); plane p has channel p % C. l4 = L / 4.
__global__ void __launch_bounds__(TPB)
	scaled_vec4(const float4 *__restrict__ x, const float *__restrict__ w, const float *__restrict__ shift,
		    float4 *__restrict__ y, int64_t planes, int64_t c, int64_t l4, float alpha, int steps)
{
	for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
		const int64_t ch = pl % c;
		const float sc = __ldg(w + ch) * alpha; // torch: weight * alpha first, in fp32
		const float sh = __ldg(shift + ch);
		const float4 *xp = x + pl * l4;
		float4 *yp = y + pl * l4;
		for (int64_t base = 0; base < l4; base += (int64_t)TPB * U) {
			float4 v[U];
#pragma unroll
			for (int k = 0; k < U; ++k) {
				const int64_t i = base + threadIdx.x + (int64_t)k * TPB;
				v[k] = i < l4 ? xp[i] : make_float4(0.f, 0.f, 0.f, 0.f);
			}
#pragma unroll
			for (int k = 0; k < U; ++k) {
				const int64_t i = base + threadIdx.x + (int64_t)k * TPB;
				if (i < l4) {
					float4 r;
					r.x = apply(v[k].x, sc, sh, steps);
					r.y = apply(v[k].y, sc, sh, steps);
					r.z = apply(v[k].z, sc, sh, steps);
					r.w = apply(v[k].w, sc, sh, steps);
					yp[i] = r;
				}
			}
		}
	}
}

__global__ void __launch_bounds__(TPB)
	scaled_scalar(const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ shift,
		      float *__restrict__ y, int64_t planes, int64_t c, int64_t l, float alpha, int steps)
{
	for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
		const int64_t ch = pl % c;
		const float sc = __ldg(w + ch) * alpha;
		const float sh = __ldg(shift + ch);
		for (int64_t i = threadIdx.x; i < l; i += TPB)
			y[pl * l + i] = apply(x[pl * l + i], sc, sh, steps);
	}
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 3 || num_params != 2 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *w = &params[0], *shift = &params[1], *y = &outputs[0];
	if (!is_cuda_f32_contig(x) || !is_cuda_f32_contig(w) || !is_cuda_f32_contig(shift) ||
	    !is_cuda_f32_contig(y) || !same_shape(x, y) || x->ndim != 3)
		return 2;
	const int64_t c = x->shape[1];
	if (w->ndim != 1 || shift->ndim != 1 || w->shape[0] != c || shift->shape[0] != c)
		return 2;
	double alpha = 0.0;
	int64_t steps = 0;
	if (!read_cpu_scalar(&args[1], &alpha) || !read_cpu_int(&args[2], &steps))
		return 2;
	if (steps < 0) // range(negative) runs no iteration
		steps = 0;
	if (steps > INT32_MAX)
		return 2;

	const int64_t planes = x->shape[0] * c, l = x->shape[2];
	if (planes == 0 || l == 0)
		return 0;
	const float *xp = data_ptr<const float>(x), *wp = data_ptr<const float>(w);
	const float *sp = data_ptr<const float>(shift);
	float *yp = data_ptr<float>(y);
	const unsigned blocks = (unsigned)(planes < MAX_BLOCKS ? planes : MAX_BLOCKS);
	// torch multiplies the fp32 weight by the Python float in fp32.
	const float alpha_f = (float)alpha;
	if (l % 4 == 0 && ((uintptr_t)xp | (uintptr_t)yp) % 16 == 0)
		scaled_vec4<<<blocks, TPB, 0, stream>>>(reinterpret_cast<const float4 *>(xp), wp, sp,
							reinterpret_cast<float4 *>(yp), planes, c, l / 4, alpha_f,
							(int)steps);
	else
		scaled_scalar<<<blocks, TPB, 0, stream>>>(xp, wp, sp, yp, planes, c, l, alpha_f, (int)steps);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
