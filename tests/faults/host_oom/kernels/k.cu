// FAULT (host memory exhaustion; run it only under --sandbox with the cgroup layer on): enqueues
// the correct y = 2x + 1, then allocates host memory in 1 GiB chunks with malloc and fills each
// with memset (so every page is really taken), keeping them all, until malloc fails; then it
// calls abort(). Without a memory limit this drives the host into its OOM killer, which may kill
// anything (the torch bridge, the supervisor, other users' work). Must be stopped by the
// sandbox's cgroup: memory.max (32 GiB) makes the kernel kill the worker inside its cgroup, and
// the supervisor reports fault.host_oom (or, should malloc fail first, abort(): fault.crash). The
// next evaluation must still work.
// Expected: fault.host_oom or fault.crash.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

constexpr size_t CHUNK = (size_t)1 << 30;
constexpr int MAX_CHUNKS = 1 << 16; // 64 TiB: more than any host holds

void *volatile hoard[MAX_CHUNKS]; // volatile: the allocations escape, none can be elided

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	const int rc = scale_add(args, num_args, num_params, outputs, num_outputs, stream);
	if (rc != 0)
		return rc;
	for (int i = 0; i < MAX_CHUNKS; ++i) { // the fault
		void *p = malloc(CHUNK);
		if (!p)
			abort();
		memset(p, 0xa5, CHUNK); // not zero: no calloc-style shortcut, every page touched
		hoard[i] = p;
	}
	abort();
}
