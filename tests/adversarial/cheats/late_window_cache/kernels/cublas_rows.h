// cublas_rows.h: the gemm task's y = x W^T (row-major fp32; x [M, K], W [N, K], y [M, N]) with
// cublasSgemm over a range of rows of y, as honest/cublas_sgemm computes all of them. Linked into
// the kernels/ of the GEMM cheats that do their work with cuBLAS (tests/adversarial/shared/).
#ifndef CUBLAS_ROWS_H
#define CUBLAS_ROWS_H

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>

#include <stdint.h>

namespace gemm {

struct problem {
	const float *x, *w;
	float *y;
	int64_t m, n, k;
};

inline bool f32_cuda(const DLTensor *t, int ndim)
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

// The task's tensors, checked: false when they are not x [M, K], W [N, K] and y [M, N] in fp32.
inline bool problem_of(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
		       const DLTensor *outputs, int num_outputs, problem *p)
{
	if (num_args != 1 || num_params != 1 || num_outputs != 1)
		return false;
	const DLTensor *x = &args[0], *w = &params[0], *y = &outputs[0];
	if (!f32_cuda(x, 2) || !f32_cuda(w, 2) || !f32_cuda(y, 2))
		return false;
	p->m = x->shape[0];
	p->k = x->shape[1];
	p->n = w->shape[0];
	p->x = static_cast<const float *>(x->data);
	p->w = static_cast<const float *>(w->data);
	p->y = static_cast<float *>(y->data);
	return w->shape[1] == p->k && y->shape[0] == p->m && y->shape[1] == p->n && p->m > 0 && p->n > 0 &&
	       p->k > 0 && p->m <= INT32_MAX && p->n <= INT32_MAX && p->k <= INT32_MAX;
}

// A handle in plain fp32 (CUBLAS_DEFAULT_MATH: no TF32, like the reference).
inline bool create_handle(cublasHandle_t *h)
{
	if (*h)
		return true;
	if (cublasCreate(h) != CUBLAS_STATUS_SUCCESS) {
		*h = nullptr;
		return false;
	}
	return cublasSetMathMode(*h, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS;
}

// Rows [row0, row0 + rows) of y on `stream`. Row-major y = x W^T is column-major y^T = W x^T:
// W's memory read transposed (ld K), x's as is (ld K), y's columns row0.. (ld N).
inline bool gemm_rows(cublasHandle_t h, cudaStream_t stream, const problem &p, int64_t row0, int64_t rows)
{
	if (rows <= 0)
		return true;
	const float one = 1.0f, zero = 0.0f;
	return cublasSetStream(h, stream) == CUBLAS_STATUS_SUCCESS &&
	       cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)p.n, (int)rows, (int)p.k, &one, p.w, (int)p.k,
			   p.x + row0 * p.k, (int)p.k, &zero, p.y + row0 * p.n, (int)p.n) == CUBLAS_STATUS_SUCCESS;
}

} // namespace gemm

#endif
