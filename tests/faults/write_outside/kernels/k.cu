// FAULT (writing outside the run; run it only under --sandbox): creates and writes a file named
// cuda-agent-fault-escape in /tmp, /dev/shm, /var/tmp and its own kernels/ directory (found from
// __FILE__, the absolute path the build driver compiled), with the openat, write and close system
// calls, made through libc's own syscall() that the candidate finds at run time by walking libc's
// symbol table from the address of strtol (elfwalk.cpp: the file functions and syscall are on the
// symbol denylist and host inline asm is refused at build, but a function found in memory is no
// import), then computes y = 2x + 1 correctly. Without a sandbox the files land on the host, where
// they could carry state to a later evaluation or change a candidate's sources. Must be stopped by
// the sandbox: the worker sees a read-only root with private /tmp and /dev/shm and no candidate
// directory, and an attempt to create files there is reported as sandbox.violation. The fault
// runner also checks that none of these files exists on the host afterwards (and removes any it
// finds, failing the case).
// Expected: sandbox.violation.
#include <cuda_runtime.h>
#include <dlpack/dlpack.h>
#include <cuda_agent/abi.h>

#include <stdint.h>
#include <string.h>

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

constexpr long SYS_WRITE = 1, SYS_CLOSE = 3, SYS_OPENAT = 257;
constexpr long AT_FDCWD_ = -100, O_WRONLY_ = 01, O_CREAT_ = 0100, O_TRUNC_ = 01000, O_CLOEXEC_ = 02000000;
constexpr char NAME[] = "cuda-agent-fault-escape";
constexpr char NOTE[] = "written by the write_outside fault of cuda-agent's tests/faults\n";

void drop_file(const char *path)
{
	const long fd = sys_call(SYS_OPENAT, AT_FDCWD_, (long)path, O_WRONLY_ | O_CREAT_ | O_TRUNC_ | O_CLOEXEC_,
				    0644); // the fault
	if (fd < 0)
		return;
	sys_call(SYS_WRITE, fd, (long)NOTE, (long)(sizeof NOTE - 1));
	sys_call(SYS_CLOSE, fd);
}

// <dir>/cuda-agent-fault-escape into out (capacity cap); false if it does not fit.
bool path_in(const char *dir, size_t dir_len, char *out, size_t cap)
{
	if (dir_len + 1 + sizeof NAME > cap)
		return false;
	memcpy(out, dir, dir_len);
	out[dir_len] = '/';
	memcpy(out + dir_len + 1, NAME, sizeof NAME);
	return true;
}

void escape(void)
{
	static const char *const dirs[] = {"/tmp", "/dev/shm", "/var/tmp"};
	char path[4096];
	for (const char *dir : dirs)
		if (path_in(dir, strlen(dir), path, sizeof path))
			drop_file(path);
	// kernels/ of this candidate: the directory of this source file as the build driver named it
	const char *self = __FILE__;
	const char *slash = strrchr(self, '/');
	if (self[0] == '/' && slash && path_in(self, (size_t)(slash - self), path, sizeof path))
		drop_file(path);
}

} // namespace

extern "C" int ca_forward(const DLTensor *args, int num_args, const DLTensor *params, int num_params,
			  DLTensor *outputs, int num_outputs, cudaStream_t stream)
{
	(void)params;
	if (!find_syscall())
		return 9; // the walk found no syscall() in libc: the fault cannot run (abi.forward_failed)
	escape();
	return scale_add(args, num_args, num_params, outputs, num_outputs, stream);
}
