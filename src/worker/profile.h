/* profile: a per-kernel GPU time table of the candidate from CUPTI activity records (the agent's
 * profiling feedback; not a timing measurement).
 *
 * profile_run() uploads the profile params (then ca_setup) and inputs, makes one warm-up call,
 * enables CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, makes `calls` calls (each prepared like a timed
 * call: L2 flush and output poison, untimed), flushes and disables the activity API, and
 * aggregates kernel records by name. Then it measures the device's copy bandwidth (best of 5
 * device-to-device copies of up to 512 MiB, bytes read plus written), the ceiling against which
 * the supervisor reports the candidate's achieved bandwidth. The worker's own kernels (CA_WORKER_KERNEL_PREFIX) are left
 * out. CUPTI problems are reported as profile.cupti_error (not fatal, not the candidate's fault);
 * the candidate's failures as usual (abi.forward_failed, fault.*).
 *
 * Ownership: profile_result owns its kernel entries and names (profile_result_free). */
#ifndef CA_WORKER_PROFILE_H
#define CA_WORKER_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "worker/candidate.h"
#include "worker/gpu.h"
#include "worker/plan.h"

#define PROFILE_MAX_KERNELS 1024   /* distinct names kept; the rest are lumped together */
#define PROFILE_NAME_MAX_JSON 512  /* demangled names are cut to this many bytes in the event */

struct profile_kernel {
	char *name; /* as CUPTI reports it (mangled for C++ kernels) */
	uint64_t calls, total_ns;
	int grid[3], block[3]; /* of the first launch seen */
	int registers, static_smem, dynamic_smem;
};

struct profile_result {
	struct profile_kernel *kernels; /* sorted by total_ns, descending */
	size_t n;
	uint64_t total_ns;
	int forward_calls;
	uint64_t dropped_records;
	double copy_gbps; /* measured device-to-device copy bandwidth (read + write), 0 if unknown */
};

int profile_run(struct gpu_ctx *g, struct candidate *c, const struct plan_profile *plan,
		struct tensor_set *params, struct tensor_set *args, struct tensor_set *outputs,
		struct profile_result *r, struct worker_error *e);
/* {"kernels": [{"name", "calls", "total_ns", "avg_ns", "grid", "block", "registers",
 *  "static_smem", "dynamic_smem"}], "total_ns", "forward_calls", "dropped_records",
 *  "peak_copy_gbps" (null if unmeasured)}; names are
 * demangled when possible. */
json_t *profile_result_json(const struct profile_result *r);
void profile_result_free(struct profile_result *r);

#endif
