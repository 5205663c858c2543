#include "protocol/layout.h"

#include <stdint.h>
#include <stdlib.h>

int slot_layout_make(struct slot_layout *l, const struct tensor_spec *t, int n, bool skip_cpu,
		     struct ca_diag *d)
{
	size_t at = 0;

	l->offset = NULL;
	l->n = 0;
	l->bytes = LAYOUT_ALIGN;
	if (n < 0 || n > CA_SPEC_MAX_TENSORS)
		return ca_fail(d, CA_ERR_LIMIT, "slot layout: %d tensors", n);
	l->offset = calloc((size_t)(n > 0 ? n : 1), sizeof *l->offset);
	if (!l->offset)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	l->n = n;
	for (int i = 0; i < n; i++) {
		size_t nbytes = tensor_spec_nbytes(&t[i]);
		if (skip_cpu && t[i].on_cpu) {
			l->offset[i] = SIZE_MAX;
			continue;
		}
		if (nbytes > LAYOUT_MAX_BYTES || at > LAYOUT_MAX_BYTES - nbytes - LAYOUT_ALIGN) {
			slot_layout_free(l);
			return ca_fail(d, CA_ERR_LIMIT, "slot layout: %s needs more than %llu bytes",
				       t[i].name, (unsigned long long)LAYOUT_MAX_BYTES);
		}
		l->offset[i] = at;
		at += (nbytes + LAYOUT_ALIGN - 1) / LAYOUT_ALIGN * LAYOUT_ALIGN;
	}
	l->bytes = at > LAYOUT_ALIGN ? at : LAYOUT_ALIGN;
	return 0;
}

void slot_layout_free(struct slot_layout *l)
{
	free(l->offset);
	l->offset = NULL;
	l->n = 0;
}
