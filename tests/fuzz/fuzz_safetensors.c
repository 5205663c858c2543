/* libFuzzer target: safetensors_parse on arbitrary bytes must either fail cleanly or yield
 * tensors whose data lies inside the buffer, sorted by name and findable. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct safetensors st;
	struct ca_diag d;

	d.msg[0] = '\0';
	if (safetensors_parse(&st, data, size, &d) == 0) {
		for (size_t i = 0; i < st.count; i++) {
			const struct st_tensor *t = &st.tensors[i];
			const uint8_t *p = t->data;
			if (p < data || p + t->nbytes > data + size)
				abort();
			if (i && strcmp(st.tensors[i - 1].name, t->name) >= 0)
				abort();
			if (safetensors_find(&st, t->name) != t)
				abort();
			/* touch the first and last byte so ASan checks the range */
			if (t->nbytes && (p[0] ^ p[t->nbytes - 1]) == 0x5a5a)
				abort();
		}
	} else if (d.msg[0] == '\0' || strchr(d.msg, '\n')) {
		abort(); /* every failure must explain itself on one line */
	}
	safetensors_close(&st);
	return 0;
}
