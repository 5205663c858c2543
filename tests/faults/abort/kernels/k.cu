// FAULT (host abort): enqueues the correct y = 2x + 1, waits for it, then calls abort() (allowed:
// assert() needs it). The worker dies of SIGABRT; under --sandbox the worker is PID 1 of its PID
// namespace, which ignores a SIGABRT it sends itself, and glibc's abort() then falls back to a
// faulting instruction (SIGSEGV) or _exit(127). Must be stopped by the supervisor seeing its worker
// die without finishing: fault.crash, whichever way abort() ends the process. The next
// evaluation must still work.
// Expected: fault.crash.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <stdlib.h>

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

// The task's tensors: one fp32 input x, one fp32 output y of the same size. The element count, or -1.
int64_t affine_size(const DLTensor *args, int num_args, int num_params, const DLTensor *outputs, int num_outputs)
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

// Enqueues the correct y = 2x + 1 on stream; 0, or nonzero when the tensors or the launch are wrong.
int scale_add(const DLTensor *args, int num_args, int num_params, DLTensor *outputs, int num_outputs,
	      cudaStream_t stream)
{
	const int64_t n = affine_size(args, num_args, num_params, outputs, num_outputs);
	if (n < 0)
		return 1;
	if (n == 0)
		return 0;
	const int64_t blocks = (n + TPB - 1) / TPB;
	affine<<<(unsigned)(blocks < 65536 ? blocks : 65536), TPB, 0, stream>>>(
		static_cast<const float *>(args[0].data), static_cast<float *>(outputs[0].data), n);
	return cudaGetLastError() == cudaSuccess ? 0 : 2;
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	const int rc = scale_add(args, num_args, num_params, outputs, num_outputs, stream);
	if (rc != 0)
		return rc;
	if (cudaStreamSynchronize(stream) != cudaSuccess)
		return 3;
	abort(); // the fault
}
