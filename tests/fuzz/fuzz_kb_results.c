/* libFuzzer target: KernelBench's eval_results.json as bench reads it (kb_results_lookup), for
 * the keys and samples a bench run asks about. */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/kb_runs.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const keys[] = {"level1/19_ReLU", "level2/23_Conv3d_GroupNorm_Mean",
					   "x/level3/1_MLP", "level1/0", "nolevel/19_ReLU"};
	json_t *obj = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, NULL);
	if (!obj)
		return 0;
	for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
		for (int s = 0; s < 3; s++) {
			json_t *v = kb_results_lookup(obj, keys[k], s);
			if (v && (!json_is_object(v) ||
				  json_integer_value(json_object_get(v, "sample_id")) != s))
				__builtin_trap();
			json_decref(v);
		}
	json_decref(obj);
	return 0;
}
