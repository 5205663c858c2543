// gemm (y = x @ W^T) with cuBLASLt: CUBLAS_COMPUTE_32F (no TF32), the heuristic's first
// algorithm for the shapes, and a 32 MiB workspace allocated once. ca_setup creates the handle
// and the workspace and plans for the task's input (1024 rows); ca_forward re-plans when the
// shapes differ. Layouts as for cublasSgemm: column-major D^T (N x M) = op_T(W^T) x^T.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr size_t WORKSPACE_BYTES = 32u << 20;
constexpr int64_t DEFAULT_M = 1024;

struct plan {
	bool valid;
	int64_t m, n, k;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t a, b, c;
	cublasLtMatmulAlgo_t algo;
};

struct state {
	cublasLtHandle_t lt;
	void *workspace;
	plan p;
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

void plan_destroy(plan *p)
{
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	if (p->a)
		cublasLtMatrixLayoutDestroy(p->a);
	if (p->b)
		cublasLtMatrixLayoutDestroy(p->b);
	if (p->c)
		cublasLtMatrixLayoutDestroy(p->c);
	*p = plan{};
}

int plan_build(int64_t m, int64_t n, int64_t k)
{
	plan *p = &g.p;
	cublasLtMatmulPreference_t pref = nullptr;
	cublasLtMatmulHeuristicResult_t result = {};
	int returned = 0, rc = 1;
	const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
	const size_t ws = WORKSPACE_BYTES;

	plan_destroy(p);
	if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
	    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a) !=
		    CUBLAS_STATUS_SUCCESS ||
	    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b) !=
		    CUBLAS_STATUS_SUCCESS)
		goto out;
	// A: W as column-major K x N (ld K), used transposed; B: x as column-major K x M (ld K);
	// C = D: y as column-major N x M (ld N).
	if (cublasLtMatrixLayoutCreate(&p->a, CUDA_R_32F, (uint64_t)k, (uint64_t)n, k) != CUBLAS_STATUS_SUCCESS ||
	    cublasLtMatrixLayoutCreate(&p->b, CUDA_R_32F, (uint64_t)k, (uint64_t)m, k) != CUBLAS_STATUS_SUCCESS ||
	    cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, (uint64_t)n, (uint64_t)m, n) != CUBLAS_STATUS_SUCCESS)
		goto out;
	if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS ||
	    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) !=
		    CUBLAS_STATUS_SUCCESS)
		goto out;
	if (cublasLtMatmulAlgoGetHeuristic(g.lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &returned) !=
		    CUBLAS_STATUS_SUCCESS ||
	    returned < 1 || result.state != CUBLAS_STATUS_SUCCESS || result.workspaceSize > WORKSPACE_BYTES)
		goto out;
	p->algo = result.algo;
	p->m = m;
	p->n = n;
	p->k = k;
	p->valid = true;
	rc = 0;
out:
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (rc)
		plan_destroy(p);
	return rc;
}

int ensure_state(void)
{
	if (!g.lt && cublasLtCreate(&g.lt) != CUBLAS_STATUS_SUCCESS) {
		g.lt = nullptr;
		return 1;
	}
	if (!g.workspace && cudaMalloc(&g.workspace, WORKSPACE_BYTES) != cudaSuccess) {
		g.workspace = nullptr;
		return 1;
	}
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)stream;
	if (num_params != 1 || !f32_cuda(&params[0], 2))
		return 1;
	if (ensure_state() != 0)
		return 2;
	const int64_t n = params[0].shape[0], k = params[0].shape[1];
	if (g.p.valid && g.p.n == n && g.p.k == k)
		return 0;
	return plan_build(DEFAULT_M, n, k) == 0 ? 0 : 3;
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
	if (ensure_state() != 0)
		return 3;
	if (!g.p.valid || g.p.m != m || g.p.n != n || g.p.k != k) {
		if (plan_build(m, n, k) != 0)
			return 4;
	}
	const float one = 1.0f, zero = 0.0f;
	if (cublasLtMatmul(g.lt, g.p.op, &one, w->data, g.p.a, x->data, g.p.b, &zero, y->data, g.p.c, y->data,
			   g.p.c, &g.p.algo, g.workspace, WORKSPACE_BYTES, stream) != CUBLAS_STATUS_SUCCESS)
		return 5;
	return 0;
}

extern "C" void ca_teardown(void)
{
	plan_destroy(&g.p);
	if (g.workspace)
		cudaFree(g.workspace);
	if (g.lt)
		cublasLtDestroy(g.lt);
	g = state{};
}
