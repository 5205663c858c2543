// gemm (y = x @ W^T) with setup-time weight packing: ca_setup transposes W [N][K] into its own
// buffer Wt [K][N] (tiled through shared memory), so that in ca_forward consecutive threads
// (consecutive output columns n) read consecutive floats of Wt. A block of 256 threads computes
// 8 output rows for 256 columns: the 8 x 32 slice of x for the current k chunk is staged in
// shared memory and broadcast to every thread. The parameters themselves are never written.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int ROWS = 8;   // output rows per block
constexpr int COLS = 256; // output columns per block (one per thread)
constexpr int KC = 32;    // k chunk
constexpr int TT = 32;    // transpose tile

struct state {
	float *wt;
	size_t wt_elems;
	int64_t n, k;
	const void *from;
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

// out[c][r] = in[r][c] for in of rows x cols; blocks of TT x 8 threads, TT x TT tiles.
__global__ void transpose(const float *__restrict__ in, float *__restrict__ out, int rows, int cols)
{
	__shared__ float tile[TT][TT + 1];
	const int c0 = blockIdx.x * TT, r0 = blockIdx.y * TT;
	for (int j = threadIdx.y; j < TT; j += blockDim.y) {
		const int r = r0 + j, c = c0 + threadIdx.x;
		if (r < rows && c < cols)
			tile[j][threadIdx.x] = in[(int64_t)r * cols + c];
	}
	__syncthreads();
	for (int j = threadIdx.y; j < TT; j += blockDim.y) {
		const int c = c0 + j, r = r0 + threadIdx.x;
		if (c < cols && r < rows)
			out[(int64_t)c * rows + r] = tile[threadIdx.x][j];
	}
}

// y[m][n] = sum_k x[m][k] * wt[k][n]
__global__ void __launch_bounds__(COLS) gemm_tn(const float *__restrict__ x, const float *__restrict__ wt,
						float *__restrict__ y, int m_count, int n_count, int k_count)
{
	__shared__ float xs[ROWS][KC];
	const int n = blockIdx.x * COLS + threadIdx.x;
	const int m0 = blockIdx.y * ROWS;
	float acc[ROWS];
#pragma unroll
	for (int r = 0; r < ROWS; ++r)
		acc[r] = 0.0f;
	for (int k0 = 0; k0 < k_count; k0 += KC) {
		{ // ROWS * KC == COLS: one element per thread
			const int r = threadIdx.x / KC, c = threadIdx.x % KC;
			const int m = m0 + r, k = k0 + c;
			xs[r][c] = (m < m_count && k < k_count) ? x[(int64_t)m * k_count + k] : 0.0f;
		}
		__syncthreads();
		if (n < n_count) {
			const int kend = k_count - k0 < KC ? k_count - k0 : KC;
			for (int kk = 0; kk < kend; ++kk) {
				const float wv = wt[(int64_t)(k0 + kk) * n_count + n];
#pragma unroll
				for (int r = 0; r < ROWS; ++r)
					acc[r] = fmaf(xs[r][kk], wv, acc[r]);
			}
		}
		__syncthreads();
	}
	if (n < n_count) {
#pragma unroll
		for (int r = 0; r < ROWS; ++r)
			if (m0 + r < m_count)
				y[(int64_t)(m0 + r) * n_count + n] = acc[r];
	}
}

bool weight_ok(const DLTensor *w)
{
	return f32_cuda(w, 2) && w->shape[0] > 0 && w->shape[1] > 0 && w->shape[0] <= INT32_MAX - COLS &&
	       w->shape[1] <= INT32_MAX - KC && (w->shape[0] + TT - 1) / TT <= 65535;
}

int pack(const DLTensor *w, cudaStream_t stream)
{
	const int64_t n = w->shape[0], k = w->shape[1];
	const size_t elems = (size_t)(n * k);
	if (elems > g.wt_elems) {
		if (g.wt) {
			cudaDeviceSynchronize();
			cudaFree(g.wt);
		}
		g.wt = nullptr;
		g.wt_elems = 0;
		if (cudaMalloc(&g.wt, elems * sizeof(float)) != cudaSuccess) {
			g.wt = nullptr;
			return 1;
		}
		g.wt_elems = elems;
	}
	const dim3 grid((unsigned)((k + TT - 1) / TT), (unsigned)((n + TT - 1) / TT)), block(TT, 8);
	transpose<<<grid, block, 0, stream>>>(static_cast<const float *>(w->data), g.wt, (int)n, (int)k);
	if (cudaGetLastError() != cudaSuccess)
		return 1;
	g.n = n;
	g.k = k;
	g.from = w->data;
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	if (num_params != 1 || !weight_ok(&params[0]))
		return 1;
	return pack(&params[0], stream) == 0 ? 0 : 2;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_params != 1 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *w = &params[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !weight_ok(w) || !f32_cuda(y, 2))
		return 2;
	const int64_t m = x->shape[0], k = x->shape[1], n = w->shape[0];
	if (w->shape[1] != k || y->shape[0] != m || y->shape[1] != n || m <= 0 || (m + ROWS - 1) / ROWS > 65535)
		return 2;
	if (!g.wt || g.from != w->data || g.n != n || g.k != k) { // ca_setup was not called for these
		if (pack(w, stream) != 0)
			return 3;
	}
	const dim3 grid((unsigned)((n + COLS - 1) / COLS), (unsigned)((m + ROWS - 1) / ROWS));
	gemm_tn<<<grid, COLS, 0, stream>>>(static_cast<const float *>(x->data), g.wt, static_cast<float *>(y->data),
					   (int)m, (int)n, (int)k);
	return cudaGetLastError() == cudaSuccess ? 0 : 4;
}

extern "C" void ca_teardown(void)
{
	if (g.wt)
		cudaFree(g.wt);
	g = state{};
}
