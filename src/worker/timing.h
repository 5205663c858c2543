/* timing: the shared timing protocol (docs/protocol.md, "Shared timing protocol") applied to a
 * candidate, with the worker-only checked calls.
 *
 * Sequence: upload timing.params (then ca_setup) and every rotation set into its own slot, open
 * and validate every check set and the final set (so that no file I/O happens inside the loop),
 * choose the checked call indices from the plan's seed, calibrate the empty-launch overhead
 * (median of 21), warm up, read the SM clock, run the timed loop until the stopping rule
 * (eval/stats.h) says stop, read the SM clock again, then the final checked call in slot 0.
 *
 * Rotation counts calls across warm-up and the timed loop, so by the time a checked call
 * overwrites a slot that slot has usually been used before. The budget never ends the loop
 * before the last checked call (see timing_protocol_stop). Warm-up stops once both minima hold:
 * warmup_min_calls calls and warmup_min_ms milliseconds of warm-up wall time.
 *
 * Ownership: the caller owns the sets and the context; timing_result owns its sample array. */
#ifndef CA_WORKER_TIMING_H
#define CA_WORKER_TIMING_H

#include <stdbool.h>
#include <stddef.h>

#include "worker/candidate.h"
#include "worker/gpu.h"
#include "worker/plan.h"

#define TIMING_CALIBRATION_RUNS 21

struct timing_result {
	double median_ms;       /* median of the samples */
	double event_median_ms; /* median CUDA-event time */
	double host_median_ms;  /* median host time minus overhead (floored at 0) */
	double overhead_ms;
	double event_overhead_ms;
	double rse;
	size_t samples;
	double *samples_ms; /* owned, `samples` entries */
	int warmup_calls;
	double warmup_ms;
	bool budget_exhausted;
	const char *stop_reason; /* "converged", "budget", "max_samples" */
	size_t l2_flush_bytes;
	int checks; /* planned */
	int checks_done;
	bool final_done;
	double final_ms;
	double loop_s;
	int sm_clock_mhz_before, sm_clock_mhz_after; /* -1: unknown */
};

/* slots[0..plan->timing.num_rotation) are allocated input sets; params and outputs allocated
 * sets; g->flush_buf allocated with l2_flush_factor * L2 bytes. On failure r still holds what
 * was measured so far (samples count), and e says why. */
int timing_run(struct gpu_ctx *g, struct gpu_nvml *nvml, struct candidate *c,
	       const struct plan_timing *plan, struct tensor_set *params,
	       struct tensor_set *slots, struct tensor_set *outputs, struct timing_result *r,
	       struct worker_error *e);
void timing_result_free(struct timing_result *r);

/* One call prepared and timed as the protocol says, shared with the profiler's untimed calls:
 * poisons outputs, flushes L2 (flush_value varies the bytes), refreshes the DLTensors and
 * synchronizes. Perturbation and check uploads happen before, in the caller. */
int timing_prepare_common(struct gpu_ctx *g, struct tensor_set *args, struct tensor_set *params,
			  struct tensor_set *outputs, int flush_value, const char *what,
			  struct worker_error *e);
/* Calls ca_forward and synchronizes; a CUDA error is a fatal fault, a nonzero return
 * abi.forward_failed. No timing. */
int timing_plain_call(struct gpu_ctx *g, struct candidate *c, struct tensor_set *args,
		      struct tensor_set *params, struct tensor_set *outputs, const char *what,
		      struct worker_error *e);

#endif
