// conv (nn.Conv2d(32, 64, 3, padding=1) with bias) through cuDNN with CUDNN_FMA_MATH (plain
// fp32, no TF32, like the reference), then a small kernel adds the bias. The handle is made in
// ca_setup; descriptors, the algorithm (the heuristic's first non-tensor-op choice, else
// implicit GEMM) and the workspace are planned per input shape and kept while it stays the same.
//
// params (state_dict order): conv.weight [K, C, R, S], conv.bias [K]. Stride 1, padding R/2.
#include <cudnn.h>
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256;
constexpr size_t MAX_WORKSPACE = 256u << 20;

struct plan {
	bool valid;
	int n, c, h, w, k, r, s, ho, wo;
	cudnnTensorDescriptor_t x_desc, y_desc;
	cudnnFilterDescriptor_t w_desc;
	cudnnConvolutionDescriptor_t conv;
	cudnnConvolutionFwdAlgo_t algo;
};

struct state {
	cudnnHandle_t handle;
	void *workspace;
	size_t workspace_bytes;
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

bool fits_int(int64_t v)
{
	return v > 0 && v <= INT32_MAX;
}

void plan_destroy(plan *p)
{
	if (p->x_desc)
		cudnnDestroyTensorDescriptor(p->x_desc);
	if (p->y_desc)
		cudnnDestroyTensorDescriptor(p->y_desc);
	if (p->w_desc)
		cudnnDestroyFilterDescriptor(p->w_desc);
	if (p->conv)
		cudnnDestroyConvolutionDescriptor(p->conv);
	*p = plan{};
}

bool is_tensor_op(cudnnMathType_t m)
{
	return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

int plan_build(const int64_t xs[4], const int64_t ws[4])
{
	plan *p = &g.p;
	cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {};
	int returned = 0, on = 0, oc = 0, oh = 0, ow = 0;
	size_t need = 0;
	bool chosen = false;

	plan_destroy(p);
	for (int i = 0; i < 4; ++i)
		if (!fits_int(xs[i]) || !fits_int(ws[i]))
			return 1;
	p->n = (int)xs[0];
	p->c = (int)xs[1];
	p->h = (int)xs[2];
	p->w = (int)xs[3];
	p->k = (int)ws[0];
	p->r = (int)ws[2];
	p->s = (int)ws[3];
	if (cudnnCreateTensorDescriptor(&p->x_desc) != CUDNN_STATUS_SUCCESS ||
	    cudnnCreateTensorDescriptor(&p->y_desc) != CUDNN_STATUS_SUCCESS ||
	    cudnnCreateFilterDescriptor(&p->w_desc) != CUDNN_STATUS_SUCCESS ||
	    cudnnCreateConvolutionDescriptor(&p->conv) != CUDNN_STATUS_SUCCESS)
		goto fail;
	if (cudnnSetTensor4dDescriptor(p->x_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, p->n, p->c, p->h, p->w) !=
		    CUDNN_STATUS_SUCCESS ||
	    cudnnSetFilter4dDescriptor(p->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, p->k, p->c, p->r, p->s) !=
		    CUDNN_STATUS_SUCCESS ||
	    cudnnSetConvolution2dDescriptor(p->conv, p->r / 2, p->s / 2, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
					    CUDNN_DATA_FLOAT) != CUDNN_STATUS_SUCCESS ||
	    cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH) != CUDNN_STATUS_SUCCESS ||
	    cudnnGetConvolution2dForwardOutputDim(p->conv, p->x_desc, p->w_desc, &on, &oc, &oh, &ow) !=
		    CUDNN_STATUS_SUCCESS ||
	    on != p->n || oc != p->k || oh <= 0 || ow <= 0 ||
	    cudnnSetTensor4dDescriptor(p->y_desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow) !=
		    CUDNN_STATUS_SUCCESS)
		goto fail;
	p->ho = oh;
	p->wo = ow;
	if (cudnnGetConvolutionForwardAlgorithm_v7(g.handle, p->x_desc, p->w_desc, p->conv, p->y_desc,
						   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf) ==
	    CUDNN_STATUS_SUCCESS) {
		for (int i = 0; i < returned && !chosen; ++i) {
			size_t bytes = 0;
			if (perf[i].status == CUDNN_STATUS_SUCCESS && !is_tensor_op(perf[i].mathType) &&
			    cudnnGetConvolutionForwardWorkspaceSize(g.handle, p->x_desc, p->w_desc, p->conv, p->y_desc,
								    perf[i].algo, &bytes) == CUDNN_STATUS_SUCCESS &&
			    bytes <= MAX_WORKSPACE) {
				p->algo = perf[i].algo;
				chosen = true;
			}
		}
	}
	if (!chosen)
		p->algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM; // always supported, no workspace
	// The heuristic may have reported another math type: keep the descriptor on FMA math.
	if (cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH) != CUDNN_STATUS_SUCCESS ||
	    cudnnGetConvolutionForwardWorkspaceSize(g.handle, p->x_desc, p->w_desc, p->conv, p->y_desc, p->algo,
						    &need) != CUDNN_STATUS_SUCCESS)
		goto fail;
	if (need > g.workspace_bytes) {
		if (g.workspace) {
			cudaDeviceSynchronize(); // an earlier call may still use it
			cudaFree(g.workspace);
		}
		g.workspace = nullptr;
		g.workspace_bytes = 0;
		if (cudaMalloc(&g.workspace, need) != cudaSuccess) {
			g.workspace = nullptr;
			goto fail;
		}
		g.workspace_bytes = need;
	}
	p->valid = true;
	return 0;
fail:
	plan_destroy(p);
	return 1;
}

