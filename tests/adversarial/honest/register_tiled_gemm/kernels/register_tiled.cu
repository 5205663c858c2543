// gemm (y = x @ W^T) with register blocking, written as a template: a block of
// (BM / TM) x (BN / TN) threads computes a BM x BN tile, each thread a TM x TN sub-tile kept in
// registers; per step of BK it stages x and W tiles in shared memory stored k-major (so the
// inner loop reads TM + TN floats and does TM * TN FMAs). Two instantiations: 64 x 64 tiles for
// large outputs, 32 x 32 for small ones. Edges are zero-filled and guarded.
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

template <int BM, int BN, int BK, int TM, int TN> struct tile_config {
	static constexpr int THREADS = (BM / TM) * (BN / TN);
	static_assert(BM % TM == 0 && BN % TN == 0, "tile must divide");
	static_assert((BM * BK) % THREADS == 0 && (BN * BK) % THREADS == 0, "loads must divide");
};

template <int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__(tile_config<BM, BN, BK, TM, TN>::THREADS)
	gemm_nt(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y, int m_count,
		int n_count, int k_count)
{
	constexpr int THREADS = tile_config<BM, BN, BK, TM, TN>::THREADS;
	__shared__ float xs[BK][BM + 1]; // xs[k][m]
	__shared__ float ws[BK][BN + 1]; // ws[k][n]
	const int tid = threadIdx.x;
	const int tcol = tid % (BN / TN), trow = tid / (BN / TN);
	const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
	float acc[TM][TN];
#pragma unroll
	for (int i = 0; i < TM; ++i)
#pragma unroll
		for (int j = 0; j < TN; ++j)
			acc[i][j] = 0.0f;

	for (int k0 = 0; k0 < k_count; k0 += BK) {
#pragma unroll
		for (int l = 0; l < (BM * BK) / THREADS; ++l) {
			const int idx = tid + l * THREADS;
			const int r = idx / BK, c = idx % BK;
			const int m = m0 + r, k = k0 + c;
			xs[c][r] = (m < m_count && k < k_count) ? x[(int64_t)m * k_count + k] : 0.0f;
		}
#pragma unroll
		for (int l = 0; l < (BN * BK) / THREADS; ++l) {
			const int idx = tid + l * THREADS;
			const int r = idx / BK, c = idx % BK;
			const int n = n0 + r, k = k0 + c;
			ws[c][r] = (n < n_count && k < k_count) ? w[(int64_t)n * k_count + k] : 0.0f;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; ++kk) {
			float a[TM], b[TN];
#pragma unroll
			for (int i = 0; i < TM; ++i)
				a[i] = xs[kk][trow * TM + i];
#pragma unroll
			for (int j = 0; j < TN; ++j)
				b[j] = ws[kk][tcol * TN + j];
#pragma unroll
			for (int i = 0; i < TM; ++i)
#pragma unroll
				for (int j = 0; j < TN; ++j)
					acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < TM; ++i) {
		const int m = m0 + trow * TM + i;
		if (m >= m_count)
			continue;
#pragma unroll
		for (int j = 0; j < TN; ++j) {
			const int n = n0 + tcol * TN + j;
			if (n < n_count)
				y[(int64_t)m * n_count + n] = acc[i][j];
		}
	}
}

template <int BM, int BN, int BK, int TM, int TN>
cudaError_t launch(const float *x, const float *w, float *y, int64_t m, int64_t n, int64_t k, cudaStream_t s)
{
	if ((m + BM - 1) / BM > 65535)
		return cudaErrorInvalidValue;
	const dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((m + BM - 1) / BM));
	const unsigned threads = tile_config<BM, BN, BK, TM, TN>::THREADS;
	gemm_nt<BM, BN, BK, TM, TN><<<grid, threads, 0, s>>>(x, w, y, (int)m, (int)n, (int)k);
	return cudaGetLastError();
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
	    m > INT32_MAX - 64 || n > INT32_MAX - 64 || k > INT32_MAX - 64)
		return 2;
	const float *xp = static_cast<const float *>(x->data), *wp = static_cast<const float *>(w->data);
	float *yp = static_cast<float *>(y->data);
	cudaError_t err = (m * n >= 256 * 256) ? launch<64, 64, 16, 4, 4>(xp, wp, yp, m, n, k, stream)
					       : launch<32, 32, 16, 2, 2>(xp, wp, yp, m, n, k, stream);
	return err == cudaSuccess ? 0 : 3;
}
