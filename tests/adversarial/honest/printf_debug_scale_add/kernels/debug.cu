// scale_add (y = 2x + 1) with debugging output left in: ca_setup prints a line to stderr the
// first time, and on the first ca_forward thread 0 of block 0 printf()s from the device (the
// worker sends a candidate's stdout to its stderr). Both are harmless and must not fail the
// evaluation; later calls print nothing so the log stays small.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <stdio.h>

namespace {

constexpr int TPB = 256;
bool setup_printed;
int64_t calls;

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

__global__ void __launch_bounds__(TPB) affine(const float *__restrict__ x, float *__restrict__ y, int64_t n,
					      int debug)
{
	const int64_t i0 = (int64_t)blockIdx.x * TPB + threadIdx.x;
	if (debug && i0 == 0)
		printf("debug: scale_add kernel, n = %lld, grid = %u, x[0] = %f\n", (long long)n, gridDim.x, x[0]);
	for (int64_t i = i0; i < n; i += (int64_t)gridDim.x * TPB)
		y[i] = 2.0f * x[i] + 1.0f;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)stream;
	if (!setup_printed) {
		fprintf(stderr, "debug: ca_setup with %d params\n", num_params);
		setup_printed = true;
	}
	return 0;
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
	int64_t blocks = (n + TPB - 1) / TPB;
	if (blocks > 65536)
		blocks = 65536;
	affine<<<(unsigned)blocks, TPB, 0, stream>>>(static_cast<const float *>(x->data), static_cast<float *>(y->data),
						     n, calls++ == 0 ? 1 : 0);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
