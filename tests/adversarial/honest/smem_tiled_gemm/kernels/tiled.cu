// gemm (y = x @ W^T) with the classic shared-memory tiling: a 16 x 16 block computes a 16 x 16
// output tile, staging 16 x 16 tiles of x and of W in shared memory per step of k. W's tile is
// padded by one column so that reading it along k is free of bank conflicts. Any M, N, K
// (tiles at the edges are zero-filled).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int T = 16;

bool f32_cuda(const DLTensor *t, int ndim)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim != ndim || !t->shape || !t->data)
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

// y[m][n] = sum_k x[m][k] * w[n][k]
__global__ void __launch_bounds__(T *T) gemm_nt(const float *__restrict__ x, const float *__restrict__ w,
					       float *__restrict__ y, int m_count, int n_count, int k_count)
{
	__shared__ float xs[T][T + 1];
	__shared__ float ws[T][T + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int m = blockIdx.y * T + ty;     // this thread's output row
	const int n = blockIdx.x * T + tx;     // this thread's output column
	const int wrow = blockIdx.x * T + ty;  // the W row this thread loads
	float acc = 0.0f;
	for (int k0 = 0; k0 < k_count; k0 += T) {
		const int k = k0 + tx;
		xs[ty][tx] = (m < m_count && k < k_count) ? x[(int64_t)m * k_count + k] : 0.0f;
		ws[ty][tx] = (wrow < n_count && k < k_count) ? w[(int64_t)wrow * k_count + k] : 0.0f;
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < T; ++kk)
			acc = fmaf(xs[ty][kk], ws[tx][kk], acc);
		__syncthreads();
	}
	if (m < m_count && n < n_count)
		y[(int64_t)m * n_count + n] = acc;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_params != 1 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *w = &params[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !f32_cuda(w, 2) || !f32_cuda(y, 2))
		return 2;
	const int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
	if (w->shape[1] != k || y->shape[0] != m || y->shape[1] != n || m <= 0 || n <= 0 || k <= 0 ||
	    m > 65535 * (int64_t)T || n > INT32_MAX - T || k > INT32_MAX - T)
		return 2;
	const dim3 block(T, T), grid((unsigned)((n + T - 1) / T), (unsigned)((m + T - 1) / T));
	gemm_nt<<<grid, block, 0, stream>>>(static_cast<const float *>(x->data), static_cast<const float *>(w->data),
					    static_cast<float *>(y->data), (int)m, (int)n, (int)k);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
