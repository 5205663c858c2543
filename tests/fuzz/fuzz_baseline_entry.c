/* libFuzzer target: one line of an exported baseline table (baseline_entry_from_json), as
 * `cuda-agent baselines import` reads it from a file another machine wrote. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "store/baseline_cache.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *obj = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	struct baseline_entry e;
	struct ca_diag d;
	if (!obj)
		return 0;
	if (baseline_entry_from_json(obj, &e, &d) == 0) {
		/* what was accepted is bounded and terminated */
		if (strlen(e.task_hash) >= BASELINE_FIELD_MAX || strlen(e.gpu_name) >= BASELINE_FIELD_MAX ||
		    strlen(e.torch_version) >= BASELINE_FIELD_MAX || !json_is_object(e.timing) ||
		    e.protocol_version < 1 || !(e.measured_at >= 0))
			__builtin_trap();
	}
	json_decref(obj);
	return 0;
}
