// lib_stubs.cpp: CPU stand-ins for the CUDA runtime calls and the cuBLAS, cuBLASLt and cuDNN calls
// that the example solutions make, written from the libraries' documented semantics (column-major
// GEMM with op(A) m x k, op(B) k x n, D m x n; cuBLASLt bias epilogue = one bias per row of D;
// cuDNN NCHW cross-correlation), so that a solution's argument mapping is checked against the
// documentation rather than against itself. Every call that takes a stream checks that it is the
// stream the driver passed to ca_forward/ca_setup (emu_expected_stream).
//
// Environment switches, to drive fallback paths:
//   EMU_LT_NOALGO=1       cublasLtMatmulAlgoGetHeuristic returns no algorithm
//   EMU_LT_FAIL=1         cublasLtMatmul fails
//   EMU_CUDNN_FIND_FAIL=1 cudnnFindConvolutionForwardAlgorithmEx fails
#include "cuda_emu.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstdio>

extern "C" {
cudaStream_t emu_expected_stream = nullptr;
int emu_stream_mismatches = 0;
}

static void check_stream(cudaStream_t s, const char *who)
{
	if (s != emu_expected_stream) {
		fprintf(stderr, "emu: %s on stream %p, expected %p\n", who, (void *)s, (void *)emu_expected_stream);
		++emu_stream_mismatches;
	}
}

static bool env_on(const char *name)
{
	const char *v = getenv(name);
	return v && v[0] == '1';
}

// ---- CUDA runtime ----
extern "C" {
cudaError_t cudaGetLastError(void)
{
	cudaError_t e = emu_last_error;
	emu_last_error = cudaSuccess;
	return e;
}
cudaError_t cudaMalloc(void **p, size_t n)
{
	*p = malloc(n ? n : 1);
	return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
	check_stream(s, "cudaMemsetAsync");
	memset(p, v, n);
	return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void)
{
	return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
	(void)s;
	return cudaSuccess;
}
}

// Kernel launches check their stream too (called from emu_launch via this hook).
void emu_check_launch_stream(cudaStream_t s)
{
	check_stream(s, "kernel launch");
}

// ---- cuBLAS ----
struct cublasContext {
	cudaStream_t stream;
};

// Column-major C[m x n] = alpha * op(A) * op(B) + beta * C.
static void ref_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
		     const float *b, int64_t ldb, float beta, const float *c, int64_t ldc, float *d, int64_t ldd)
{
	for (int64_t j = 0; j < n; ++j)
		for (int64_t i = 0; i < m; ++i) {
			double acc = 0;
			for (int64_t p = 0; p < k; ++p) {
				const float av = ta ? a[p + i * lda] : a[i + p * lda];
				const float bv = tb ? b[j + p * ldb] : b[p + j * ldb];
				acc += (double)av * bv;
			}
			const double prev = beta != 0.f ? (double)beta * c[i + j * ldc] : 0.0;
			d[i + j * ldd] = (float)(alpha * acc + prev);
		}
}

extern "C" {
cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
	*h = new cublasContext{nullptr};
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode)
{
	(void)h;
	return mode == CUBLAS_DEFAULT_MATH || mode == CUBLAS_PEDANTIC_MATH ? CUBLAS_STATUS_SUCCESS
									   : CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			      const float *alpha, const float *a, int lda, const float *b, int ldb, const float *beta,
			      float *c, int ldc)
{
	check_stream(h->stream, "cublasSgemm");
	const bool tra = ta == CUBLAS_OP_T, trb = tb == CUBLAS_OP_T;
	// Documented constraints: lda >= max(1, rows of A as stored), likewise ldb and ldc.
	if (lda < (tra ? k : m) || ldb < (trb ? n : k) || ldc < m)
		return CUBLAS_STATUS_INVALID_VALUE;
	ref_gemm(tra, trb, m, n, k, *alpha, a, lda, b, ldb, *beta, c, ldc, c, ldc);
	return CUBLAS_STATUS_SUCCESS;
}
}

