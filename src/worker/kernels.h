/* kernels: the worker's own device code (kernels.cu) behind thin C launch wrappers.
 *
 * Every kernel is declared extern "C" with the name prefix CA_WORKER_KERNEL_PREFIX, so the
 * profiler can leave the harness's own work out of a candidate's kernel table. Each wrapper
 * enqueues on `stream` and returns the launch status (cudaGetLastError() after the launch, or
 * the cudaMemsetAsync status); none synchronizes. Pointers are device pointers from cudaMalloc
 * (256-byte aligned); n == 0 is a no-op that returns cudaSuccess. */
#ifndef CA_WORKER_KERNELS_H
#define CA_WORKER_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "tensor/dtype.h"

#define CA_WORKER_KERNEL_PREFIX "ca_worker_"

#ifdef __cplusplus
extern "C" {
#endif

/* One thread that does nothing: the empty launch of the overhead calibration. */
cudaError_t ca_launch_empty(cudaStream_t stream);
/* The audit's marker: an empty kernel (ca_worker_audit_marker) whose start time is the moment
 * the harness stream's earlier work had finished. */
cudaError_t ca_launch_audit_marker(cudaStream_t stream);

/* Poisons n elements of type t: quiet NaN for floating types, 0xFF bytes otherwise. */
cudaError_t ca_launch_fill_nan(void *ptr, size_t n, enum ca_dtype t, cudaStream_t stream);

/* Multiplies n floating-point elements by factor (f64 in double, f32 in float; f16 and bf16
 * computed in float and rounded stochastically with a counter-based hash of (seed, index), so a
 * factor closer to 1 than half an ulp still changes values, without bias). Non-floating types:
 * no-op. NaN and infinities stay as they are. */
cudaError_t ca_launch_perturb(void *ptr, size_t n, enum ca_dtype t, double factor, uint64_t seed,
			      cudaStream_t stream);

/* Adds a 64-bit checksum of nbytes bytes at ptr into *out (device memory; the caller zeroes it).
 * Every 8-byte word (the tail zero-padded) is hashed with its index and salt and the hashes are
 * summed mod 2^64: any changed bit changes the sum except with probability ~2^-64, and the
 * result does not depend on scheduling. */
cudaError_t ca_launch_checksum(const void *ptr, size_t nbytes, uint64_t salt,
			       unsigned long long *out, cudaStream_t stream);

/* Writes nbytes bytes of value into buf (cudaMemsetAsync): evicts the L2 cache. */
/* Reads nbytes of buf (initialized once by the caller) so that L2 holds only clean lines of it. */
cudaError_t ca_launch_l2_flush(void *buf, size_t nbytes, int value, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
