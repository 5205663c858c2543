// CHEAT (launch failure left unreported): launches the kernel with 2048 threads per block, an
// invalid configuration, so nothing runs; it then clears the error with cudaGetLastError() and
// returns 0, as if the call had succeeded, hoping the harness reads stale outputs or times a
// call that did no work. The outputs keep the harness's NaN poison. Expected: verify.mismatch
// (fault.cuda_error if the error reaches the harness).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256;

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

int64_t numel(const DLTensor *t)
{
	int64_t n = 1;
	for (int i = 0; i < t->ndim; ++i)
		n *= t->shape[i];
	return n;
}

// The task's tensors: one input x, one output y of the same size. Returns the element count or -1.
int64_t affine_size(const DLTensor *args, int num_args, int num_params, DLTensor *outputs, int num_outputs)
{
	if (num_args != 1 || num_params != 0 || num_outputs != 1 || !f32_cuda(&args[0]) || !f32_cuda(&outputs[0]) ||
	    numel(&args[0]) != numel(&outputs[0]))
		return -1;
	return numel(&args[0]);
}

__global__ void __launch_bounds__(TPB) affine(const float *__restrict__ x, float *__restrict__ y, int64_t n)
{
	for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < n; i += (int64_t)gridDim.x * TPB)
		y[i] = 2.0f * x[i] + 1.0f;
}

unsigned blocks_for(int64_t n)
{
	const int64_t b = (n + TPB - 1) / TPB;
	return (unsigned)(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	const int64_t n = affine_size(args, num_args, num_params, outputs, num_outputs);
	if (n < 0)
		return 1;
	affine<<<blocks_for(n), 2 * 1024, 0, stream>>>(static_cast<const float *>(args[0].data),
						       static_cast<float *>(outputs[0].data), n);
	(void)cudaGetLastError(); // cudaErrorInvalidConfiguration, swallowed
	return 0;
}
