/* gpu: the worker's device side: failure codes, the device and its harness resources, NVML
 * clocks, and the tensor sets the candidate sees through DLPack.
 *
 * Failures. Worker functions return 0 or a negative CA_ERR_* code and fill a struct
 * worker_error: its `code` is the protocol's failure code (docs/protocol.md, "GPU worker"), its
 * diag one line a person can act on, and `fatal` says whether the worker must stop (every CUDA
 * error: the context may be unusable; bad plan, bad input, no GPU, out of memory) or only the
 * current call failed (abi.forward_failed, abi.setup_failed, verify.*).
 *
 * Tensor sets. A tensor_set is one view per spec entry into a slot the bridge owns (device
 * memory mapped from a descriptor; host memory of the set's own for Python numbers) plus the
 * DLTensor array handed to the candidate. The DLTensors (and the shape/stride arrays they point
 * to) are rewritten from the set's own records by tensor_set_refresh() before every call, so a
 * candidate that scribbles over them cannot redirect the next call. Nothing the worker computes
 * decides a reward: the supervisor prepares, times and checks every call from outside. */
#ifndef CA_WORKER_GPU_H
#define CA_WORKER_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include <jansson.h>

#include "protocol/layout.h"
#include "tensor/spec.h"
#include "util/diag.h"

/* ---- failures ----------------------------------------------------------------------------------- */

struct worker_error {
	const char *code; /* static string, e.g. "fault.illegal_address" */
	bool fatal;
	struct ca_diag diag;
};

/* Fills e and returns rc (a negative CA_ERR_*). */
int werr(struct worker_error *e, const char *code, bool fatal, int rc, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
/* A CUDA error during `what`: fault.* code (see gpu_fault_code), fatal, message
 * "<what>: cudaErrorX: <description>"; cudaErrorMemoryAllocation becomes worker.oom. */
int werr_cuda(struct worker_error *e, cudaError_t err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The same after the candidate's own call (ca_setup, ca_forward, ca_teardown): there
 * cudaErrorMemoryAllocation is the candidate's, fault.device_oom. */
int werr_cuda_call(struct worker_error *e, cudaError_t err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* fault.illegal_address, fault.misaligned_address, fault.illegal_instruction,
 * fault.launch_failure, else fault.cuda_error. */
const char *gpu_fault_code(cudaError_t err);
/* Per-call failures (abi.*, verify.*, fault.*, hack.*) are reported in the call's own event. */
bool worker_error_is_call_failure(const struct worker_error *e);

/* ---- device and harness resources --------------------------------------------------------------- */

struct gpu_ctx {
	int device;
	char name[256];
	char pci_bus_id[64];
	int cc_major, cc_minor;
	int sm_count;
	size_t l2_bytes;
	size_t total_mem;
	int driver_version;  /* cudaDriverGetVersion, e.g. 13000 */
	int runtime_version; /* cudaRuntimeGetVersion */
	cudaStream_t stream; /* the harness stream handed to the candidate (blocking) */
	cudaEvent_t ev_start, ev_end;
};

/* Selects the device, creates the context (worker.no_gpu when impossible), reads its properties,
 * creates the stream and events. The primary context is current on this thread afterwards. */
int gpu_ctx_open(struct gpu_ctx *g, int device, struct worker_error *e);
void gpu_ctx_close(struct gpu_ctx *g);

/* Makes the worker's device current again (the candidate may switch it), synchronizes the
 * device and collects any pending error: a failure is reported as a fault during `what`. */
int gpu_sync(struct gpu_ctx *g, const char *what, struct worker_error *e);
/* gpu_sync after a call of the candidate (werr_cuda_call: fault.device_oom). */
int gpu_sync_after_call(struct gpu_ctx *g, const char *what, struct worker_error *e);

/* Formats a CUDA version number (13000 -> "13.0"). */
void gpu_format_version(int v, char *out, size_t out_size);

/* ---- tensor sets --------------------------------------------------------------------------------- */

struct gpu_tensor {
	const struct tensor_spec *spec; /* not owned */
	void *ptr;                      /* inside a slot, or host memory of our own when on_cpu */
	bool on_cpu;
	size_t numel, nbytes;
	int64_t shape[CA_MAX_DIMS];   /* what the candidate's DLTensor points to */
	int64_t strides[CA_MAX_DIMS];
};

struct tensor_set {
	const char *prefix; /* "args", "params", "outputs": for messages */
	struct gpu_tensor *t;
	DLTensor *dl;
	int n;
	int device;
};

/* Total bytes of the set's tensors. */
size_t tensor_set_bytes(const struct tensor_set *s);

/* The set over a mapped slot (docs/protocol.md, "Slots"): tensor i at base + layout offset i;
 * tensors marked on_cpu (Python numbers) get 8 bytes of host memory of the set's own. The slot
 * stays the caller's; worker.bad_plan when the layout does not fit in the slot. */
int tensor_set_bind(struct tensor_set *s, const char *prefix, const struct tensor_spec *specs,
		    int n, int device, uint64_t base, size_t slot_bytes,
		    const struct slot_layout *layout, struct worker_error *e);
void tensor_set_free(struct tensor_set *s);
/* Rewrites every DLTensor (data, device, ndim, dtype, shape, strides, byte_offset 0). */
void tensor_set_refresh(struct tensor_set *s);
/* Writes a call's Python-number arguments, [[index, value], ...], into the host tensors:
 * worker.bad_plan for an index that is no scalar argument or a value of the wrong kind. */
int tensor_set_scalars(struct tensor_set *s, const json_t *scalars, struct worker_error *e);

#endif
