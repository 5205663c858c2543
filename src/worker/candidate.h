/* candidate: the untrusted shared library implementing include/cuda_agent/abi.h.
 *
 * candidate_load() dlopens it (RTLD_NOW | RTLD_LOCAL) and resolves ca_forward (required),
 * ca_setup and ca_teardown (optional). Nothing the library returns is trusted: return values are
 * only compared with 0, the DLTensors it receives are rewritten before every call, and every
 * call is followed by a device synchronize and error check by the caller. The library is never
 * dlclose()d (its destructors could run at an awkward time); the process exits instead. */
#ifndef CA_WORKER_CANDIDATE_H
#define CA_WORKER_CANDIDATE_H

#include <stdbool.h>

#include <cuda_runtime_api.h>
#include <dlpack/dlpack.h>

#include "worker/gpu.h"

typedef int (*ca_forward_fn)(const DLTensor *args, int num_args, const DLTensor *params,
			     int num_params, DLTensor *outputs, int num_outputs,
			     cudaStream_t stream);
typedef int (*ca_setup_fn)(const DLTensor *params, int num_params, cudaStream_t stream);
typedef void (*ca_teardown_fn)(void);

struct candidate {
	void *handle;
	ca_forward_fn forward;
	ca_setup_fn setup;       /* NULL when not exported */
	ca_teardown_fn teardown; /* NULL when not exported */
};

/* abi.load_failed (with dlerror's text) or abi.missing_forward. */
int candidate_load(struct candidate *c, const char *path, struct worker_error *e);

/* Calls ca_setup (if exported) with freshly refreshed params, then synchronizes: a nonzero
 * return is abi.setup_failed (not fatal), a CUDA error a fatal fault. `what` names the occasion
 * in messages ("verify trial 2"). */
int candidate_setup(struct candidate *c, struct gpu_ctx *g, struct tensor_set *params,
		    const char *what, struct worker_error *e);

/* The bare call, nothing else: the caller refreshes the sets before and synchronizes after
 * (the timing protocol places its events and clocks around exactly this). */
static inline int candidate_forward(const struct candidate *c, struct tensor_set *args,
				    struct tensor_set *params, struct tensor_set *outputs,
				    cudaStream_t stream)
{
	return c->forward(args->dl, args->n, params->dl, params->n, outputs->dl, outputs->n,
			  stream);
}

/* Calls ca_teardown (if exported) and synchronizes. */
int candidate_teardown(struct candidate *c, struct gpu_ctx *g, struct worker_error *e);

#endif
