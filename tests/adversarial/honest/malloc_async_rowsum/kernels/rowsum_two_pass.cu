// rowsum (y = x.sum(-1)) in two passes with stream-ordered scratch memory: every call takes a
// (rows x CHUNKS) buffer of partial sums with cudaMallocAsync on the harness stream, a first
// kernel sums each quarter of each row into it (one 128-thread block per quarter, shuffle then
// shared-memory reduction), a second kernel adds each row's CHUNKS partials, and cudaFreeAsync
// returns the buffer on the same stream.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int CHUNKS = 4;
constexpr int TPB = 128;

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

// grid (CHUNKS, rows): partial[row * CHUNKS + chunk] = sum of x[row][chunk's range].
__global__ void __launch_bounds__(TPB) partial_sums(const float *__restrict__ x, float *__restrict__ partial,
						    int64_t d)
{
	__shared__ float warp_part[TPB / 32];
	const int64_t row = blockIdx.y;
	const int chunk = blockIdx.x;
	const int64_t per = (d + CHUNKS - 1) / CHUNKS;
	const int64_t begin = chunk * per;
	const int64_t end = begin + per < d ? begin + per : d;
	const float *xr = x + row * d;
	float s = 0.0f;
	for (int64_t i = begin + threadIdx.x; i < end; i += TPB)
		s += xr[i];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if ((threadIdx.x & 31) == 0)
		warp_part[threadIdx.x >> 5] = s;
	__syncthreads();
	if (threadIdx.x == 0) {
		float t = 0.0f;
#pragma unroll
		for (int w = 0; w < TPB / 32; ++w)
			t += warp_part[w];
		partial[row * CHUNKS + chunk] = t;
	}
}

__global__ void finish(const float *__restrict__ partial, float *__restrict__ y, int64_t rows)
{
	for (int64_t row = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; row < rows;
	     row += (int64_t)gridDim.x * blockDim.x) {
		float t = 0.0f;
#pragma unroll
		for (int c = 0; c < CHUNKS; ++c)
			t += partial[row * CHUNKS + c];
		y[row] = t;
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
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim < 1 || y->ndim != x->ndim - 1)
		return 2;
	int64_t rows = 1;
	for (int i = 0; i < y->ndim; ++i) {
		if (y->shape[i] != x->shape[i])
			return 2;
		rows *= x->shape[i];
	}
	if (rows == 0)
		return 0;
	if (rows > 65535)
		return 2; // grid.y limit of the first pass
	float *partial = nullptr;
	if (cudaMallocAsync(reinterpret_cast<void **>(&partial), (size_t)rows * CHUNKS * sizeof(float), stream) !=
	    cudaSuccess)
		return 3;
	partial_sums<<<dim3(CHUNKS, (unsigned)rows), TPB, 0, stream>>>(static_cast<const float *>(x->data), partial,
								       x->shape[x->ndim - 1]);
	const int64_t blocks = (rows + 255) / 256;
	finish<<<(unsigned)blocks, 256, 0, stream>>>(partial, static_cast<float *>(y->data), rows);
	const cudaError_t launch = cudaGetLastError();
	if (cudaFreeAsync(partial, stream) != cudaSuccess || launch != cudaSuccess)
		return 4;
	return 0;
}
