/* gpu: the worker's device side: failure codes, the device and its harness resources, NVML
 * clocks, and the tensor sets the candidate sees through DLPack.
 *
 * Failures. Worker functions return 0 or a negative CA_ERR_* code and fill a struct
 * worker_error: its `code` is the protocol's failure code (docs/protocol.md, "GPU worker"), its
 * diag one line a person can act on, and `fatal` says whether the worker must stop (every CUDA
 * error: the context may be unusable; bad plan, bad input, no GPU, out of memory) or only the
 * current call failed (abi.forward_failed, abi.setup_failed, verify.*).
 *
 * Tensor sets. A tensor_set is one buffer per spec entry (device memory from cudaMalloc, at least
 * one byte; host memory for CPU scalars) plus the DLTensor array handed to the candidate. The
 * set owns its buffers; the DLTensors (and the shape/stride arrays they point to) are rewritten
 * from the set's own records by tensor_set_refresh() before every call, so a candidate that
 * scribbles over them cannot redirect the harness. */
#ifndef CA_WORKER_GPU_H
#define CA_WORKER_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include "eval/stats.h"
#include "tensor/safetensors.h"
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
	void *flush_buf; /* L2 flush buffer, allocated by gpu_ctx_alloc_flush */
	size_t flush_bytes;
	unsigned long long *csum_dev; /* checksum scratch, one word per tensor */
	size_t csum_cap;
	uint64_t salt; /* random per run: checksums cannot be precomputed */
};

/* Selects the device, creates the context (worker.no_gpu when impossible), reads its properties,
 * creates the stream and events. */
int gpu_ctx_open(struct gpu_ctx *g, int device, struct worker_error *e);
/* Allocates the flush buffer (once; bytes == 0 allocates nothing). */
int gpu_ctx_alloc_flush(struct gpu_ctx *g, size_t bytes, struct worker_error *e);
/* Allocates checksum scratch for up to n tensors. */
int gpu_ctx_alloc_checksums(struct gpu_ctx *g, size_t n, struct worker_error *e);
void gpu_ctx_close(struct gpu_ctx *g);
/* cudaMemGetInfo's free bytes. */
int gpu_ctx_free_bytes(struct gpu_ctx *g, size_t *free_bytes, struct worker_error *e);

/* Makes the worker's device current again (the candidate may switch it), synchronizes the
 * device and collects any pending error: a failure is reported as a fault during `what`. */
int gpu_sync(struct gpu_ctx *g, const char *what, struct worker_error *e);
/* gpu_sync after a call of the candidate (werr_cuda_call: fault.device_oom). */
int gpu_sync_after_call(struct gpu_ctx *g, const char *what, struct worker_error *e);

/* Formats a CUDA version number (13000 -> "13.0"). */
void gpu_format_version(int v, char *out, size_t out_size);

/* ---- NVML (optional: absent library or failures give unknown values) ---------------------------- */

struct gpu_nvml {
	void *lib;
	void *device; /* nvmlDevice_t */
	bool ok;
	char driver[96]; /* "" when unknown */
	int (*get_clock)(void *device, int type, unsigned int *mhz);
	int (*shutdown)(void);
};

/* Loads libnvidia-ml.so.1, finds the device by PCI bus id. Never fails: ok says what worked. */
void gpu_nvml_open(struct gpu_nvml *n, const char *pci_bus_id);
/* Current SM clock in MHz, or -1 when unknown. */
int gpu_nvml_sm_clock(const struct gpu_nvml *n);
void gpu_nvml_close(struct gpu_nvml *n);

/* ---- tensor sets --------------------------------------------------------------------------------- */

/* Largest single tensor the worker accepts (1 TiB): guards size arithmetic. */
#define GPU_MAX_TENSOR_BYTES (1ull << 40)

struct gpu_tensor {
	const struct tensor_spec *spec; /* not owned */
	void *ptr;                      /* device memory, or host memory when on_cpu */
	bool on_cpu;
	size_t numel, nbytes;
	int64_t shape[CA_MAX_DIMS];   /* what the candidate's DLTensor points to */
	int64_t strides[CA_MAX_DIMS];
};

struct tensor_set {
	const char *prefix; /* "args", "params", "outputs": tensor names are "<prefix>.<i>" */
	struct gpu_tensor *t;
	DLTensor *dl;
	int n;
	int device;
};

/* Total bytes of the set's tensors. */
size_t tensor_set_bytes(const struct tensor_set *s);

/* Validates the specs (sizes) and sums the bytes they need: device bytes and host bytes. */
int tensor_specs_bytes(const struct tensor_spec *specs, int n, const char *prefix,
		       size_t *device_bytes, size_t *host_bytes, struct worker_error *e);

int tensor_set_alloc(struct tensor_set *s, const char *prefix, const struct tensor_spec *specs,
		     int n, int device, struct worker_error *e);
void tensor_set_free(struct tensor_set *s);
/* Rewrites every DLTensor (data, device, ndim, dtype, shape, strides, byte_offset 0). */
void tensor_set_refresh(struct tensor_set *s);

/* Checks that the file holds exactly this set's tensors ("<prefix>.<i>", dtype, shape):
 * worker.bad_input otherwise, naming the file and the tensor. */
int tensor_set_check_file(const struct tensor_set *s, const struct safetensors *st,
			  const char *path, struct worker_error *e);
/* Checks, then copies every tensor from the file into the set (synchronous). */
int tensor_set_upload(struct tensor_set *s, const struct safetensors *st, const char *path,
		      struct worker_error *e);
/* Opens path (worker.bad_input if unreadable or malformed), uploads, closes. */
int tensor_set_load_file(struct tensor_set *s, const char *path, struct worker_error *e);

/* Enqueues the poison of every tensor (NaN for floats, 0xFF bytes otherwise; host tensors are
 * filled directly). */
int tensor_set_poison(struct tensor_set *s, struct gpu_ctx *g, struct worker_error *e);
/* Enqueues x *= 1 + scale * u on every floating device tensor, u drawn from rng per tensor in
 * [-1, 1] \ {0}. Host tensors (CPU scalars) and integer tensors are left alone. */
int tensor_set_perturb(struct tensor_set *s, struct gpu_ctx *g, double scale,
		       struct stats_rng *rng, struct worker_error *e);
/* 64-bit checksum of every tensor into out[n] (synchronizes the harness stream). */
int tensor_set_checksums(const struct tensor_set *s, struct gpu_ctx *g, uint64_t *out,
			 struct worker_error *e);
/* Downloads the set and writes it as a safetensors file ("<prefix>.<i>"). */
int tensor_set_save(const struct tensor_set *s, const char *path, struct worker_error *e);

#endif
