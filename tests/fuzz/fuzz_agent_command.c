/* libFuzzer target: agent_eval_command(), which reads command lines the agent controls (the bash
 * tool's command, and request lines the `cuda-agent` shim sends from inside the sandbox).
 * Whatever it accepts must be exactly `cuda-agent compile|verify|profile [--json]`. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/loop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *line = malloc(size + 1);
	enum eval_mode mode;
	bool json = false;
	if (!line)
		return 0;
	memcpy(line, data, size);
	line[size] = '\0';
	if (agent_eval_command(line, &mode, &json)) {
		/* accepted: the words are cuda-agent, a known verb and at most --json */
		if (!strstr(line, "cuda-agent") ||
		    (mode != EVAL_COMPILE && mode != EVAL_VERIFY && mode != EVAL_PROFILE) ||
		    (json && !strstr(line, "--json")))
			abort();
	}
	free(line);
	return 0;
}
