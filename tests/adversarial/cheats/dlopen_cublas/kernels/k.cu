// CHEAT (dynamic loading): dlopen()s libcublas at run time and dlsym()s cublasSgemv_v2, to reach
// a non-GEMM routine without any cuBLAS symbol at link time (and without the build adding
// -lcublas), then computes the row sums as x times a vector of ones. dlfcn.h, dlopen and dlsym
// are all rejected by the source rules (and dlopen/dlsym by the symbol check).
// Expected: build.forbidden_source (or build.forbidden_symbol).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <dlfcn.h>

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

typedef int (*gemv_fn)(void *handle, int trans, int m, int n, const float *alpha, const float *a, int lda,
		       const float *x, int incx, const float *beta, float *y, int incy);
typedef int (*create_fn)(void **handle);
typedef int (*set_stream_fn)(void *handle, cudaStream_t stream);

void *lib, *handle;
gemv_fn gemv;
set_stream_fn set_stream;
float *ones;
int64_t ones_len;

__global__ void fill_ones(float *v, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		v[i] = 1.0f;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	(void)stream;
	if (lib)
		return 0;
	lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return 1;
	create_fn create = reinterpret_cast<create_fn>(dlsym(lib, "cublasCreate_v2"));
	gemv = reinterpret_cast<gemv_fn>(dlsym(lib, "cublasSgemv_v2"));
	set_stream = reinterpret_cast<set_stream_fn>(dlsym(lib, "cublasSetStream_v2"));
	if (!create || !gemv || !set_stream || create(&handle) != 0)
		return 2;
	return 0;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	int64_t rows, d;
	if (!rowsum_shapes(args, num_args, num_params, outputs, num_outputs, &rows, &d) || !gemv || d > INT32_MAX ||
	    rows > INT32_MAX)
		return 1;
	if (d > ones_len) {
		if (ones) {
			cudaStreamSynchronize(stream);
			cudaFree(ones);
		}
		if (cudaMalloc(&ones, (size_t)d * sizeof(float)) != cudaSuccess)
			return 2;
		fill_ones<<<(unsigned)((d + 255) / 256), 256, 0, stream>>>(ones, d);
		ones_len = d;
	}
	const float one = 1.0f, zero = 0.0f;
	if (set_stream(handle, stream) != 0 ||
	    gemv(handle, 1 /* CUBLAS_OP_T */, (int)d, (int)rows, &one, static_cast<const float *>(args[0].data),
		 (int)d, ones, 1, &zero, static_cast<float *>(outputs[0].data), 1) != 0)
		return 3;
	return 0;
}
