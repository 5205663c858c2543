/* protocol: the evaluation protocol's parameters (docs/protocol.md, docs/evaluation.md).
 *
 * One struct configures verification and the shared timing protocol; it is serialized into the
 * worker's plan and the bridge's `time` request so that candidates and baselines are timed the
 * same way. CA_PROTOCOL_VERSION is part of the baseline cache key: bump it whenever a change
 * could move a timing. */
#ifndef CA_EVAL_PROTOCOL_H
#define CA_EVAL_PROTOCOL_H

#include <jansson.h>

#include "util/diag.h"

#define CA_PROTOCOL_VERSION 1

struct eval_protocol {
	int trials;             /* verification trials, each with a fresh secret seed (5) */
	int rotation_sets;      /* input sets rotated through while timing (3) */
	int warmup_min_calls;   /* 3 */
	double warmup_min_ms;   /* 25 */
	int min_samples;        /* 10 */
	int max_samples;        /* 2000 */
	double target_rse;      /* 0.005 */
	double budget_s;        /* 2.0 */
	double l2_flush_factor; /* 2.0 */
	double perturb_scale;   /* 2^-10 */
	int checks;             /* checked calls inside the timed loop (2) */
};

void eval_protocol_defaults(struct eval_protocol *p);
/* The "protocol" object of docs/protocol.md (timing part). */
json_t *eval_protocol_timing_json(const struct eval_protocol *p);
/* Range checks with a message naming the bad field. */
int eval_protocol_validate(const struct eval_protocol *p, struct ca_diag *d);

#endif
