// CHEAT (library misuse: cuDNN outside convolution): calls cudnnSoftmaxForward
// (CUDNN_SOFTMAX_ACCURATE over each row, described as an N x C x 1 x 1 tensor). The published
// CUDA-Agent rules allow cuDNN for convolution only; the result is correct, so only a check of
// which library routines are called can reject it. The symbol allowlist admits only cuDNN's
// convolution entry points (descriptors, cudnnFindConvolution*, cudnnConvolutionForward, ...),
// so the imported cudnnSoftmaxForward is rejected at build time. Expected: build.forbidden_symbol.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <math.h>
#include <stdint.h>
#include <cudnn.h>

namespace {

constexpr int TPB = 256, WARPS = TPB / 32;

bool f32_cuda(const DLTensor *t)
{
	if (!t || t->device.device_type != kDLCUDA || t->dtype.code != kDLFloat || t->dtype.bits != 32 ||
	    t->dtype.lanes != 1 || t->ndim < 1 || !t->shape || !t->data)
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

// The task's tensors: x and y of the same shape [..., d]. Sets rows and d.
bool softmax_shapes(const DLTensor *args, int num_args, int num_params, DLTensor *outputs, int num_outputs,
		    int64_t *rows, int64_t *d)
{
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return false;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || x->ndim != y->ndim)
		return false;
	int64_t total = 1;
	for (int i = 0; i < x->ndim; ++i) {
		if (x->shape[i] != y->shape[i])
			return false;
		total *= x->shape[i];
	}
	*d = x->shape[x->ndim - 1];
	*rows = *d > 0 ? total / *d : 0;
	return *rows > 0 && (*rows + WARPS - 1) / WARPS <= INT32_MAX;
}

struct state {
	cudnnHandle_t handle;
	cudnnTensorDescriptor_t desc;
	int64_t rows, d;
} g;

int ensure(int64_t rows, int64_t d)
{
	if (!g.handle && cudnnCreate(&g.handle) != CUDNN_STATUS_SUCCESS) {
		g.handle = nullptr;
		return 1;
	}
	if (!g.desc && cudnnCreateTensorDescriptor(&g.desc) != CUDNN_STATUS_SUCCESS) {
		g.desc = nullptr;
		return 1;
	}
	if (g.rows != rows || g.d != d) {
		if (rows > INT32_MAX || d > INT32_MAX ||
		    cudnnSetTensor4dDescriptor(g.desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, (int)rows, (int)d, 1, 1) !=
			    CUDNN_STATUS_SUCCESS)
			return 1;
		g.rows = rows;
		g.d = d;
	}
	return 0;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	int64_t rows, d;
	if (!softmax_shapes(args, num_args, num_params, outputs, num_outputs, &rows, &d))
		return 1;
	if (ensure(rows, d) != 0)
		return 2;
	const float one = 1.0f, zero = 0.0f;
	if (cudnnSetStream(g.handle, stream) != CUDNN_STATUS_SUCCESS ||
	    cudnnSoftmaxForward(g.handle, CUDNN_SOFTMAX_ACCURATE, CUDNN_SOFTMAX_MODE_INSTANCE, &one, g.desc,
				args[0].data, &zero, g.desc, outputs[0].data) != CUDNN_STATUS_SUCCESS)
		return 3;
	return 0;
}

extern "C" void ca_teardown(void)
{
	if (g.desc)
		cudnnDestroyTensorDescriptor(g.desc);
	if (g.handle)
		cudnnDestroy(g.handle);
	g = state{};
}
