// tril(A @ B) for lower triangular A and B: C[i][j] = sum over k in [j, i] of A[i][k] B[k][j] for
// j <= i, zero above the diagonal. Correct only because the task guarantees both upper triangles
// are zero (it reads none of them): about a sixth of the multiply-adds of a full GEMM.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

#include "f32_tensor.h"

namespace {

constexpr int TILE = 16;

__global__ void tril_mm(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C,
			int64_t n)
{
	int64_t i = (int64_t)blockIdx.y * TILE + threadIdx.y, j = (int64_t)blockIdx.x * TILE + threadIdx.x;
	if (i >= n || j >= n)
		return;
	float s = 0.0f;
	if (j <= i)
		for (int64_t k = j; k <= i; ++k)
			s += A[i * n + k] * B[k * n + j];
	C[i * n + j] = s;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 2 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *A = &args[0], *B = &args[1], *C = &outputs[0];
	if (!f32_cuda(A) || !f32_cuda(B) || !f32_cuda(C) || A->ndim != 2 || A->shape[0] != A->shape[1] ||
	    numel(B) != numel(A) || numel(C) != numel(A))
		return 2;
	int64_t n = A->shape[0];
	dim3 block(TILE, TILE), grid((unsigned)((n + TILE - 1) / TILE), (unsigned)((n + TILE - 1) / TILE));
	tril_mm<<<grid, block, 0, stream>>>(static_cast<const float *>(A->data), static_cast<const float *>(B->data),
					    static_cast<float *>(C->data), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
