// softmax (dim -1) with one 256-thread block per row in three passes: the row maximum (per-thread
// maxima, then a shared-memory tree), the sum of exp(x - max) (the same way), and the write of
// exp(x - max) / sum. The row (4 KiB here) stays in L1/L2 between the passes.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>

namespace {

constexpr int TPB = 256;

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

template <bool MAX> __device__ float block_reduce(float v, float *buf)
{
	buf[threadIdx.x] = v;
	__syncthreads();
	for (int w = TPB / 2; w > 0; w >>= 1) {
		if (threadIdx.x < w)
			buf[threadIdx.x] = MAX ? fmaxf(buf[threadIdx.x], buf[threadIdx.x + w])
					       : buf[threadIdx.x] + buf[threadIdx.x + w];
		__syncthreads();
	}
	const float r = buf[0];
	__syncthreads(); // everyone has read buf[0] before it is reused
	return r;
}

__global__ void __launch_bounds__(TPB) softmax_rows(const float *__restrict__ x, float *__restrict__ y,
						    int64_t rows, int64_t d)
{
	__shared__ float buf[TPB];
	for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
		const float *xr = x + row * d;
		float *yr = y + row * d;
		float m = -INFINITY;
		for (int64_t i = threadIdx.x; i < d; i += TPB)
			m = fmaxf(m, xr[i]);
		m = block_reduce<true>(m, buf);
		float s = 0.0f;
		for (int64_t i = threadIdx.x; i < d; i += TPB)
			s += expf(xr[i] - m);
		s = block_reduce<false>(s, buf);
		const float inv = 1.0f / s;
		for (int64_t i = threadIdx.x; i < d; i += TPB)
			yr[i] = expf(xr[i] - m) * inv;
	}
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
	softmax_rows<<<(unsigned)(rows < 1048576 ? rows : 1048576), TPB, 0, stream>>>(
		static_cast<const float *>(x->data), static_cast<float *>(y->data), rows, d);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
