// CHEAT (parameters modified in ca_setup): "packs" the weight in place: ca_setup transposes the
// harness's own fc.weight buffer (square, 1024 x 1024) instead of a private copy, and ca_forward
// reads it as W^T [K][N] (coalesced along n). The ABI forbids writing parameters; today the
// worker checksums the parameters after ca_setup and around ca_forward only, so a write inside
// ca_setup goes unseen and the outputs are right. Catching it needs a checksum of the
// parameters as loaded, before ca_setup. Expected: verify.params_modified.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

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

constexpr int T = 16;

// y[m][n] = sum_k x[m][k] * w[n][k] (shared-memory tiles of 16 x 16)
__global__ void __launch_bounds__(T *T) gemm_nt(const float *__restrict__ x, const float *__restrict__ w,
					       float *__restrict__ y, int m_count, int n_count, int k_count)
{
	__shared__ float xs[T][T + 1];
	__shared__ float ws[T][T + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int m = blockIdx.y * T + ty, n = blockIdx.x * T + tx, wrow = blockIdx.x * T + ty;
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

// The task's tensors: x [M, K], fc.weight [N, K], y [M, N]. Returns false when they do not fit.
bool gemm_shapes(const DLTensor *args, int num_args, const DLTensor *params, int num_params, DLTensor *outputs,
		 int num_outputs, int64_t *m, int64_t *n, int64_t *k)
{
	if (num_args != 1 || num_params != 1 || num_outputs != 1)
		return false;
	const DLTensor *x = &args[0], *w = &params[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !f32_cuda(w, 2) || !f32_cuda(y, 2))
		return false;
	*m = x->shape[0];
	*k = x->shape[1];
	*n = w->shape[0];
	return w->shape[1] == *k && y->shape[0] == *m && y->shape[1] == *n && *m > 0 && *n > 0 && *k > 0 &&
	       *m <= 65535 * (int64_t)T && *n < INT32_MAX - T && *k < INT32_MAX - T;
}

cudaError_t launch_gemm(const float *x, const float *w, float *y, int64_t m, int64_t n, int64_t k, cudaStream_t s)
{
	const dim3 block(T, T), grid((unsigned)((n + T - 1) / T), (unsigned)((m + T - 1) / T));
	gemm_nt<<<grid, block, 0, s>>>(x, w, y, (int)m, (int)n, (int)k);
	return cudaGetLastError();
}

// In place: a[i][j] <-> a[j][i] for i < j, one thread per pair.
__global__ void transpose_in_place(float *a, int64_t n)
{
	const int64_t total = n * n;
	for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < total;
	     t += (int64_t)gridDim.x * blockDim.x) {
		const int64_t i = t / n, j = t % n;
		if (i < j) {
			const float v = a[i * n + j];
			a[i * n + j] = a[j * n + i];
			a[j * n + i] = v;
		}
	}
}

// y[m][n] = sum_k x[m][k] * wt[k][n]
__global__ void __launch_bounds__(T *T) gemm_nn(const float *__restrict__ x, const float *__restrict__ wt,
					       float *__restrict__ y, int m_count, int n_count, int k_count)
{
	__shared__ float xs[T][T + 1];
	__shared__ float ws[T][T + 1];
	const int tx = threadIdx.x, ty = threadIdx.y;
	const int m = blockIdx.y * T + ty, n = blockIdx.x * T + tx;
	float acc = 0.0f;
	for (int k0 = 0; k0 < k_count; k0 += T) {
		xs[ty][tx] = (m < m_count && k0 + tx < k_count) ? x[(int64_t)m * k_count + k0 + tx] : 0.0f;
		ws[ty][tx] = (n < n_count && k0 + ty < k_count) ? wt[(int64_t)(k0 + ty) * n_count + n] : 0.0f;
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < T; ++kk)
			acc = fmaf(xs[ty][kk], ws[kk][tx], acc);
		__syncthreads();
	}
	if (m < m_count && n < n_count)
		y[(int64_t)m * n_count + n] = acc;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	if (num_params != 1 || !f32_cuda(&params[0], 2) || params[0].shape[0] != params[0].shape[1])
		return 1;
	const int64_t n = params[0].shape[0];
	const int64_t blocks = (n * n + 255) / 256;
	transpose_in_place<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(
		static_cast<float *>(params[0].data), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	int64_t m, n, k;
	if (!gemm_shapes(args, num_args, params, num_params, outputs, num_outputs, &m, &n, &k) || n != k)
		return 1;
	const dim3 block(T, T), grid((unsigned)((n + T - 1) / T), (unsigned)((m + T - 1) / T));
	gemm_nn<<<grid, block, 0, stream>>>(static_cast<const float *>(args[0].data),
					    static_cast<const float *>(params[0].data), static_cast<float *>(outputs[0].data),
					    (int)m, (int)n, (int)k);
	return cudaGetLastError() == cudaSuccess ? 0 : 2;
}
