/* bench: evaluates one candidate per task over a whole task tree, as a benchmark run.
 *
 * Tasks: every directory under tasks_dir that holds a model.py (at most BENCH_MAX_DEPTH deep,
 * BENCH_MAX_TASKS of them), keyed by its path relative to tasks_dir ("level1/19_ReLU"), in
 * sorted order. Candidates: candidates_dir/<key> (native, workdir, or a directory holding
 * model_new.py) or candidates_dir/<key>.py (KernelBench), any mix of formats (eval/torch_candidate.h),
 * or, for a KernelBench key, the file KernelBench's generation scripts write
 * (candidates_dir/level_<L>_problem_<P>_sample_<S>_kernel.py: bench/kb_runs.h); a task without one
 * is recorded as candidate.missing, so it counts against the pass rate as it should (with
 * skip_missing it is left out of the run: a corpus that covers part of a task tree). Where
 * KernelBench's own eval_results.json is given (or found in candidates_dir), each result carries
 * its verdict as "kernelbench_eval" and the report shows it beside ours. With kb_harness, bench
 * first runs KernelBench's own harness from that checkout over the candidates, on the same GPU
 * (bench/kb_harness.h), and shows its verdicts. KernelBench files are judged under the kernelbench
 * rules unless --rules says otherwise.
 *
 * Work: up to `jobs` compile processes (`cuda-agent compile`, the same build cache) run ahead
 * on the CPUs while the evaluations (GPU work) run one at a time in this process, with one warm
 * torch bridge, in task order.
 *
 * Results: every finished evaluation is stored at once in out_dir/bench.sqlite (one row per
 * task; bench_results.h) and appended to out_dir/results.jsonl; at the end results.jsonl is
 * rewritten from the store (one line per task, task order) and the report (report/report.h) is
 * printed and written to out_dir/report.html. A re-run resumes: a task whose stored result has
 * the same task hash, candidate fingerprint and evaluation settings is not evaluated again,
 * unless that result says the environment failed (env.*, internal), or `fresh` is set.
 *
 * Progress goes to stderr: one updating line on a terminal, else one line per task, with the
 * counts, the elapsed time and an ETA from the mean time of this run's evaluations.
 * SIGINT/SIGTERM stop the run between tasks (an evaluation cut short is not stored); what was
 * stored stays, and the next run resumes from there. */
#ifndef CA_BENCH_BENCH_H
#define CA_BENCH_BENCH_H

#include <stdbool.h>
#include <stddef.h>

#include "eval/eval.h"
#include "util/diag.h"

#define BENCH_MAX_TASKS 100000
#define BENCH_MAX_DEPTH 8
#define BENCH_MAX_JOBS  256

struct bench_opts {
	const char *tasks_dir;
	const char *candidates_dir;
	const char *out_dir;    /* created if missing */
	int jobs;               /* compile processes; 0: the number of CPUs */
	bool fresh;             /* evaluate everything again */
	bool quiet;             /* no progress output */
	const char *title;      /* of the report; NULL: "cuda-agent bench: <tasks_dir>" */
	const char *self_exe;   /* the cuda-agent binary for compiles; NULL: /proc/self/exe */
	const char *python;     /* the bridge's Python (NULL: default) */
	const char *device;     /* the bridge's device (NULL: auto) */
	struct eval_opts eval;  /* settings for every evaluation (task and candidate set per task) */
	int sample;             /* KernelBench runs: the sample_id whose kernel is taken (0) */
	const char *kb_results; /* KernelBench's eval_results.json to show beside ours (NULL:
				   candidates_dir/eval_results.json when it exists) */
	const char *kb_harness; /* a KernelBench checkout: its own harness judges the candidates
				   first, into out_dir/kernelbench_eval.json, shown beside ours
				   (bench/kb_harness.h); excludes kb_results */
	double kb_timeout_s;    /* that harness's limit per candidate (<= 0: its 180 s) */
	bool skip_missing;      /* tasks without a candidate are left out, not candidate.missing */
};

struct bench_summary {
	size_t tasks;       /* found */
	size_t evaluated;   /* in this run */
	size_t resumed;     /* taken from the store */
	size_t passed;      /* correct, over all stored results of this task tree */
	size_t env_failed;  /* results whose reason is env.* or internal */
	bool interrupted;
	double seconds;
};

/* The task directories under tasks_dir, found as bench finds them (above): keys[i] relative to
 * tasks_dir ("level1/19_ReLU"), dirs[i] the directory; both arrays and their strings are owned
 * by the caller (ca_free_names(keys, n), ca_free_names(dirs, n)). */
int bench_list_tasks(const char *tasks_dir, char ***keys, char ***dirs, size_t *n,
		     struct ca_diag *d);

/* 0 when the run went through its list (the results may still be failures), CA_ERR_INTERRUPTED
 * when stopped by a signal, another negative code when it could not run (no tasks, unwritable
 * out_dir, a broken store). */
int bench_run(const struct bench_opts *o, struct bench_summary *s, struct ca_diag *d);

#endif
