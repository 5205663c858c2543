/* layout: where each tensor lives inside a slot (docs/protocol.md, "Slots").
 *
 * A slot holds one list of tensors (the params; the GPU arguments of one call; one call's
 * outputs) in spec order, each at an offset rounded up to LAYOUT_ALIGN bytes. Arguments that are
 * Python numbers (spec `on_cpu`) take no space in the inputs slot: their values travel with each
 * call. The bridge (python/cuda_agent_bridge/slots.py, `layout`) computes the same offsets from
 * the same spec, so nothing about the layout is ever sent.
 *
 * Ownership: a slot_layout owns its offsets array (slot_layout_free). */
#ifndef CA_PROTOCOL_LAYOUT_H
#define CA_PROTOCOL_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "tensor/spec.h"
#include "util/diag.h"

#define LAYOUT_ALIGN 256
/* Largest slot (2^47 bytes, the bridge's cap): guards the size arithmetic. */
#define LAYOUT_MAX_BYTES (1ull << 47)

struct slot_layout {
	size_t *offset; /* per tensor of the list; (size_t)-1 for a tensor that takes no space */
	int n;
	size_t bytes; /* the slot's size: at least LAYOUT_ALIGN */
};

/* Lays out n tensors; skip_cpu leaves out the tensors marked on_cpu (the inputs slot).
 * CA_ERR_LIMIT when the slot would pass LAYOUT_MAX_BYTES, CA_ERR_NOMEM. */
int slot_layout_make(struct slot_layout *l, const struct tensor_spec *t, int n, bool skip_cpu,
		     struct ca_diag *d);
void slot_layout_free(struct slot_layout *l);

#endif
