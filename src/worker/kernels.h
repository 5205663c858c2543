/* kernels: the worker's own device code (kernels.cu) behind thin C launch wrappers.
 *
 * Every kernel is declared extern "C" with the name prefix CA_WORKER_KERNEL_PREFIX, so the
 * profiler and the audit can leave the harness's own work out of a candidate's kernel table.
 * Each wrapper enqueues on `stream` and returns cudaGetLastError() after the launch; none
 * synchronizes. The preparation of calls (perturbation, poison, L2 flush, checksums) is not
 * here: the supervisor does it in its own context (src/device/). */
#ifndef CA_WORKER_KERNELS_H
#define CA_WORKER_KERNELS_H

#include <cuda_runtime_api.h>

#define CA_WORKER_KERNEL_PREFIX "ca_worker_"

#ifdef __cplusplus
extern "C" {
#endif

/* One thread that does nothing: the empty call's kernel (worker/main.c). */
cudaError_t ca_launch_empty(cudaStream_t stream);
/* The audit's marker: an empty kernel (ca_worker_audit_marker) whose start time is the moment
 * the harness stream's earlier work had finished. */
cudaError_t ca_launch_audit_marker(cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
