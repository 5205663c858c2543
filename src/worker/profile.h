/* profile: a per-kernel GPU time table of the candidate from CUPTI activity records (the agent's
 * profiling feedback; not a timing measurement, and nothing of it decides a reward).
 *
 * profile_begin() enables CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL; the caller then makes its calls
 * (the supervisor prepares each like a timed call: L2 flush and output poison); profile_end()
 * flushes and disables the activity API, aggregates kernel records by name, and measures the
 * device's copy bandwidth (best of 5 device-to-device copies of up to 512 MiB, bytes read plus
 * written), the ceiling against which the supervisor reports the candidate's achieved
 * bandwidth. The worker's own kernels (CA_WORKER_KERNEL_PREFIX) are left out. CUPTI problems are
 * reported as profile.cupti_error (not fatal, not the candidate's fault).
 *
 * Ownership: profile_result owns its kernel entries and names (profile_result_free). */
#ifndef CA_WORKER_PROFILE_H
#define CA_WORKER_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "worker/candidate.h"
#include "worker/gpu.h"

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

int profile_begin(struct worker_error *e);
int profile_end(struct gpu_ctx *g, int calls, struct profile_result *r, struct worker_error *e);
/* After a failed call: recording off, records dropped. */
void profile_abort(void);
/* {"kernels": [{"name", "calls", "total_ns", "avg_ns", "grid", "block", "registers",
 *  "static_smem", "dynamic_smem"}], "total_ns", "forward_calls", "dropped_records",
 *  "peak_copy_gbps" (null if unmeasured)}; names are
 * demangled when possible. */
json_t *profile_result_json(const struct profile_result *r);
void profile_result_free(struct profile_result *r);

#endif
