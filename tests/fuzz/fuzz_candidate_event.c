/* libFuzzer target: cand_proc_judge(), the supervisor's reading of one line the candidate's
 * process wrote (docs/protocol.md, "The candidate's process"). The line is the candidate's:
 * whatever it holds, the verdict is the expected answer for the command, a failure with a code a
 * candidate may be blamed for, or hack.harness_tampering; never a crash, never a code that would
 * blame the environment. The first byte picks the command. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "eval/proc.h"
#include "protocol/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const cmds[] = {WIRE_CMD_EMPTY, WIRE_CMD_LOAD,    WIRE_CMD_SETUP,
					   WIRE_CMD_CALL,  WIRE_CMD_AUDIT,   WIRE_CMD_PROFILE,
					   WIRE_CMD_QUIT,  "(start)"};
	struct loop_fail f;
	json_t *ev = NULL;
	char *line;
	int rc;

	if (size < 1)
		return 0;
	line = malloc(size);
	if (!line)
		return 0;
	memcpy(line, data + 1, size - 1);
	line[size - 1] = '\0';
	memset(&f, 0, sizeof f);
	rc = cand_proc_judge(cmds[data[0] % 8], line, &ev, &f);
	if (rc == 0 && (!ev || f.code[0]))
		abort();
	if (rc != 0 && !cand_proc_code_allowed(f.code) &&
	    strcmp(f.code, "hack.harness_tampering") != 0)
		abort(); /* a candidate's line must never yield env.*, task.* or internal */
	json_decref(ev);
	free(line);
	return 0;
}
