// scale_add (y = 2x + 1) with a grid-stride loop over a grid sized to the GPU: ca_setup reads
// the number of SMs (cudaDeviceGetAttribute) and the kernel runs 8 blocks of 256 threads per SM,
// each thread looping over the elements with a stride of the whole grid.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

namespace {

constexpr int TPB = 256, BLOCKS_PER_SM = 8;
int sm_count;

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

int query_sms(void)
{
	int dev = 0;
	if (sm_count > 0)
		return 0;
	if (cudaGetDevice(&dev) != cudaSuccess ||
	    cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || sm_count <= 0) {
		sm_count = 0;
		return 1;
	}
	return 0;
}

__global__ void __launch_bounds__(TPB) affine(const float *__restrict__ x, float *__restrict__ y, int64_t n)
{
	const int64_t stride = (int64_t)gridDim.x * TPB;
	for (int64_t i = (int64_t)blockIdx.x * TPB + threadIdx.x; i < n; i += stride)
		y[i] = 2.0f * x[i] + 1.0f;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	(void)stream;
	return query_sms();
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (num_args != 1 || num_params != 0 || num_outputs != 1)
		return 1;
	const DLTensor *x = &args[0], *y = &outputs[0];
	if (!f32_cuda(x) || !f32_cuda(y) || numel(x) != numel(y))
		return 2;
	const int64_t n = numel(x);
	if (n == 0)
		return 0;
	if (query_sms() != 0)
		return 3;
	int64_t blocks = (int64_t)sm_count * BLOCKS_PER_SM;
	const int64_t needed = (n + TPB - 1) / TPB;
	if (blocks > needed)
		blocks = needed;
	affine<<<(unsigned)blocks, TPB, 0, stream>>>(static_cast<const float *>(x->data), static_cast<float *>(y->data),
						     n);
	return cudaGetLastError() == cudaSuccess ? 0 : 4;
}
