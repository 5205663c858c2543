/* eval: the supervisor. Evaluates one candidate against one task and produces the result JSON
 * (docs/result.md): build -> describe -> slots (the bridge's GPU memory) -> the candidate's
 * process (calibrated before it loads the candidate) -> verification trials -> the timed loop
 * -> baselines (cached, else the same loop) -> reward. Every seed, every check and every number
 * of the result is decided here or in the bridge, never in the candidate's process
 * (docs/security.md, "The trust boundary").
 *
 * An eval_session holds what is worth keeping warm across evaluations: the torch bridge (a
 * Python process that takes seconds to start) and the baseline cache.
 *
 * eval_run() returns 0 whenever it produced a result, whatever the verdict (the verdict is in
 * the result's "reason"), and a negative code only when it could not evaluate at all (bad
 * options, cannot write the run directory). */
#ifndef CA_EVAL_EVAL_H
#define CA_EVAL_EVAL_H

#include <jansson.h>
#include <stdbool.h>

#include "bridge/bridge.h"
#include "protocol/protocol.h"
#include "eval/torch_candidate.h"
#include "store/baseline_cache.h"
#include "util/diag.h"

#define CA_RESULT_SCHEMA "cuda-agent.result/1"

enum eval_mode { EVAL_COMPILE, EVAL_VERIFY, EVAL_PROFILE, EVAL_FULL };

/* When the candidate and a baseline are re-timed interleaved before the reward is decided
 * (docs/evaluation.md, "Decisions at the thresholds"): when the speed-up's interval holds the
 * threshold (auto, the default), for every timed evaluation, or never. */
enum eval_interleave { EVAL_INTERLEAVE_AUTO = 0, EVAL_INTERLEAVE_ALWAYS, EVAL_INTERLEAVE_NEVER };

struct eval_opts {
	enum eval_mode mode;
	const char *task_dir;
	const char *candidate_dir;  /* native: holds kernels/; or a PyTorch-format candidate (a
				       CUDA-Agent workdir, a KernelBench .py file): see format */
	enum candidate_format format; /* CANDIDATE_AUTO: detected (torch_candidate.h) */
	struct eval_protocol protocol;
	const char *arch;           /* NULL: detected */
	bool no_build_cache;
	bool refresh_baselines;     /* re-measure eager/compile even if cached */
	bool keep_run_dir;          /* keep the run directory (plan, stderr) for inspection */
	double worker_timeout_s;    /* watchdog: seconds the candidate's process may run (0: 60 s
				       + twice the timing budget); it is stopped between calls */
	const char *worker_path;    /* NULL: $CUDA_AGENT_WORKER, else next to this executable */
	const char *baseline_db;    /* NULL: <cache>/baselines.sqlite */
	int profile_calls;          /* 0: 5 */
	bool sandbox;               /* run the worker in the sandbox (src/sandbox); default on
				       (eval_opts_defaults), off when $CUDA_AGENT_SANDBOX=0 */
	enum torch_profile rules;   /* --rules: what a PyTorch-format candidate may do
				       (docs/torch-rules.md, "Rules profiles"); default cuda-agent.
				       Native candidates are judged under cuda-agent only */
	bool rules_by_format;       /* no --rules given to bench: KernelBench files are judged
				       under kernelbench, other formats under cuda-agent */
	enum eval_interleave interleave; /* --interleave: decisions at the thresholds */
};

struct eval_session {
	struct bridge bridge;
	struct bridge_opts bridge_opts;
	bool bridge_started;
	struct baseline_cache cache;
	struct python_runtime *py;  /* probed on first use by a PyTorch-format candidate */
	bool cache_open;
	char python[256];
	char device[16];
};

void eval_opts_defaults(struct eval_opts *o);
/* Copies bridge options (strings are copied); starts nothing. */
void eval_session_init(struct eval_session *s, const char *python, const char *device);
/* Starts the bridge now, in the background (eval_run does it on demand otherwise). */
int eval_session_warm(struct eval_session *s, struct ca_diag *d);
void eval_session_close(struct eval_session *s);

int eval_run(struct eval_session *s, const struct eval_opts *o, json_t **result,
	     struct ca_diag *d);

/* Process exit code for a result (documented in docs/cli.md):
 * 0 ok, 1 candidate failed, 3 task broken, 4 environment (no GPU, bridge, worker missing). */
int eval_exit_code(const json_t *result);

#endif
