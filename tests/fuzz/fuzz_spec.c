/* libFuzzer target: the tensor spec JSON the bridge sends (task_spec_from_json), and its
 * round trip through task_spec_to_json. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "tensor/spec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *obj = json_loadb((const char *)data, size, 0, NULL);
	struct task_spec spec;
	struct ca_diag d;
	if (!obj)
		return 0;
	if (task_spec_from_json(&spec, obj, &d) == 0) {
		json_t *back = task_spec_to_json(&spec);
		struct task_spec again;
		if (task_spec_from_json(&again, back, &d) != 0)
			__builtin_trap(); /* what we write we must read */
		task_spec_free(&again);
		json_decref(back);
		for (int i = 0; i < spec.num_outputs; i++)
			(void)tensor_spec_nbytes(&spec.outputs[i]);
		task_spec_free(&spec);
	}
	json_decref(obj);
	return 0;
}