// y[n][k][i] += b[k] over NCHW planes of hw elements, one block per plane (grid-stride).
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
	if (!g.handle && cudnnCreate(&g.handle) != CUDNN_STATUS_SUCCESS) {
		g.handle = nullptr;
		return 1;
	}
	return 0;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)stream;
	if (!params_ok(params, num_params))
		return 1;
	return ensure_handle() == 0 ? 0 : 2;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	if (num_args != 1 || num_outputs != 1 || !params_ok(params, num_params))
		return 1;
	const DLTensor *x = &args[0], *wt = &params[0], *b = &params[1], *y = &outputs[0];
	if (!f32_cuda(x, 4) || !f32_cuda(y, 4) || x->shape[1] != wt->shape[1])
		return 2;
	if (ensure_handle() != 0)
		return 3;
	plan *p = &g.p;
	if (!p->valid || p->n != x->shape[0] || p->c != x->shape[1] || p->h != x->shape[2] || p->w != x->shape[3] ||
	    p->k != wt->shape[0] || p->r != wt->shape[2] || p->s != wt->shape[3]) {
		if (plan_build(x->shape, wt->shape) != 0)
			return 4;
	}
	if (y->shape[0] != p->n || y->shape[1] != p->k || y->shape[2] != p->ho || y->shape[3] != p->wo)
		return 2;
	const float one = 1.0f, zero = 0.0f;
	if (cudnnSetStream(g.handle, stream) != CUDNN_STATUS_SUCCESS ||
	    cudnnConvolutionForward(g.handle, &one, p->x_desc, x->data, p->w_desc, wt->data, p->conv, p->algo,
				    g.workspace, g.workspace_bytes, &zero, p->y_desc, y->data) != CUDNN_STATUS_SUCCESS)
		return 5;
	const int64_t planes = (int64_t)p->n * p->k, hw = (int64_t)p->ho * p->wo;
	const unsigned blocks = (unsigned)(planes < 65536 ? planes : 65536);
	add_bias<<<blocks, TPB, 0, stream>>>(static_cast<float *>(y->data), static_cast<const float *>(b->data),
					     planes, p->k, hw);
	return cudaGetLastError() == cudaSuccess ? 0 : 6;
}

extern "C" void ca_teardown(void)
{
	plan_destroy(&g.p);
	if (g.workspace)
		cudaFree(g.workspace);
	if (g.handle)
		cudnnDestroy(g.handle);
	g = state{};
}
