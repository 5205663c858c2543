// FAULT (fork bomb; run it only under --sandbox): enqueues the correct y = 2x + 1, then loops
// forever making new processes with the fork and clone system calls, made through libc's own
// syscall() that the candidate finds at run time by walking libc's symbol table from the address of
// strtol (elfwalk.cpp). fork, clone and syscall are on the symbol denylist, `fork(` breaks a source
// rule and host inline asm is refused at build, but none of these checks sees a function found in
// memory. Parent and children all keep looping, so the number of processes doubles as fast as the
// kernel allows. Without a sandbox this exhausts the host's process table. Must be stopped by the
// sandbox: the seccomp filter killing the worker at its first process-creating call and the
// supervisor reporting it as sandbox.violation; RLIMIT_NPROC and the cgroup's pids.max bound it
// meanwhile, and the PID namespace takes every child down with the worker. The next evaluation must
// still work.
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

constexpr long SYS_CLONE = 56, SYS_FORK_ = 57;
constexpr long SIGCHLD_ = 17; // clone flags: no CLONE_* bit, the child signals SIGCHLD: a fork

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (!find_syscall())
		return 9; // the walk found no syscall() in libc: the fault cannot run (abi.forward_failed)
	const int rc = scale_add(args, num_args, num_params, outputs, num_outputs, stream);
	if (rc != 0)
		return rc;
	for (;;) { // the fault: every process, old and new, goes on making processes
		sys_call(SYS_FORK_);
		sys_call(SYS_CLONE, SIGCHLD_, 0, 0, 0, 0);
	}
}
