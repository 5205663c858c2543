// conv_relu: y = relu(conv2d(x, W, b)), stride 1, padding R/2 (the task: 3x3, padding 1), NCHW fp32.
//
// cuDNN forward convolution with CUDNN_FMA_MATH (plain fp32, no TF32, like the reference), then one
// small kernel adds the bias and applies ReLU in place (y is 25.7 MB, mostly still in L2 right
// after the convolution). ca_setup creates the handle and plans for the task's input
// (16 x C x 56 x 56): descriptors, the fastest FMA-math algorithm by cudnnFindConvolutionForward-
// AlgorithmEx on scratch buffers, and its workspace; later ca_setup calls (new parameter values)
// keep a plan whose shapes still match. ca_forward re-plans if the input shape differs.
//
// params (state_dict order): conv.weight [K, C, R, S], conv.bias [K].
#include <cudnn.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int64_t DEFAULT_N = 16, DEFAULT_H = 56, DEFAULT_W = 56; // the task's input, planned in ca_setup
constexpr size_t FIND_WORKSPACE_BYTES = 256u << 20;                  // offered to algorithms during find
constexpr int TPB = 256;

bool is_cuda_f32_contig(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 0 || (t->ndim > 0 && !t->shape))
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

template <typename T> T *data_ptr(const DLTensor *t)
{
	return reinterpret_cast<T *>(static_cast<char *>(t->data) + t->byte_offset);
}

struct conv_plan {
	bool valid;
	int n, c, h, w, k, r, s; // input N, C, H, W; filter K, R, S
	int ho, wo;
	cudnnTensorDescriptor_t x_desc, y_desc;
	cudnnFilterDescriptor_t w_desc;
	cudnnConvolutionDescriptor_t conv_desc;
	cudnnConvolutionFwdAlgo_t algo;
};

struct state {
	cudnnHandle_t handle;
	void *workspace;
	size_t workspace_bytes;
	conv_plan plan;
} g;

void plan_destroy(conv_plan *p)
{
	if (p->x_desc)
		cudnnDestroyTensorDescriptor(p->x_desc);
	if (p->y_desc)
		cudnnDestroyTensorDescriptor(p->y_desc);
	if (p->w_desc)
		cudnnDestroyFilterDescriptor(p->w_desc);
	if (p->conv_desc)
		cudnnDestroyConvolutionDescriptor(p->conv_desc);
	*p = conv_plan{};
}

bool fits_int(int64_t v)
{
	return v > 0 && v <= INT32_MAX;
}

bool ensure_workspace(size_t bytes)
{
	if (bytes <= g.workspace_bytes)
		return true;
	if (g.workspace) {
		cudaDeviceSynchronize(); // an earlier forward may still be using it
		cudaFree(g.workspace);
	}
	g.workspace = nullptr;
	g.workspace_bytes = 0;
	if (cudaMalloc(&g.workspace, bytes) != cudaSuccess) {
		g.workspace = nullptr;
		return false;
	}
	g.workspace_bytes = bytes;
	return true;
}

