// FAULT (network access; run it only under --sandbox): opens a TCP socket and connects to
// 127.0.0.1:22 (the host's SSH port) with the socket and connect system calls, made through libc's
// own syscall() that the candidate finds at run time by walking libc's symbol table from the
// address of strtol (elfwalk.cpp: socket, connect and syscall are on the symbol denylist and host
// inline asm is refused at build, but a function found in memory is no import), closes it, then
// computes y = 2x + 1 correctly. Without a sandbox it reaches the host's services. Must be stopped
// by the sandbox: the seccomp filter kills socket() of any family but AF_UNIX (the network
// namespace has only a downed lo besides), and the supervisor reports the kill as
// sandbox.violation. The next evaluation must still work.
// Expected: sandbox.violation.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>

#include "elfwalk.h"

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

// The system calls go through libc's own syscall() (a variadic wrapper around the `syscall`
// instruction), found at run time: elfwalk.cpp walks down from the address of strtol (an allowed
// import) to libc's ELF header and looks "syscall" up in libc's dynamic symbol table. The library
// imports no symbol for it (syscall is on the symbol denylist) and holds no system call
// instruction of its own (host inline assembly is refused at build: src/build/hostasm.h), so no
// build check sees these calls; only the run-time sandbox can stop them.
typedef long (*syscall_fn)(long, ...);

syscall_fn libc_syscall;

// Finds libc's syscall(); false when the walk fails (then the fault cannot run at all).
bool find_syscall(void)
{
#if defined(__x86_64__) // the system call numbers below are x86-64's
	if (!libc_syscall) {
		elf_obj libc;
		if (elf_libc(&libc))
			libc_syscall = elf_fn<syscall_fn>(&libc, "syscall");
	}
#endif
	return libc_syscall != nullptr;
}

// System call nr through libc's syscall(): its result, or -1 (errno set). find_syscall() first.
long sys_call(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0)
{
	return libc_syscall(nr, a, b, c, d, e);
}

constexpr long SYS_CLOSE = 3, SYS_SOCKET = 41, SYS_CONNECT = 42;
constexpr long AF_INET_ = 2, SOCK_STREAM_ = 1;

struct inet_address { // struct sockaddr_in
	unsigned short family;
	unsigned char port[2]; // big-endian
	unsigned char addr[4]; // big-endian
	unsigned char zero[8];
};

// Connects to 127.0.0.1:22 and closes the socket; the outcome does not matter.
void reach_out(void)
{
	const long fd = sys_call(SYS_SOCKET, AF_INET_, SOCK_STREAM_, 0); // the fault
	if (fd < 0)
		return;
	const inet_address to = {(unsigned short)AF_INET_, {0, 22}, {127, 0, 0, 1}, {0}};
	sys_call(SYS_CONNECT, fd, (long)&to, (long)sizeof to);
	sys_call(SYS_CLOSE, fd);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (!find_syscall())
		return 9; // the walk found no syscall() in libc: the fault cannot run (abi.forward_failed)
	reach_out();
	return scale_add(args, num_args, num_params, outputs, num_outputs, stream);
}
