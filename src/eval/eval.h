/* eval: the supervisor. Evaluates one candidate against one task and produces the result JSON
 * (docs/result.md): build -> describe -> slots (the bridge's GPU memory) -> the candidate's
 * process (calibrated before it loads the candidate) -> verification trials -> the timed loop
 * -> baselines (cached, else the same loop) -> reward. Every seed, every check and every number
 * of the result is decided here or in the bridge, never in the candidate's process
 * (docs/security.md, "The trust boundary").
 *
 * The options and the session (what is kept warm across evaluations) are in eval/session.h.
 *
 * eval_run() returns 0 whenever it produced a result, whatever the verdict (the verdict is in
 * the result's "reason"), and a negative code only when it could not evaluate at all (bad
 * options, cannot write the run directory). */
#ifndef CA_EVAL_EVAL_H
#define CA_EVAL_EVAL_H

#include <jansson.h>
#include <stdbool.h>

#include "eval/session.h"
#include "util/diag.h"

#define CA_RESULT_SCHEMA "cuda-agent.result/1"

int eval_run(struct eval_session *s, const struct eval_opts *o, json_t **result,
	     struct ca_diag *d);

/* The eager and torch.compile baselines of o->task_dir, with no candidate: found in the
 * baseline cache, or (o->refresh_baselines, or none there) measured on the GPU with the loop
 * an evaluation uses and stored (`cuda-agent baselines measure`, `synth export --baselines`).
 * The result (docs/result.md, "Baselines only"): schema, mode "baselines", task, baselines
 * {eager, compile} (null when none were had), baselines_cached, reason, env, seconds, summary.
 * 0 whenever a result was produced (the reason says how it went; eval_exit_code applies). */
int eval_baselines(struct eval_session *s, const struct eval_opts *o, json_t **result,
		   struct ca_diag *d);

/* Process exit code for a result (documented in docs/cli.md):
 * 0 ok, 1 candidate failed, 3 task broken, 4 environment (no GPU, bridge, worker missing). */
int eval_exit_code(const json_t *result);

#endif