bool tensor_op_math(cudnnMathType_t m)
{
	return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Plans for input n x c x h x w and filter k x c x r x s. x and y may be null: scratch buffers are
// then allocated for cudnnFind. w is the real filter (find only reads it). Returns 0 or nonzero.
int plan_build(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s, const void *x,
	       const void *wt, void *y, cudaStream_t stream)
{
	plan_destroy(&g.plan);
	conv_plan *p = &g.plan;
	void *x_scratch = nullptr, *y_scratch = nullptr, *find_ws = nullptr;
	size_t find_ws_bytes = FIND_WORKSPACE_BYTES;
	int on = 0, oc = 0, oh = 0, ow = 0, returned = 0;
	cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {};
	bool chosen = false;
	size_t need = 0;
	int rc = 1;

	if (!fits_int(n) || !fits_int(c) || !fits_int(h) || !fits_int(w) || !fits_int(k) || !fits_int(r) ||
	    !fits_int(s))
		goto out;
	p->n = (int)n;
	p->c = (int)c;
	p->h = (int)h;
	p->w = (int)w;
	p->k = (int)k;
	p->r = (int)r;
	p->s = (int)s;
	if (cudnnCreateTensorDescriptor(&p->x_desc) != CUDNN_STATUS_SUCCESS ||
	    cudnnCreateTensorDescriptor(&p->y_desc) != CUDNN_STATUS_SUCCESS ||
	    cudnnCreateFilterDescriptor(&p->w_desc) != CUDNN_STATUS_SUCCESS ||
	    cudnnCreateConvolutionDescriptor(&p->conv_desc) != CUDNN_STATUS_SUCCESS)
		goto out;
	if (cudnnSetTensor4dDescriptor(p->x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p->n, p->c, p->h, p->w) !=
		    CUDNN_STATUS_SUCCESS ||
	    cudnnSetFilter4dDescriptor(p->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p->k, p->c, p->r, p->s) !=
		    CUDNN_STATUS_SUCCESS ||
	    cudnnSetConvolution2dDescriptor(p->conv_desc, p->r / 2, p->s / 2, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
					    CUDNN_DATA_FLOAT) != CUDNN_STATUS_SUCCESS ||
	    cudnnSetConvolutionMathType(p->conv_desc, CUDNN_FMA_MATH) != CUDNN_STATUS_SUCCESS ||
	    cudnnGetConvolution2dForwardOutputDim(p->conv_desc, p->x_desc, p->w_desc, &on, &oc, &oh, &ow) !=
		    CUDNN_STATUS_SUCCESS ||
	    on != p->n || oc != p->k || oh <= 0 || ow <= 0 ||
	    cudnnSetTensor4dDescriptor(p->y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow) !=
		    CUDNN_STATUS_SUCCESS)
		goto out;
	p->ho = oh;
	p->wo = ow;
	if (cudnnSetStream(g.handle, stream) != CUDNN_STATUS_SUCCESS)
		goto out;

	// 1. Measure with cudnnFind on real or scratch buffers.
	if (!x) {
		if (cudaMalloc(&x_scratch, (size_t)n * (size_t)c * (size_t)h * (size_t)w * sizeof(float)) != cudaSuccess) {
			x_scratch = nullptr;
		} else if (cudaMemsetAsync(x_scratch, 0, (size_t)n * (size_t)c * (size_t)h * (size_t)w * sizeof(float),
					   stream) != cudaSuccess) {
			goto out;
		}
		x = x_scratch;
	}
	if (!y) {
		if (cudaMalloc(&y_scratch, (size_t)on * (size_t)oc * (size_t)oh * (size_t)ow * sizeof(float)) != cudaSuccess)
			y_scratch = nullptr;
		y = y_scratch;
	}
	if (cudaMalloc(&find_ws, find_ws_bytes) != cudaSuccess) {
		find_ws = nullptr;
		find_ws_bytes = 0;
	}
	if (x && y &&
	    cudnnFindConvolutionForwardAlgorithmEx(g.handle, p->x_desc, x, p->w_desc, wt, p->conv_desc, p->y_desc, y,
						   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf, find_ws,
						   find_ws_bytes) == CUDNN_STATUS_SUCCESS) {
		for (int i = 0; i < returned && !chosen; ++i) {
			if (perf[i].status == CUDNN_STATUS_SUCCESS && !tensor_op_math(perf[i].mathType)) {
				p->algo = perf[i].algo;
				chosen = true;
			}
		}
	}
	(void)cudaGetLastError(); // a failed scratch cudaMalloc leaves no sticky error, but be sure

	// 2. Else the heuristic, 3. else implicit GEMM (always supported, no workspace).
	if (!chosen &&
	    cudnnGetConvolutionForwardAlgorithm_v7(g.handle, p->x_desc, p->w_desc, p->conv_desc, p->y_desc,
						   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf) == CUDNN_STATUS_SUCCESS) {
		for (int i = 0; i < returned && !chosen; ++i) {
			size_t bytes = 0;
			if (perf[i].status == CUDNN_STATUS_SUCCESS && !tensor_op_math(perf[i].mathType) &&
			    cudnnGetConvolutionForwardWorkspaceSize(g.handle, p->x_desc, p->w_desc, p->conv_desc, p->y_desc,
								    perf[i].algo, &bytes) == CUDNN_STATUS_SUCCESS &&
			    bytes <= FIND_WORKSPACE_BYTES) {
				p->algo = perf[i].algo;
				chosen = true;
			}
		}
	}
	if (!chosen) {
		p->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
		chosen = true;
	}
	// The descriptor keeps FMA math: whatever the perf entry reported, no tensor-op math runs.
	if (cudnnSetConvolutionMathType(p->conv_desc, CUDNN_FMA_MATH) != CUDNN_STATUS_SUCCESS ||
	    cudnnGetConvolutionForwardWorkspaceSize(g.handle, p->x_desc, p->w_desc, p->conv_desc, p->y_desc, p->algo,
						    &need) != CUDNN_STATUS_SUCCESS)
		goto out;
	if (need > 0 && !ensure_workspace(need))
		goto out;
	p->valid = true;
	rc = 0;
out:
	// cudnnFind is synchronous, but the scratch memset was on `stream`: drain it before freeing.
	if (x_scratch || y_scratch || find_ws)
		cudaStreamSynchronize(stream);
	if (x_scratch)
		cudaFree(x_scratch);
	if (y_scratch)
		cudaFree(y_scratch);
	if (find_ws)
		cudaFree(find_ws);
	if (rc != 0)
		plan_destroy(&g.plan);
	return rc;
}

// In place on NCHW y: y = max(y + b[k], 0), one block per (n, k) plane, grid-stride over planes.
__global__ void __launch_bounds__(TPB) bias_relu_vec4(float4 *__restrict__ y, const float *__restrict__ b,
						      int64_t planes, int64_t k, int64_t hw4)
{
	for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
		const float bk = __ldg(b + pl % k);
		float4 *yp = y + pl * hw4;
		for (int64_t i = threadIdx.x; i < hw4; i += TPB) {
			float4 v = yp[i];
			v.x = fmaxf(v.x + bk, 0.f);
			v.y = fmaxf(v.y + bk, 0.f);
			v.z = fmaxf(v.z + bk, 0.f);
			v.w = fmaxf(v.w + bk, 0.f);
			yp[i] = v;
		}
	}
}

