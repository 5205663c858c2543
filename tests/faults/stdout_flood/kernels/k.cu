// FAULT (output flood): on its first call, writes 1 GiB to stdout and 1 GiB to stderr in 1 MiB
// chunks with fwrite (output to stdout/stderr is allowed: printf debugging); every call computes
// y = 2x + 1 correctly. Once per process bounds the damage where nothing caps the output. The
// worker sends its stdout to its stderr, which the supervisor keeps in the run directory (memory
// backed /dev/shm by default): without a cap one evaluation can fill it, or the disk. Must be
// stopped by the harness capping the worker's output and ending the evaluation as
// fault.output_limit. The next evaluation must still work.
// Expected: fault.output_limit.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <stdio.h>
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

constexpr size_t CHUNK = (size_t)1 << 20;
constexpr int CHUNKS = 1024; // 1 GiB per stream

char line_block[CHUNK];

void flood(FILE *to)
{
	for (int i = 0; i < CHUNKS; ++i)
		if (fwrite(line_block, 1, CHUNK, to) != CHUNK)
			break; // a closed or capped stream: nothing more to do there
	fflush(to);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (line_block[0] == '\0') { // the first call
		memset(line_block, 'x', CHUNK);
		for (size_t i = 127; i < CHUNK; i += 128)
			line_block[i] = '\n'; // lines of 128 bytes
		flood(stdout); // the fault
		flood(stderr);
	}
	return scale_add(args, num_args, num_params, outputs, num_outputs, stream);
}
