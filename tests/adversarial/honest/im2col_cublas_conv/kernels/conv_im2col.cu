// conv (nn.Conv2d(32, 64, 3, padding=1) with bias) as im2col + GEMM: a kernel unfolds every
// image into a (C*R*S) x (H*W) column matrix in a workspace, then one strided-batched
// cublasSgemm (plain fp32 math) multiplies the (K) x (C*R*S) filter with each image's columns,
// and a last kernel adds the bias. cuBLAS is used for what it is allowed for: the GEMM.
//
// Per image n, row-major Y_n (K x P) = W (K x J) @ col_n (J x P), with J = C*R*S, P = H*W
// (stride 1, padding R/2 and S/2, so the output is H x W). Column-major that is
// Y_n^T (P x K, ld P) = col_n^T (P x J, ld P) @ W^T (J x K, ld J).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256;

struct state {
	cublasHandle_t handle;
	float *col;
	size_t col_elems;
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

bool fits_int(int64_t v)
{
	return v > 0 && v <= INT32_MAX;
}

// col[n][j][p] with j = (c * R + r) * S + s, p = h * W + w: x[n][c][h + r - R/2][w + s - S/2] or 0.
__global__ void __launch_bounds__(TPB) im2col(const float *__restrict__ x, float *__restrict__ col, int64_t n,
					      int c, int h, int w, int r, int s)
{
	const int64_t p_count = (int64_t)h * w, j_count = (int64_t)c * r * s;
	const int64_t total = n * j_count * p_count;
	const int pad_h = r / 2, pad_w = s / 2;
	for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < total; i += (int64_t)gridDim.x * TPB) {
		const int64_t p = i % p_count;
		const int64_t j = (i / p_count) % j_count;
		const int64_t img = i / (p_count * j_count);
		const int ow = (int)(p % w), oh = (int)(p / w);
		const int ss = (int)(j % s), rr = (int)((j / s) % r), cc = (int)(j / ((int64_t)r * s));
		const int ih = oh + rr - pad_h, iw = ow + ss - pad_w;
		float v = 0.0f;
		if (ih >= 0 && ih < h && iw >= 0 && iw < w)
			v = x[((img * c + cc) * h + ih) * (int64_t)w + iw];
		col[i] = v;
	}
}

__global__ void __launch_bounds__(TPB) add_bias(float *__restrict__ y, const float *__restrict__ b,
						int64_t planes, int64_t k, int64_t hw)
{
	for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
		const float bk = b[pl % k];
		float *yp = y + pl * hw;
		for (int64_t i = threadIdx.x; i < hw; i += TPB)
			yp[i] += bk;
	}
}

bool params_ok(const DLTensor *params, int num_params)
{
	return num_params == 2 && f32_cuda(&params[0], 4) && f32_cuda(&params[1], 1) &&
	       params[1].shape[0] == params[0].shape[0];
}

int ensure_handle(void)
{
	if (g.handle)
		return 0;
	if (cublasCreate(&g.handle) != CUBLAS_STATUS_SUCCESS) {
		g.handle = nullptr;
		return 1;
	}
	return cublasSetMathMode(g.handle, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS ? 0 : 1;
}

int ensure_col(size_t elems)
{
	if (elems <= g.col_elems)
		return 0;
	if (g.col) {
		cudaDeviceSynchronize(); // an earlier call may still read it
		cudaFree(g.col);
	}
	g.col = nullptr;
	g.col_elems = 0;
	if (cudaMalloc(&g.col, elems * sizeof(float)) != cudaSuccess) {
		g.col = nullptr;
		return 1;
	}
	g.col_elems = elems;
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)stream;
	if (!params_ok(params, num_params))
		return 1;
	if (ensure_handle() != 0)
		return 2;
	// The workspace for the task's input (8 x C x 64 x 64); ca_forward grows it if needed.
	const DLTensor *w = &params[0];
	const size_t elems = (size_t)8 * (size_t)(w->shape[1] * w->shape[2] * w->shape[3]) * 64 * 64;
	return ensure_col(elems) == 0 ? 0 : 3;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_outputs != 1 || !params_ok(params, num_params))
		return 1;
	const DLTensor *x = &args[0], *wt = &params[0], *b = &params[1], *y = &outputs[0];
	if (!f32_cuda(x, 4) || !f32_cuda(y, 4))
		return 2;
	const int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
	const int64_t k = wt->shape[0], r = wt->shape[2], s = wt->shape[3];
	if (wt->shape[1] != c || r % 2 == 0 || s % 2 == 0 || y->shape[0] != n || y->shape[1] != k ||
	    y->shape[2] != h || y->shape[3] != w)
		return 2;
	const int64_t j = c * r * s, p = h * w;
	if (!fits_int(n) || !fits_int(c) || !fits_int(h) || !fits_int(w) || !fits_int(k) || !fits_int(j) ||
	    !fits_int(p))
		return 2;
	if (ensure_handle() != 0 || ensure_col((size_t)(n * j * p)) != 0)
		return 3;

	const int64_t total = n * j * p;
	const unsigned blocks = (unsigned)((total + TPB - 1) / TPB < 1048576 ? (total + TPB - 1) / TPB : 1048576);
	im2col<<<blocks, TPB, 0, stream>>>(static_cast<const float *>(x->data), g.col, n, (int)c, (int)h, (int)w,
					   (int)r, (int)s);
	if (cudaGetLastError() != cudaSuccess)
		return 4;

	const float one = 1.0f, zero = 0.0f;
	if (cublasSetStream(g.handle, stream) != CUBLAS_STATUS_SUCCESS ||
	    cublasSgemmStridedBatched(g.handle, CUBLAS_OP_N, CUBLAS_OP_N, (int)p, (int)k, (int)j, &one, g.col,
				      (int)p, j * p, static_cast<const float *>(wt->data), (int)j, 0, &zero,
				      static_cast<float *>(y->data), (int)p, k * p, (int)n) != CUBLAS_STATUS_SUCCESS)
		return 5;

	const int64_t planes = n * k;
	add_bias<<<(unsigned)(planes < 65536 ? planes : 65536), TPB, 0, stream>>>(
		static_cast<float *>(y->data), static_cast<const float *>(b->data), planes, k, p);
	return cudaGetLastError() == cudaSuccess ? 0 : 6;
}

extern "C" void ca_teardown(void)
{
	if (g.col)
		cudaFree(g.col);
	if (g.handle)
		cublasDestroy(g.handle);
	g = state{};
}
