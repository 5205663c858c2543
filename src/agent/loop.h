/* loop: the agent loop (issue 5; docs/agent.md). An LLM behind an OpenAI-compatible endpoint
 * works in a workspace (src/workspace) like a CUDA engineer: it reads the task, writes kernels,
 * compiles, verifies, profiles and iterates through tool calls (src/agent/tools.h), until it
 * stops calling tools or a turn or token budget ends; then a final evaluation of the workspace
 * against the original task gives the reward.
 *
 * Turns: one chat request (src/agent/llm.h) with the whole conversation and the tool schemas;
 * each tool call in the reply is run in order and answered with a tool message. A call whose
 * arguments are not a JSON object, or that names no tool, or whose arguments do not fit the
 * tool's schema, is answered with an error message and counted as a schema violation. A call
 * with the same name and arguments as an earlier one is counted as repeated. `cuda-agent
 * compile|verify|profile [--json]` given to bash as the whole command is not run in the
 * sandbox (which has no GPU): the loop evaluates the workspace itself, with the session's warm
 * torch bridge, and answers with the summary (or the JSON).
 *
 * Budgets: max_turns requests; the conversation's size as the server counts it (prompt +
 * completion tokens of the last reply) against context_tokens: the loop stops before a request
 * that would start at or above it. Tool outputs are capped by the tools (head and tail kept,
 * with a note).
 *
 * Trajectory (JSONL, one object per line, written as it happens and flushed, so an interrupted
 * run keeps what it did): {"type": "start", ...}, then per turn {"type": "turn", ...} with the
 * reply, usage and seconds, and {"type": "tool", ...} per call with its arguments, output,
 * ok, seconds, violation and repeated flags; then {"type": "final", "result": <the evaluation
 * result, docs/result.md>} and {"type": "summary", ...} (the agent_result below).
 *
 * Ownership: the caller owns opts; res->final is owned by the caller (json_decref) after
 * agent_run returns 0. */
#ifndef CA_AGENT_LOOP_H
#define CA_AGENT_LOOP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "agent/llm.h"
#include "eval/eval.h"
#include "util/diag.h"

struct agent_opts {
	const char *task_dir;        /* the original task (the final evaluation uses it) */
	const char *workspace;       /* made with workspace_create() when it does not exist */
	struct llm_opts llm;
	int max_turns;               /* 0: 150 */
	long context_tokens;         /* 0: 128000 */
	size_t tool_output_cap;      /* 0: 30000 bytes */
	double bash_timeout_s;       /* 0: 120 */
	const char *trajectory_path; /* JSONL; NULL: <workspace>/trajectory.jsonl */
	struct eval_opts eval;       /* sandbox, protocol, ... for compile/verify/profile and the end */
	bool quiet;                  /* no progress lines on stderr */
};

struct agent_result {
	int turns;
	int tool_calls;
	int schema_violations;
	int repeated_calls;
	long prompt_tokens;          /* of the last reply (the conversation's size) */
	long completion_tokens;      /* summed over the replies */
	char stop_reason[32];        /* done, turn_limit, token_limit, llm_error */
	char llm_error[256];         /* with llm_error: what the client said */
	json_t *final;               /* the final evaluation's result */
	double seconds;
	double llm_seconds, tool_seconds;
	double overhead_ms_per_turn; /* the loop's own time per turn (not the model's, not tools') */
};

void agent_opts_defaults(struct agent_opts *o);

/* Runs the loop and the final evaluation. Returns 0 when a final result exists (whatever its
 * verdict; res->stop_reason says how the loop ended), negative when it could not run at all
 * (workspace, trajectory file, LLM client setup). */
int agent_run(struct eval_session *s, const struct agent_opts *o, struct agent_result *res,
	      struct ca_diag *d);

void agent_result_free(struct agent_result *res);

/* For the loop and its tests: the `cuda-agent compile|verify|profile [--json]` bash commands
 * the loop runs itself; sets *mode and *json and returns true when `command` is one. */
bool agent_eval_command(const char *command, enum eval_mode *mode, bool *json);

/* The opening messages of an episode on a workspace: [{"role": "system", "content": SKILL.md},
 * {"role": "user", "content": the task (model.py), its interface (INTERFACE.md) and what to
 * do}]. `cuda-agent solve` starts with them and a service session answers them (serve/
 * sessions.h), so that a policy trained through the service meets the same start when solve
 * evaluates it. The text names no path: the bash tool runs in the workspace in both. NULL with
 * d set when a file cannot be read. The caller owns the array. */
json_t *agent_opening_messages(const char *workspace, struct ca_diag *d);

#endif
