// gemm (y = x @ W^T) on the tensor cores with half-precision inputs and fp32 accumulation
// (WMMA 16 x 16 x 16). ca_setup converts W to half once into its own buffer; ca_forward converts x
// to half into a scratch buffer and runs the WMMA kernel. Rounding x and W to half costs a
// relative 2^-11 per element; with fp32 accumulation over K = 1024 the error of y is about
// 2e-4, far inside the task's 1e-2. Shapes that are not multiples of 16 take a plain fp32
// fallback kernel.
//
// WMMA view: A = x_h (M x K, row-major, ld K); B = W_h^T (K x N), which is W_h [N][K] read
// column-major with ld K; C = y (M x N, row-major, ld N). A block of 8 warps computes a 32 x 64
// tile, one 16 x 16 fragment per warp.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <mma.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

using namespace nvcuda;

constexpr int WARPS_M = 2, WARPS_N = 4;
constexpr int BLOCK_M = 16 * WARPS_M, BLOCK_N = 16 * WARPS_N;

struct state {
	__half *w_h;
	size_t w_elems;
	__half *x_h;
	size_t x_elems;
} g;

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

__global__ void to_half(const float *__restrict__ in, __half *__restrict__ out, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		out[i] = __float2half_rn(in[i]);
}

__global__ void __launch_bounds__(32 * WARPS_M *WARPS_N)
	wmma_nt(const __half *__restrict__ a, const __half *__restrict__ b, float *__restrict__ c, int m_count,
		int n_count, int k_count)
{
	const int warp = threadIdx.x / 32;
	const int m0 = blockIdx.y * BLOCK_M + (warp / WARPS_N) * 16;
	const int n0 = blockIdx.x * BLOCK_N + (warp % WARPS_N) * 16;
	if (m0 >= m_count || n0 >= n_count) // whole fragments only (shapes are multiples of 16)
		return;
	wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
	wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb;
	wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
	wmma::fill_fragment(acc, 0.0f);
	for (int k = 0; k < k_count; k += 16) {
		wmma::load_matrix_sync(fa, a + (int64_t)m0 * k_count + k, (unsigned)k_count);
		wmma::load_matrix_sync(fb, b + (int64_t)n0 * k_count + k, (unsigned)k_count);
		wmma::mma_sync(acc, fa, fb, acc);
	}
	wmma::store_matrix_sync(c + (int64_t)m0 * n_count + n0, acc, (unsigned)n_count, wmma::mem_row_major);
}

// Fallback for shapes that are not multiples of 16: one thread per output, fp32.
__global__ void naive_nt(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y,
			 int64_t m_count, int64_t n_count, int64_t k_count)
{
	const int64_t total = m_count * n_count;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
	     i += (int64_t)gridDim.x * blockDim.x) {
		const int64_t m = i / n_count, n = i % n_count;
		float acc = 0.0f;
		for (int64_t k = 0; k < k_count; ++k)
			acc = fmaf(x[m * k_count + k], w[n * k_count + k], acc);
		y[i] = acc;
	}
}

unsigned blocks_for(int64_t n)
{
	const int64_t b = (n + 255) / 256;
	return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

int ensure(__half **buf, size_t *have, size_t need)
{
	if (need <= *have)
		return 0;
	if (*buf) {
		cudaDeviceSynchronize();
		cudaFree(*buf);
	}
	*buf = nullptr;
	*have = 0;
	if (cudaMalloc(buf, need * sizeof(__half)) != cudaSuccess) {
		*buf = nullptr;
		return 1;
	}
	*have = need;
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	if (num_params != 1 || !f32_cuda(&params[0], 2))
		return 1;
	const int64_t n = params[0].shape[0] * params[0].shape[1];
	if (n <= 0 || ensure(&g.w_h, &g.w_elems, (size_t)n) != 0)
		return 2;
	to_half<<<blocks_for(n), 256, 0, stream>>>(static_cast<const float *>(params[0].data), g.w_h, n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_params != 1 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *w = &params[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !f32_cuda(w, 2) || !f32_cuda(y, 2))
		return 2;
	const int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
	if (w->shape[1] != k || y->shape[0] != m || y->shape[1] != n || m <= 0 || n <= 0 || k <= 0)
		return 2;
	const float *xp = static_cast<const float *>(x->data);
	float *yp = static_cast<float *>(y->data);
	const bool tiles = m % 16 == 0 && n % 16 == 0 && k % 16 == 0 && m <= INT32_MAX && n <= INT32_MAX &&
			   k <= INT32_MAX && (m + BLOCK_M - 1) / BLOCK_M <= 65535;
	if (!tiles || !g.w_h || g.w_elems < (size_t)(n * k)) {
		naive_nt<<<blocks_for(m * n), 256, 0, stream>>>(xp, static_cast<const float *>(w->data), yp, m, n, k);
		return cudaGetLastError() == cudaSuccess ? 0 : 3;
	}
	if (ensure(&g.x_h, &g.x_elems, (size_t)(m * k)) != 0)
		return 4;
	to_half<<<blocks_for(m * k), 256, 0, stream>>>(xp, g.x_h, m * k);
	const dim3 grid((unsigned)((n + BLOCK_N - 1) / BLOCK_N), (unsigned)((m + BLOCK_M - 1) / BLOCK_M));
	wmma_nt<<<grid, 32 * WARPS_M * WARPS_N, 0, stream>>>(g.x_h, g.w_h, yp, (int)m, (int)n, (int)k);
	return cudaGetLastError() == cudaSuccess ? 0 : 5;
}

extern "C" void ca_teardown(void)
{
	if (g.w_h)
		cudaFree(g.w_h);
	if (g.x_h)
		cudaFree(g.x_h);
	g = state{};
}
