/* libFuzzer target: a CPU list (cpu_list_parse), as $CUDA_AGENT_TIMING_CPUS and the sysfs
 * topology files give it ("0-3,8,10-11\n"). What it accepts formats back (cpu_list_format) to a
 * list that parses to the same set. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eval/cpu_claim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	char text[8 * CPU_SETSIZE];
	cpu_set_t set, again;
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (cpu_list_parse(s, &set) == 0) {
		if (CPU_COUNT(&set) < 1 || cpu_list_format(&set, text, sizeof text) != 0 ||
		    cpu_list_parse(text, &again) != 0 || !CPU_EQUAL(&set, &again))
			__builtin_trap();
	}
	free(s);
	return 0;
}
