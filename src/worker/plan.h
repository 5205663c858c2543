/* plan: the GPU worker's plan file (docs/protocol.md, "GPU worker: plan in, JSON lines out").
 *
 * The plan is written by the supervisor, but it is parsed defensively all the same: the file
 * size, every path, every list and the spec are capped, types are checked, and every problem is a
 * one-line message naming the offending key (reported as worker.bad_plan). Ownership: a
 * worker_plan owns all its strings and arrays; worker_plan_free() releases them. */
#ifndef CA_WORKER_PLAN_H
#define CA_WORKER_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "eval/stats.h"
#include "tensor/spec.h"
#include "util/diag.h"

#define PLAN_MAX_BYTES (16u << 20)
#define PLAN_MAX_PATH 4095
#define PLAN_MAX_VERIFY 100
#define PLAN_MAX_ROTATION 64
#define PLAN_MAX_PROFILE_CALLS 1000
#define PLAN_DEFAULT_PROFILE_CALLS 5
#define PLAN_MAX_DEVICE 1023

struct plan_trial {
	char *params;  /* params file to upload (NULL when absent: checks and final reuse params) */
	char *inputs;  /* inputs file */
	char *outputs; /* outputs file the worker writes (NULL for profile) */
};

struct plan_timing {
	char *params;
	char **rotation; /* input sets rotated through, one device buffer set each */
	int num_rotation;
	struct plan_trial *checks; /* inputs + outputs; count == protocol.checks */
	int num_checks;
	struct plan_trial final; /* inputs + outputs */
	uint64_t seed;
	struct timing_protocol protocol;
};

struct plan_profile {
	char *params;
	char *inputs;
	int calls;
};

struct worker_plan {
	char *library;
	int device;
	struct task_spec spec;
	struct plan_trial *verify; /* params + inputs + outputs each */
	int num_verify;
	bool has_timing;
	struct plan_timing timing;
	bool has_profile;
	struct plan_profile profile;
	/* After the verification trials, emit {"event": "verified"} and wait for a line on stdin:
	 * "continue" goes on to timing and profile, anything else (or EOF) skips them. This lets
	 * the supervisor compare outputs before spending GPU time on timing. */
	bool gate_after_verify;
};

/* Reads and validates the plan at path. On error the plan is left empty (nothing to free). */
int worker_plan_load(struct worker_plan *plan, const char *path, struct ca_diag *d);
/* Same, from a JSON object (for tests and tools). */
int worker_plan_from_json(struct worker_plan *plan, const json_t *root, struct ca_diag *d);
void worker_plan_free(struct worker_plan *plan);

#endif
