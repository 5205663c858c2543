/* plan: the candidate process's plan file (docs/protocol.md, "The candidate's process: plan,
 * commands, events"), version 2.
 *
 * The plan holds nothing secret: the candidate's library, the device, the spec and the slots
 * (descriptors the supervisor passed at 3, 4, ... with their sizes). It never names a seed, a
 * data file or the schedule of checked calls: a call's inputs reach the process when the call
 * is made. Parsed defensively all the same (file size, paths, list lengths and the spec capped;
 * every problem is one line naming the key, reported as worker.bad_plan).
 *
 * A reference process's plan (docs/protocol.md, "The reference process") is {"version", "device",
 * "reference": true} and nothing else: no library, no spec, no slots. Such a process answers
 * `empty` and `quit` only, so it can serve one evaluation after another (eval/twin.h).
 *
 * Ownership: a worker_plan owns its strings and arrays; worker_plan_free() releases them. */
#ifndef CA_WORKER_PLAN_H
#define CA_WORKER_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "device/device.h"
#include "tensor/spec.h"
#include "util/diag.h"

#define PLAN_MAX_BYTES (16u << 20)
#define PLAN_MAX_PATH 4095
#define PLAN_MAX_INPUTS 16
#define PLAN_MAX_DEVICE 1023
#define PLAN_MAX_FD 1023

struct plan_slot {
	int fd;
	size_t bytes;
};

struct worker_plan {
	char *library;
	int device;
	struct task_spec spec;
	enum device_kind kind; /* of the slots */
	struct plan_slot params, outputs;
	struct plan_slot inputs[PLAN_MAX_INPUTS];
	int num_inputs;
	bool reference; /* a reference process: library NULL, no spec, no slots */
};

/* Reads and validates the plan at path. On error the plan is left empty (nothing to free). */
int worker_plan_load(struct worker_plan *plan, const char *path, struct ca_diag *d);
/* Same, from a JSON object (for tests and tools). */
int worker_plan_from_json(struct worker_plan *plan, const json_t *root, struct ca_diag *d);
void worker_plan_free(struct worker_plan *plan);

#endif
