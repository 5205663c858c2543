// CHEAT (reading the reference outputs with raw system calls): for every call it copies the
// first 64 bytes of x to the host and asks refscan.cpp for the evaluation input file that starts
// with those bytes; if one matches, it uploads the matching reference output into y. It was
// written for the layout before issue 12, when the harness wrote inputs (public/) and reference
// outputs (private/) to disk; since issue 12 there are no such files at all (the data are the
// supervisor's GPU slots, the reference outputs stay in the supervisor's memory), so at run time
// nothing would match and y would keep its poison (verify.mismatch). It is kept for its build
// stage: refscan.cpp issues system calls with host inline assembly, which the build refuses
// (src/build/hostasm.c). The run-time route to files (libc's open/read found by a symbol-table
// walk) is covered by plan_inputs_match.
// Expected: build.forbidden_source.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <stdlib.h>

#include "refscan.h"

namespace {

unsigned char *host_out;
size_t host_cap;

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

int64_t bytes_of(const DLTensor *t)
{
	int64_t n = 4;
	for (int i = 0; i < t->ndim; ++i)
		n *= t->shape[i];
	return n;
}

} // namespace

extern "C" int ca_setup(const DLTensor *params, int num_params, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	(void)stream;
	refscan_reset(); // new trial or timing run: look at the run directories again
	return 0;
}

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	if (num_args != 1 || num_outputs != 1 || !f32_cuda(&args[0]) || !f32_cuda(&outputs[0]))
		return 1;
	const int64_t in_bytes = bytes_of(&args[0]), out_bytes = bytes_of(&outputs[0]);
	if (in_bytes < (int64_t)REFSCAN_PROBE_BYTES)
		return 0;
	if ((size_t)out_bytes > host_cap) {
		free(host_out);
		host_out = static_cast<unsigned char *>(malloc((size_t)out_bytes));
		host_cap = host_out ? (size_t)out_bytes : 0;
		if (!host_out)
			return 2;
	}
	unsigned char probe[REFSCAN_PROBE_BYTES];
	if (cudaMemcpyAsync(probe, args[0].data, sizeof probe, cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
	    cudaStreamSynchronize(stream) != cudaSuccess)
		return 3;
	const long long got = refscan_lookup(probe, host_out, host_cap);
	if (got != out_bytes)
		return 0; // unknown input: leave y alone (an unchecked timed call, or a sandbox)
	if (cudaMemcpyAsync(outputs[0].data, host_out, (size_t)got, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
	    cudaStreamSynchronize(stream) != cudaSuccess)
		return 4;
	return 0;
}

extern "C" void ca_teardown(void)
{
	free(host_out);
	host_out = nullptr;
	host_cap = 0;
}
