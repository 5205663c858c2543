// kernels.cu: the supervisor's own device code (src/device/device.h), built into a fatbin that
// the `cuda-agent` binary embeds and loads with cuModuleLoadData. Grid-stride loops with 64-bit
// indices: any tensor size works. The arithmetic is prep.h's, shared with the CPU backend.

#include <stdint.h>

#include "device/prep.h"

#define CA_THREADS 256

extern "C" __global__ void ca_dev_empty(void) {}

// Holds the GPU for `ns` nanoseconds by the global timer (one thread; the clock rate does not
// matter): the supervisor's context has the GPU while a callee's process wakes up and launches
// its call, which then starts when the hold ends (docs/protocol.md, "The hold").
extern "C" __global__ void ca_dev_hold(unsigned long long ns, unsigned long long *start)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	*start = t0;
	do {
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

// A probe that says when it started, by the same global timer as the hold: the supervisor
// compares that with when it launched the probe, relative to the hold's start, to see whether
// the probe waited for another context's work (docs/protocol.md, "Early answers").
extern "C" __global__ void ca_dev_stamp(unsigned long long *at)
{
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	*at = t;
}

// Moves a set from seed `from` to seed `to` (prep.h: each element at its value or half of it,
// decided by the hash of ca_prep_key(i, layout)).
extern "C" __global__ void ca_dev_perturb_f64(double *p, size_t n, uint64_t from, uint64_t to,
					      uint64_t thr, uint64_t layout)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] *= (double)ca_prep_toggle(from, to, ca_prep_key(i, layout), thr);
}

extern "C" __global__ void ca_dev_perturb_f32(float *p, size_t n, uint64_t from, uint64_t to,
					      uint64_t thr, uint64_t layout)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] *= ca_prep_toggle(from, to, ca_prep_key(i, layout), thr);
}

extern "C" __global__ void ca_dev_perturb_bf16(uint16_t *p, size_t n, uint64_t from, uint64_t to,
					       uint64_t thr, uint64_t layout)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = ca_prep_scale_bf16(p[i], ca_prep_toggle(from, to, ca_prep_key(i, layout), thr));
}

extern "C" __global__ void ca_dev_perturb_f16(uint16_t *p, size_t n, uint64_t from, uint64_t to,
					      uint64_t thr, uint64_t layout)
{
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x)
		p[i] = ca_prep_scale_f16(p[i], ca_prep_toggle(from, to, ca_prep_key(i, layout), thr));
}

// Sums the hashed 8-byte words of [words, words + nwords) plus a zero-padded tail into *out.
extern "C" __global__ void ca_dev_checksum(const unsigned long long *words, size_t nwords,
					   const unsigned char *tail, unsigned ntail, uint64_t salt,
					   unsigned long long *out)
{
	__shared__ unsigned long long partial[CA_THREADS / 32];
	size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
	unsigned long long acc = 0;
	for (size_t i = tid; i < nwords; i += (size_t)gridDim.x * blockDim.x)
		acc += ca_prep_checksum_word(words[i], (uint64_t)i, salt);
	if (tid == 0 && ntail) {
		unsigned long long w = 0;
		for (unsigned k = 0; k < ntail; k++)
			w |= (uint64_t)tail[k] << (8 * k);
		acc += ca_prep_checksum_word(w, (uint64_t)nwords, salt);
	}
	for (int off = 16; off > 0; off >>= 1)
		acc += __shfl_down_sync(0xffffffffu, acc, off);
	unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	if (lane == 0)
		partial[warp] = acc;
	__syncthreads();
	if (warp == 0) {
		acc = lane < blockDim.x / 32 ? partial[lane] : 0;
		for (int off = 16; off > 0; off >>= 1)
			acc += __shfl_down_sync(0xffffffffu, acc, off);
		if (lane == 0)
			atomicAdd(out, acc);
	}
}

// Reads the whole flush buffer (16-byte loads). Reading, not writing, is what empties L2 of the
// previous call's data: every dirty line (perturbed inputs, poisoned outputs) is written back
// during the flush, and L2 is left holding clean lines of this buffer, so the timed call pays
// no write-back of someone else's data. The sink write keeps the loads from being removed.
extern "C" __global__ void ca_dev_l2_flush(const uint4 *__restrict__ buf, size_t n,
					   unsigned value, unsigned *sink)
{
	unsigned acc = 0;
	for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		uint4 v = buf[i];
		acc ^= v.x ^ v.y ^ v.z ^ v.w;
	}
	if (acc == value + 0x9E3779B9u)
		*sink = acc;
}
