/* kb_harness: KernelBench's own harness over a bench's candidate tree, before bench's own
 * evaluations (`cuda-agent bench --kernelbench-harness KB`, docs/cli.md "bench").
 *
 * It runs `python -m cuda_agent_bridge.kb_harness run` (python/cuda_agent_bridge/kb_harness.py)
 * with the bridge's Python: each KernelBench file of the candidate tree is judged by
 * `eval_kernel_against_ref` of the checkout KB, in a process of its own with a timeout, and the
 * verdicts are written to out_path in the shape of KernelBench's eval_results.json (keys
 * "L<level>P<problem>"), which bench then reads as it reads --kernelbench-results. The tool's
 * progress lines go to stderr (unless quiet), the candidates' own output to log_path. A run
 * again keeps what out_path already holds for the same candidate bytes and settings. */
#ifndef CA_BENCH_KB_HARNESS_H
#define CA_BENCH_KB_HARNESS_H

#include <signal.h>
#include <stdbool.h>

#include "util/diag.h"

#define KB_HARNESS_MAX_TIMEOUT_S 86400.0

struct kb_harness_opts {
	const char *python;         /* NULL: bridge_python(NULL) */
	const char *kernelbench;    /* the checkout */
	const char *tasks_dir;      /* bench's task tree: the keys */
	const char *candidates_dir;
	const char *out_path;       /* the eval_results.json written */
	const char *log_path;       /* the candidates' output */
	const char *device;         /* NULL: the tool's default (cuda:0) */
	int sample;
	double timeout_s;           /* per candidate, build included; <= 0: the tool's (180 s) */
	bool fresh;                 /* judge everything again */
	bool quiet;                 /* no progress lines */
	volatile sig_atomic_t *stop; /* set by the caller's SIGINT/SIGTERM handler, or NULL */
};

/* 0 when every candidate has KernelBench's verdict in out_path (a verdict may be a failure);
 * CA_ERR_INVALID when the tool refuses its arguments (no checkout there), CA_ERR_UNSUPPORTED
 * when KernelBench's eval cannot be imported with that Python (the message says what to install),
 * CA_ERR_INTERRUPTED when *stop was set (what was judged stays in out_path), CA_ERR_CHILD when
 * the tool failed otherwise (the message ends with its last lines). */
int kb_harness_run(const struct kb_harness_opts *o, struct ca_diag *d);

#endif
