/* session: what an evaluation is asked to do (struct eval_opts) and what is worth keeping warm
 * across evaluations (struct eval_session): the torch bridge (a Python process that takes
 * seconds to start), the baseline cache, the supervisor's device (its CUDA context, whose
 * teardown took 77 ms of every evaluation on an H100) and the timed evaluations' reference
 * process (eval/twin.h). eval/eval.h runs an evaluation with them.
 *
 * Ownership: the session owns its bridge, its cache, its probed Python runtime, its reference
 * process and, between evaluations, the supervisor's device until eval_session_close(); an
 * evaluation takes the device for its run (eval/data.c) and gives it back when it is still
 * healthy, and borrows the reference process the same way. eval_opts holds borrowed strings. */
#ifndef CA_EVAL_SESSION_H
#define CA_EVAL_SESSION_H

#include <jansson.h>
#include <stdbool.h>

#include "bridge/bridge.h"
#include "device/device.h"
#include "eval/torch_candidate.h"
#include "eval/twin.h"
#include "protocol/protocol.h"
#include "store/baseline_cache.h"
#include "util/diag.h"

enum eval_mode { EVAL_COMPILE, EVAL_VERIFY, EVAL_PROFILE, EVAL_FULL };
/* The mode's name in results and jobs: compile, verify, profile, eval. */
const char *eval_mode_name(enum eval_mode m);
/* The mode of a name: 0, or CA_ERR_INVALID. */
int eval_mode_parse(const char *name, enum eval_mode *m);

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
	/* The kernel-free view of torch for PyTorch-format candidates under the cuda-agent rules
	 * (docs/security.md, "Torch compute in PyTorch-format candidates"), with the sandbox:
	 * -1 on a GPU (the default), 1 also on the CPU protocol (CUDA_AGENT_TORCH_VIEW=1: CI checks
	 * the mechanics), 0 off (CUDA_AGENT_TORCH_VIEW=0: the refusal modes only) */
	int torch_view;
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
	/* The bridge's describe answers by task hash, at most EVAL_DESCRIBED_MAX: a
	 * task seen before is described without the bridge and without the GPU (describe runs the
	 * reference with a fixed seed, so the answer depends on the task's files only). */
	json_t *described;
	/* The supervisor's device between evaluations (dev_kept): nothing of an evaluation is left
	 * in it (its slots are unmapped), only the context, the stream, the module, the L2 flush
	 * buffer and NVML. It holds no candidate state: the candidate never reaches this context. */
	struct device dev;
	bool dev_kept;
	/* The reference process of timed evaluations on a GPU (eval/twin.h): started by the
	 * first, kept for the next while it stays healthy. It never runs candidate code. */
	struct eval_twin twin;
};

#define EVAL_DESCRIBED_MAX 64

void eval_opts_defaults(struct eval_opts *o);
/* Copies bridge options (strings are copied); starts nothing. */
void eval_session_init(struct eval_session *s, const char *python, const char *device);
/* Starts the bridge now, in the background (eval_run does it on demand otherwise). */
int eval_session_warm(struct eval_session *s, struct ca_diag *d);
void eval_session_close(struct eval_session *s);
/* The supervisor's device for one evaluation: the session's kept one when it is of this kind
 * and its stream still synchronizes (moved into *dev), else a new one (device_open, ordinal 0;
 * a kept one that is not used is closed). 0, or device_open's error. */
int eval_session_device_take(struct eval_session *s, enum device_kind kind, struct device *dev,
			     struct ca_diag *d);
/* Gives an evaluation's device back (its slots unmapped) to the session, which keeps it (and
 * closes it at eval_session_close unless it is taken again). *dev is zeroed. */
void eval_session_device_give(struct eval_session *s, struct device *dev);

#endif
