/* protocol: the evaluation protocol's parameters (docs/protocol.md, docs/evaluation.md).
 *
 * Verification parameters plus the shared timing protocol (struct timing_protocol, protocol/stats.h:
 * one definition, one set of defaults and one range check, used by the supervisor and parsed by
 * the worker). The timing part is serialized into the worker's plan and the bridge's `time`
 * request so that candidates and baselines are timed the same way. CA_PROTOCOL_VERSION is part
 * of the baseline cache key: bump it whenever a change could move a timing. */
#ifndef CA_PROTOCOL_PROTOCOL_H
#define CA_PROTOCOL_PROTOCOL_H

#include <jansson.h>

#include "protocol/stats.h"
#include "util/diag.h"

#define CA_PROTOCOL_VERSION TIMING_PROTOCOL_VERSION

struct eval_protocol {
	int trials;                    /* verification trials, each with a fresh secret seed (5) */
	int rotation_sets;             /* input sets rotated through while timing (3) */
	struct timing_protocol timing; /* the shared timing protocol (its defaults) */
};

void eval_protocol_defaults(struct eval_protocol *p);
/* The "protocol" object of docs/protocol.md (timing part). */
json_t *eval_protocol_timing_json(const struct eval_protocol *p);
/* Range checks with a message naming the bad field; the timing part is checked by the same
 * parser the worker uses, so whatever passes here the worker accepts. */
int eval_protocol_validate(const struct eval_protocol *p, struct ca_diag *d);

#endif
