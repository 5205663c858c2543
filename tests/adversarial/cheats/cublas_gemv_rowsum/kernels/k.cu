// CHEAT (library misuse: cuBLAS outside GEMM): computes the row sums as a matrix-vector product
// with a vector of ones (cublasSgemv), a cuBLAS routine that is not a GEMM. The published
// CUDA-Agent rules allow cuBLAS for GEMM only; the result is correct and fast, so only a check of
// which library routines are called can reject it. The symbol allowlist admits only cuBLAS's
// GEMM entry points (the *gemm* family, cublasLtMatmul, handles and streams), so the imported
// cublasSgemv_v2 is rejected at build time. Expected: build.forbidden_symbol.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <cublas_v2.h>

namespace {

constexpr int TPB = 256, ROWS_PER_BLOCK = TPB / 32;

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

// The task's tensors: x [..., d], y [...]. Sets rows and d; returns false when they do not fit.
bool rowsum_shapes(const DLTensor *args, int num_args, int num_params, DLTensor *outputs, int num_outputs,
		   int64_t *rows, int64_t *d)
{
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return false;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim < 1 || y->ndim != x->ndim - 1)
		return false;
	*rows = 1;
	for (int i = 0; i < y->ndim; ++i) {
		if (y->shape[i] != x->shape[i])
			return false;
		*rows *= x->shape[i];
	}
	*d = x->shape[x->ndim - 1];
	return *rows > 0 && (*rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK <= INT32_MAX;
}

// One warp per row, rows [0, rows).
__global__ void __launch_bounds__(TPB) rowsum(const float *__restrict__ x, float *__restrict__ y, int64_t rows,
					      int64_t d)
{
	const int lane = threadIdx.x & 31;
	const int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	if (row >= rows)
		return;
	const float *xr = x + row * d;
	float s = 0.0f;
	for (int64_t i = lane; i < d; i += 32)
		s += xr[i];
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, o);
	if (lane == 0)
		y[row] = s;
}

cudaError_t launch_rowsum(const float *x, float *y, int64_t rows, int64_t d, cudaStream_t s)
{
	rowsum<<<(unsigned)((rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK), TPB, 0, s>>>(x, y, rows, d);
	return cudaGetLastError();
}

struct state {
	cublasHandle_t handle;
	float *ones;
	int64_t ones_len;
} g;

__global__ void fill_ones(float *v, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		v[i] = 1.0f;
}

int ensure(int64_t d, cudaStream_t stream)
{
	if (!g.handle && cublasCreate(&g.handle) != CUBLAS_STATUS_SUCCESS) {
		g.handle = nullptr;
		return 1;
	}
	if (d > g.ones_len) {
		if (g.ones) {
			cudaStreamSynchronize(stream);
			cudaFree(g.ones);
		}
		g.ones = nullptr;
		g.ones_len = 0;
		if (cudaMalloc(&g.ones, (size_t)d * sizeof(float)) != cudaSuccess) {
			g.ones = nullptr;
			return 1;
		}
		const int64_t blocks = (d + 255) / 256;
		fill_ones<<<(unsigned)(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(g.ones, d);
		if (cudaGetLastError() != cudaSuccess)
			return 1;
		g.ones_len = d;
	}
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	return ensure(1024, stream);
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	int64_t rows, d;
	if (!rowsum_shapes(args, num_args, num_params, outputs, num_outputs, &rows, &d) || d <= 0 || d > INT32_MAX ||
	    rows > INT32_MAX)
		return 1;
	if (ensure(d, stream) != 0)
		return 2;
	// Row-major x (rows x d) is column-major x^T (d x rows, ld d): y = (x^T)^T ones.
	const float one = 1.0f, zero = 0.0f;
	if (cublasSetStream(g.handle, stream) != CUBLAS_STATUS_SUCCESS ||
	    cublasSgemv(g.handle, CUBLAS_OP_T, (int)d, (int)rows, &one, static_cast<const float *>(args[0].data), (int)d,
			g.ones, 1, &zero, static_cast<float *>(outputs[0].data), 1) != CUBLAS_STATUS_SUCCESS)
		return 3;
	return 0;
}

extern "C" void ca_teardown(void)
{
	if (g.ones)
		cudaFree(g.ones);
	if (g.handle)
		cublasDestroy(g.handle);
	g = state{};
}