__global__ void __launch_bounds__(TPB) bias_relu_scalar(float *__restrict__ y, const float *__restrict__ b,
							int64_t planes, int64_t k, int64_t hw)
{
	for (int64_t pl = blockIdx.x; pl < planes; pl += gridDim.x) {
		const float bk = __ldg(b + pl % k);
		float *yp = y + pl * hw;
		for (int64_t i = threadIdx.x; i < hw; i += TPB)
			yp[i] = fmaxf(yp[i] + bk, 0.f);
	}
}

bool check_params(const DLTensor *params, int num_params)
{
	if (num_params != 2)
		return false;
	const DLTensor *w = &params[0], *b = &params[1];
	return is_cuda_f32_contig(w) && is_cuda_f32_contig(b) && w->ndim == 4 && b->ndim == 1 &&
	       b->shape[0] == w->shape[0];
}

int ensure_handle(void)
{
	if (!g.handle && cudnnCreate(&g.handle) != CUDNN_STATUS_SUCCESS) {
		g.handle = nullptr;
		return 1;
	}
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	if (!check_params(params, num_params))
		return 1;
	if (ensure_handle() != 0)
		return 2;
	const DLTensor *w = &params[0];
	const conv_plan *p = &g.plan;
	// The plan depends on shapes only: new parameter values (each verification trial has its own)
	// keep it, whether it was made here or re-made by ca_forward for the real input shape.
	if (p->valid && p->c == w->shape[1] && p->k == w->shape[0] && p->r == w->shape[2] && p->s == w->shape[3])
		return 0;
	if (plan_build(DEFAULT_N, w->shape[1], DEFAULT_H, DEFAULT_W, w->shape[0], w->shape[2], w->shape[3], nullptr,
		       data_ptr<const void>(w), nullptr, stream) != 0)
		return 3;
	return 0;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_outputs != 1 || !check_params(params, num_params))
		return 1;
	const DLTensor *x = &args[0], *wt = &params[0], *b = &params[1], *y = &outputs[0];
	if (!is_cuda_f32_contig(x) || !is_cuda_f32_contig(y) || x->ndim != 4 || y->ndim != 4 ||
	    x->shape[1] != wt->shape[1])
		return 2;
	for (int i = 0; i < 4; ++i)
		if (x->shape[i] == 0)
			return 2; // torch would have produced an empty output; not this task's shape
	if (ensure_handle() != 0)
		return 6;
	const void *xp = data_ptr<const void>(x), *wp = data_ptr<const void>(wt);
	float *yp = data_ptr<float>(y);
	const float *bp = data_ptr<const float>(b);
	const conv_plan *p = &g.plan;
	if (!p->valid || p->n != x->shape[0] || p->c != x->shape[1] || p->h != x->shape[2] || p->w != x->shape[3] ||
	    p->k != wt->shape[0] || p->r != wt->shape[2] || p->s != wt->shape[3]) {
		if (plan_build(x->shape[0], x->shape[1], x->shape[2], x->shape[3], wt->shape[0], wt->shape[2],
			       wt->shape[3], xp, wp, yp, stream) != 0)
			return 4;
	}
	if (y->shape[0] != p->n || y->shape[1] != p->k || y->shape[2] != p->ho || y->shape[3] != p->wo)
		return 2;

	const float one = 1.f, zero = 0.f;
	if (cudnnSetStream(g.handle, stream) != CUDNN_STATUS_SUCCESS ||
	    cudnnConvolutionForward(g.handle, &one, p->x_desc, xp, p->w_desc, wp, p->conv_desc, p->algo, g.workspace,
				    g.workspace_bytes, &zero, p->y_desc, yp) != CUDNN_STATUS_SUCCESS)
		return 5;

	const int64_t planes = (int64_t)p->n * p->k, hw = (int64_t)p->ho * p->wo;
	const unsigned blocks = (unsigned)(planes < (1 << 20) ? planes : (1 << 20));
	if (hw % 4 == 0 && (uintptr_t)yp % 16 == 0)
		bias_relu_vec4<<<blocks, TPB, 0, stream>>>(reinterpret_cast<float4 *>(yp), bp, planes, p->k, hw / 4);
	else
		bias_relu_scalar<<<blocks, TPB, 0, stream>>>(yp, bp, planes, p->k, hw);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

extern "C" void ca_teardown(void)
{
	plan_destroy(&g.plan);
	if (g.workspace)
		cudaFree(g.workspace);
	if (g.handle)
		cudnnDestroy(g.handle);
	g = state{};
}
