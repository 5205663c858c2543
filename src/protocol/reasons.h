/* reasons: the one registry of result reason codes (docs/result.md, "Reason codes").
 *
 * Every code a result, a worker event or a bridge error may carry is a row here: its class,
 * whether a run that ends with it gets reward -1 (it judged the candidate) or null (it says
 * nothing about the candidate: the task, the environment or cuda-agent failed), the process
 * exit code of `cuda-agent eval`, whether the candidate's own process may report it, and a
 * message stem. docs/result.md's table and the Python side (python/cuda_agent_bridge) are checked
 * against this table by scripts/check_reasons.py in the test command, so a code cannot exist on
 * one side only.
 *
 * Ownership: static data; lookups return pointers into it. */
#ifndef CA_PROTOCOL_REASONS_H
#define CA_PROTOCOL_REASONS_H

#include <stdbool.h>
#include <stddef.h>

enum reason_class {
	REASON_OK,        /* judged and passed */
	REASON_CANDIDATE, /* the candidate failed: reward -1, exit 1 */
	REASON_TASK,      /* the task is broken: reward null, exit 3 */
	REASON_ENV,       /* the environment: reward null, exit 4 */
	REASON_INTERNAL,  /* cuda-agent itself: reward null, exit 5 */
};

struct reason {
	const char *code;
	enum reason_class cls;
	/* The candidate's process (the native worker, the PyTorch-format runner) may answer with
	 * it. Any other code from that process is hack.harness_tampering: it cannot blame the task
	 * or the environment, and it cannot invent codes. */
	bool candidate_may_report;
	const char *stem; /* what it means, in a few words */
};

/* The row of code, or NULL when it is not registered. */
const struct reason *reason_find(const char *code);
/* All rows, in the order of docs/result.md. */
const struct reason *reason_table(size_t *count);
/* The class of code; an unregistered code counts as REASON_INTERNAL (a bug: it must be
 * registered). NULL is REASON_OK (no reason yet). */
enum reason_class reason_class_of(const char *code);
/* Whether a run that ends with code judged the candidate (reward -1 when not "ok") rather than
 * failing for the task's, the environment's or our own reasons (reward null). */
bool reason_judged(const char *code);
/* `cuda-agent eval`'s exit code for a result with this code: 0, 1, 3, 4 or 5 (docs/cli.md). */
int reason_exit_code(const char *code);
/* Whether the candidate's process may report code (see candidate_may_report). */
bool reason_candidate_may_report(const char *code);
/* "ok", "candidate", "task", "env", "internal". */
const char *reason_class_name(enum reason_class c);

#endif