// ---- cuBLASLt ----
struct cublasLtContext {
	int unused;
};
struct lt_desc {
	cublasComputeType_t compute;
	cublasOperation_t ta, tb;
	cublasLtEpilogue_t epi;
	const void *bias;
	cudaDataType_t bias_type;
};
struct lt_layout {
	cudaDataType type;
	uint64_t rows, cols;
	int64_t ld;
};
static_assert(sizeof(lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "desc fits");
static_assert(sizeof(lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");

static lt_desc *D(cublasLtMatmulDesc_t d)
{
	return reinterpret_cast<lt_desc *>(d);
}
static lt_layout *L(cublasLtMatrixLayout_t l)
{
	return reinterpret_cast<lt_layout *>(l);
}

extern "C" {
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
	*h = new cublasLtContext{0};
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale)
{
	if (scale != CUDA_R_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	*d = new cublasLtMatmulDescOpaque_t{};
	*D(*d) = lt_desc{compute, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, CUDA_R_32F};
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
	delete d;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
					      const void *buf, size_t size)
{
	lt_desc *x = D(d);
	switch (attr) {
	case CUBLASLT_MATMUL_DESC_TRANSA:
		if (size != sizeof(int32_t))
			return CUBLAS_STATUS_INVALID_VALUE;
		x->ta = (cublasOperation_t) * (const int32_t *)buf;
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_TRANSB:
		if (size != sizeof(int32_t))
			return CUBLAS_STATUS_INVALID_VALUE;
		x->tb = (cublasOperation_t) * (const int32_t *)buf;
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_EPILOGUE:
		if (size != sizeof(uint32_t))
			return CUBLAS_STATUS_INVALID_VALUE;
		x->epi = (cublasLtEpilogue_t) * (const uint32_t *)buf;
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
		if (size != sizeof(void *))
			return CUBLAS_STATUS_INVALID_VALUE;
		x->bias = *(const void *const *)buf;
		return CUBLAS_STATUS_SUCCESS;
	case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
		if (size != sizeof(int32_t))
			return CUBLAS_STATUS_INVALID_VALUE;
		x->bias_type = (cudaDataType_t) * (const int32_t *)buf;
		return CUBLAS_STATUS_SUCCESS;
	default:
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
					  int64_t ld)
{
	if (ld < (int64_t)rows || ld < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	*l = new cublasLtMatrixLayoutOpaque_t{};
	*L(*l) = lt_layout{type, rows, cols, ld};
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
	delete l;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
	*p = new cublasLtMatmulPreferenceOpaque_t{};
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
	delete p;
	return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
						    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
						    size_t size)
{
	(void)p;
	(void)buf;
	if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && size == sizeof(uint64_t))
		return CUBLAS_STATUS_SUCCESS;
	return CUBLAS_STATUS_INVALID_VALUE;
}

// Shape rules of cublasLtMatmul: op(A) m x k, op(B) k x n, C and D m x n.
static bool lt_shapes_ok(const lt_desc *d, const lt_layout *a, const lt_layout *b, const lt_layout *c,
			 const lt_layout *dd, uint64_t *m, uint64_t *n, uint64_t *k)
{
	const uint64_t am = d->ta == CUBLAS_OP_T ? a->cols : a->rows, ak = d->ta == CUBLAS_OP_T ? a->rows : a->cols;
	const uint64_t bk = d->tb == CUBLAS_OP_T ? b->cols : b->rows, bn = d->tb == CUBLAS_OP_T ? b->rows : b->cols;
	if (ak != bk || c->rows != am || c->cols != bn || dd->rows != am || dd->cols != bn)
		return false;
	if (a->type != CUDA_R_32F || b->type != CUDA_R_32F || c->type != CUDA_R_32F || dd->type != CUDA_R_32F)
		return false;
	*m = am;
	*n = bn;
	*k = ak;
	return true;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
					      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
					      cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int requested,
					      cublasLtMatmulHeuristicResult_t results[], int *returned)
{
	(void)h;
	(void)p;
	uint64_t m, n, k;
	if (!lt_shapes_ok(D(d), L(a), L(b), L(c), L(dd), &m, &n, &k) || requested < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (env_on("EMU_LT_NOALGO")) {
		*returned = 0;
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	results[0] = cublasLtMatmulHeuristicResult_t{};
	results[0].state = CUBLAS_STATUS_SUCCESS;
	results[0].workspaceSize = 1 << 20;
	*returned = 1;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
			      cublasLtMatrixLayout_t ad, const void *B, cublasLtMatrixLayout_t bd, const void *beta,
			      const void *C, cublasLtMatrixLayout_t cd, void *Dp, cublasLtMatrixLayout_t dd,
			      const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream)
{
	(void)h;
	check_stream(stream, "cublasLtMatmul");
	if (env_on("EMU_LT_FAIL"))
		return CUBLAS_STATUS_EXECUTION_FAILED;
	const lt_desc *d = D(desc);
	uint64_t m, n, k;
	if (!algo || !lt_shapes_ok(d, L(ad), L(bd), L(cd), L(dd), &m, &n, &k))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (!ws || ws_bytes < (1 << 20))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (d->compute != CUBLAS_COMPUTE_32F) {
		fprintf(stderr, "emu: cublasLtMatmul compute type %d is not plain fp32\n", (int)d->compute);
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	float *out = (float *)Dp;
	ref_gemm(d->ta == CUBLAS_OP_T, d->tb == CUBLAS_OP_T, (int64_t)m, (int64_t)n, (int64_t)k, *(const float *)alpha,
		 (const float *)A, L(ad)->ld, (const float *)B, L(bd)->ld, *(const float *)beta, (const float *)C,
		 L(cd)->ld, out, L(dd)->ld);
	const bool bias = d->epi == CUBLASLT_EPILOGUE_BIAS || d->epi == CUBLASLT_EPILOGUE_RELU_BIAS;
	const bool relu = d->epi == CUBLASLT_EPILOGUE_RELU || d->epi == CUBLASLT_EPILOGUE_RELU_BIAS;
	if (bias && (!d->bias || d->bias_type != CUDA_R_32F))
		return CUBLAS_STATUS_INVALID_VALUE;
	for (uint64_t j = 0; j < n; ++j)
		for (uint64_t i = 0; i < m; ++i) {
			float &v = out[i + j * (uint64_t)L(dd)->ld];
			if (bias)
				v += ((const float *)d->bias)[i]; // one bias per row of D
			if (relu)
				v = v > 0.f ? v : 0.f;
		}
	return CUBLAS_STATUS_SUCCESS;
}
}

// ---- cuDNN ----
struct cudnnContext {
	cudaStream_t stream;
};
struct cudnnTensorStruct {
	int n, c, h, w;
	bool set;
};
struct cudnnFilterStruct {
	int k, c, r, s;
	bool set;
};
struct cudnnConvolutionStruct {
	int pad_h, pad_w, u, v, dil_h, dil_w;
	cudnnConvolutionMode_t mode;
	cudnnMathType_t math;
	bool set;
};

extern "C" {
cudnnStatus_t cudnnCreate(cudnnHandle_t *h)
{
	*h = new cudnnContext{nullptr};
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h)
{
	delete h;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s)
{
	h->stream = s;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *t)
{
	*t = new cudnnTensorStruct{};
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t t)
{
	delete t;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t t, cudnnTensorFormat_t f, cudnnDataType_t dt, int n,
					 int c, int h, int w)
{
	if (f != CUDNN_TENSOR_NCHW || dt != CUDNN_DATA_FLOAT || n <= 0 || c <= 0 || h <= 0 || w <= 0)
		return CUDNN_STATUS_BAD_PARAM;
	*t = cudnnTensorStruct{n, c, h, w, true};
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *f)
{
	*f = new cudnnFilterStruct{};
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t f)
{
	delete f;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t f, cudnnDataType_t dt, cudnnTensorFormat_t fmt, int k,
					 int c, int r, int s)
{
	if (fmt != CUDNN_TENSOR_NCHW || dt != CUDNN_DATA_FLOAT || k <= 0 || c <= 0 || r <= 0 || s <= 0)
		return CUDNN_STATUS_BAD_PARAM;
	*f = cudnnFilterStruct{k, c, r, s, true};
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *c)
{
	*c = new cudnnConvolutionStruct{};
	c[0]->math = CUDNN_DEFAULT_MATH;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t c)
{
	delete c;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t c, int pad_h, int pad_w, int u, int v,
					      int dil_h, int dil_w, cudnnConvolutionMode_t mode, cudnnDataType_t dt)
{
	if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0 || dt != CUDNN_DATA_FLOAT)
		return CUDNN_STATUS_BAD_PARAM;
	const cudnnMathType_t math = c->math;
	*c = cudnnConvolutionStruct{pad_h, pad_w, u, v, dil_h, dil_w, mode, math, true};
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t c, cudnnMathType_t m)
{
	c->math = m;
	return CUDNN_STATUS_SUCCESS;
}
static int out_dim(int in, int pad, int k, int stride, int dil)
{
	return 1 + (in + 2 * pad - dil * (k - 1) - 1) / stride;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t c,
						    const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t f,
						    int *n, int *k, int *h, int *w)
{
	if (!c->set || !x->set || !f->set || x->c != f->c)
		return CUDNN_STATUS_BAD_PARAM;
	*n = x->n;
	*k = f->k;
	*h = out_dim(x->h, c->pad_h, f->r, c->u, c->dil_h);
	*w = out_dim(x->w, c->pad_w, f->s, c->v, c->dil_w);
	return CUDNN_STATUS_SUCCESS;
}
static bool conv_ok(const cudnnTensorDescriptor_t x, const cudnnFilterDescriptor_t f,
		    const cudnnConvolutionDescriptor_t c, const cudnnTensorDescriptor_t y)
{
	int n, k, h, w;
	return cudnnGetConvolution2dForwardOutputDim(c, x, f, &n, &k, &h, &w) == CUDNN_STATUS_SUCCESS && y->set &&
	       y->n == n && y->c == k && y->h == h && y->w == w;
}
cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
						      const cudnnFilterDescriptor_t f,
						      const cudnnConvolutionDescriptor_t c,
						      const cudnnTensorDescriptor_t y, cudnnConvolutionFwdAlgo_t algo,
						      size_t *bytes)
{
	(void)h;
	if (!conv_ok(x, f, c, y))
		return CUDNN_STATUS_BAD_PARAM;
	*bytes = algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ? 0 : 4096;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
						     const void *xp, const cudnnFilterDescriptor_t f, const void *wp,
						     const cudnnConvolutionDescriptor_t c,
						     const cudnnTensorDescriptor_t y, void *yp, int requested,
						     int *returned, cudnnConvolutionFwdAlgoPerf_t *perf, void *ws,
						     size_t ws_bytes)
{
	check_stream(h->stream, "cudnnFind");
	(void)xp;
	(void)wp;
	(void)ws;
	if (env_on("EMU_CUDNN_FIND_FAIL"))
		return CUDNN_STATUS_INTERNAL_ERROR;
	if (!conv_ok(x, f, c, y) || requested < 2)
		return CUDNN_STATUS_BAD_PARAM;
	// Find overwrites y: scribble on it so a forward that trusts it fails the check.
	float *yf = (float *)yp;
	for (int64_t i = 0, n = (int64_t)y->n * y->c * y->h * y->w; i < n; ++i)
		yf[i] = NAN;
	// A tensor-op entry first (must be skipped), then an FMA one.
	perf[0] = cudnnConvolutionFwdAlgoPerf_t{};
	perf[0].algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
	perf[0].status = CUDNN_STATUS_SUCCESS;
	perf[0].mathType = CUDNN_TENSOR_OP_MATH;
	perf[1] = perf[0];
	perf[1].algo = CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
	perf[1].mathType = CUDNN_FMA_MATH;
	perf[1].memory = ws_bytes >= 4096 ? 4096 : 0;
	*returned = 2;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t x,
						     const cudnnFilterDescriptor_t f,
						     const cudnnConvolutionDescriptor_t c,
						     const cudnnTensorDescriptor_t y, int requested, int *returned,
						     cudnnConvolutionFwdAlgoPerf_t *perf)
{
	(void)h;
	if (!conv_ok(x, f, c, y) || requested < 1)
		return CUDNN_STATUS_BAD_PARAM;
	perf[0] = cudnnConvolutionFwdAlgoPerf_t{};
	perf[0].algo = CUDNN_CONVOLUTION_FWD_ALGO_GEMM;
	perf[0].status = CUDNN_STATUS_SUCCESS;
	perf[0].mathType = CUDNN_DEFAULT_MATH;
	*returned = 1;
	return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void *alpha, const cudnnTensorDescriptor_t x,
				      const void *xp, const cudnnFilterDescriptor_t f, const void *wp,
				      const cudnnConvolutionDescriptor_t c, cudnnConvolutionFwdAlgo_t algo, void *ws,
				      size_t ws_bytes, const void *beta, const cudnnTensorDescriptor_t y, void *yp)
{
	check_stream(h->stream, "cudnnConvolutionForward");
	if (!conv_ok(x, f, c, y))
		return CUDNN_STATUS_BAD_PARAM;
	if (c->math != CUDNN_FMA_MATH) {
		fprintf(stderr, "emu: convolution math type %d is not CUDNN_FMA_MATH\n", (int)c->math);
		return CUDNN_STATUS_NOT_SUPPORTED;
	}
	size_t need = 0;
	cudnnGetConvolutionForwardWorkspaceSize(h, x, f, c, y, algo, &need);
	if (ws_bytes < need || (need > 0 && !ws))
		return CUDNN_STATUS_BAD_PARAM;
	const float *xf = (const float *)xp, *wf = (const float *)wp;
	float *yf = (float *)yp;
	const float a = *(const float *)alpha, b = *(const float *)beta;
	for (int n = 0; n < y->n; ++n)
		for (int k = 0; k < y->c; ++k)
			for (int oh = 0; oh < y->h; ++oh)
				for (int ow = 0; ow < y->w; ++ow) {
					double acc = 0;
					for (int ci = 0; ci < x->c; ++ci)
						for (int r = 0; r < f->r; ++r)
							for (int s = 0; s < f->s; ++s) {
								const int ih = oh * c->u - c->pad_h + r * c->dil_h;
								const int iw = ow * c->v - c->pad_w + s * c->dil_w;
								if (ih < 0 || ih >= x->h || iw < 0 || iw >= x->w)
									continue;
								const int rr = c->mode == CUDNN_CONVOLUTION ? f->r - 1 - r : r;
								const int ss = c->mode == CUDNN_CONVOLUTION ? f->s - 1 - s : s;
								acc += (double)xf[(((int64_t)n * x->c + ci) * x->h + ih) * x->w + iw] *
								       wf[(((int64_t)k * f->c + ci) * f->r + rr) * f->s + ss];
							}
					float &out = yf[(((int64_t)n * y->c + k) * y->h + oh) * y->w + ow];
					out = (float)(a * acc + (b != 0.f ? (double)b * out : 0.0));
				}
	return CUDNN_STATUS_SUCCESS;
}
}
