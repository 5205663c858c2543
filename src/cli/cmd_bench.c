/* cuda-agent bench TASKS CANDIDATES: one candidate per task over a task tree (bench/bench.h). */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/kb_harness.h"
#include "bench/kb_runs.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "util/log.h"

static const char bench_usage[] =
	"usage: cuda-agent bench [options] TASKS CANDIDATES\n"
	"\n"
	"Evaluates CANDIDATES/<path> against every task TASKS/<path> (a directory holding\n"
	"model.py, e.g. an imported store: cuda-agent tasks import ...). Compiles run ahead on the\n"
	"CPUs, evaluations run one at a time on the GPU. Every result is stored as it finishes in\n"
	"OUT/bench.sqlite and OUT/results.jsonl; running the same command again resumes. At the end\n"
	"the report is printed and written to OUT/report.html (docs/report.md).\n"
	"\n"
	"bench options:\n"
	"  --out DIR              where results and the report go (default bench-out)\n"
	"  --jobs N               compile processes (default: the number of CPUs)\n"
	"  --fresh                evaluate every task again instead of resuming\n"
	"  --title TEXT           the report's title\n"
	"  --sample N             KernelBench runs: take level_L_problem_P_sample_N_kernel.py (0)\n"
	"  --kernelbench-results FILE\n"
	"                         KernelBench's eval_results.json, shown beside our verdicts\n"
	"                         (default: CANDIDATES/eval_results.json when it exists)\n"
	"  --kernelbench-harness KB\n"
	"                         first run KernelBench's own eval (eval_kernel_against_ref of the\n"
	"                         checkout KB) over the candidates on the same GPU, into\n"
	"                         OUT/kernelbench_eval.json, and show its verdicts beside ours\n"
	"  --kernelbench-timeout S\n"
	"                         its limit per candidate, build included (default 180, as\n"
	"                         KernelBench's eval_from_generations.py)\n"
	"  --skip-missing         leave out tasks that have no candidate (default: each counts as\n"
	"                         candidate.missing)\n"
	"\n"
	"KernelBench files (CANDIDATES/<key>.py, or the runs/ layout of KernelBench's scripts)\n"
	"are judged under --rules kernelbench unless --rules is given; others under cuda-agent.\n"
	"\n"
	"evaluation (every task is evaluated as `cuda-agent eval` does)";

/* *out = v when it is a whole number in [lo, hi]; else -1 with a one-line message. */
static int whole_number(const char *name, const char *v, int lo, int hi, int *out)
{
	char *end = NULL;
	long n = strtol(v, &end, 10);
	if (end == v || *end || n < lo || n > hi) {
		fprintf(stderr, "cuda-agent: %s takes a number %d-%d\n", name, lo, hi);
		return -1;
	}
	*out = (int)n;
	return 0;
}

/* Takes the bench-only options out of argv (in place); the rest goes to the shared parser. */
static int take_bench_options(int *argc, char **argv, struct bench_opts *b)
{
	int out = 1;
	for (int i = 1; i < *argc; i++) {
		const char *v;
		bool missing = false;
		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		if (strcmp(argv[i], "--fresh") == 0) {
			b->fresh = true;
		} else if (strcmp(argv[i], "--skip-missing") == 0) {
			b->skip_missing = true;
		} else if ((v = cli_option_value(*argc, argv, &i, "--out", &missing))) {
			b->out_dir = v;
		} else if ((v = cli_option_value(*argc, argv, &i, "--title", &missing))) {
			b->title = v;
		} else if ((v = cli_option_value(*argc, argv, &i, "--kernelbench-results",
						  &missing))) {
			b->kb_results = v;
		} else if ((v = cli_option_value(*argc, argv, &i, "--kernelbench-harness",
						  &missing))) {
			b->kb_harness = v;
		} else if ((v = cli_option_value(*argc, argv, &i, "--kernelbench-timeout",
						  &missing))) {
			char *end = NULL;
			b->kb_timeout_s = strtod(v, &end);
			if (end == v || *end || !(b->kb_timeout_s > 0) ||
			    b->kb_timeout_s > KB_HARNESS_MAX_TIMEOUT_S) {
				fprintf(stderr, "cuda-agent: --kernelbench-timeout takes seconds, more "
						"than 0 and at most %.0f\n",
					KB_HARNESS_MAX_TIMEOUT_S);
				return EXIT_USAGE;
			}
		} else if ((v = cli_option_value(*argc, argv, &i, "--sample", &missing))) {
			if (whole_number("--sample", v, 0, KB_MAX_SAMPLE, &b->sample))
				return EXIT_USAGE;
		} else if ((v = cli_option_value(*argc, argv, &i, "--jobs", &missing))) {
			if (whole_number("--jobs", v, 1, BENCH_MAX_JOBS, &b->jobs))
				return EXIT_USAGE;
		} else if (missing) {
			fprintf(stderr, "cuda-agent: %s needs a value\n", argv[i]);
			return EXIT_USAGE;
		} else {
			argv[out++] = argv[i];
		}
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_opts b;
	struct bench_summary s;
	struct cli c;
	struct ca_diag d = {{0}};
	int rc;

	memset(&b, 0, sizeof b);
	memset(&c, 0, sizeof c);
	b.out_dir = "bench-out";
	eval_opts_defaults(&c.opts);
	c.opts.mode = EVAL_FULL;
	c.opts.rules_by_format = true; /* --rules clears it */
	if ((rc = take_bench_options(&argc, argv, &b)))
		return rc;
	if ((rc = cli_parse_options(&c, argc, argv, bench_usage)))
		return rc;
	if (b.kb_harness && b.kb_results) {
		fprintf(stderr, "cuda-agent: --kernelbench-harness writes the verdicts that "
				"--kernelbench-results would name: give one of them\n");
		return EXIT_USAGE;
	}
	if (b.kb_timeout_s > 0 && !b.kb_harness) {
		fprintf(stderr, "cuda-agent: --kernelbench-timeout goes with --kernelbench-harness\n");
		return EXIT_USAGE;
	}
	if (argc - optind != 2) {
		fprintf(stderr, "usage: cuda-agent bench [options] TASKS CANDIDATES\n"
				"(a task tree and a candidate tree; --help for more)\n");
		return EXIT_USAGE;
	}
	if (c.task || c.json) {
		fprintf(stderr, "cuda-agent: bench takes its tasks from TASKS (no --task) and writes "
				"JSON to OUT/results.jsonl (no --json)\n");
		return EXIT_USAGE;
	}
	b.tasks_dir = argv[optind];
	b.candidates_dir = argv[optind + 1];
	b.python = c.python;
	b.device = c.device;
	b.eval = c.opts;
	b.quiet = ca_log_get_level() == CA_LOG_QUIET;
	/* The evaluations' own progress lines would interleave with bench's. */
	if (ca_log_get_level() == CA_LOG_INFO)
		ca_log_set_level(CA_LOG_QUIET);
	rc = bench_run(&b, &s, &d);
	if (rc == CA_ERR_INTERRUPTED) {
		fprintf(stderr, "cuda-agent: %s\n", d.msg);
		return 130;
	}
	if (rc) {
		fprintf(stderr, "cuda-agent: bench: %s\n", d.msg);
		return rc == CA_ERR_NOTFOUND || rc == CA_ERR_INVALID ? EXIT_USAGE
		       : rc == CA_ERR_UNSUPPORTED ? EXIT_ENV
						  : EXIT_INTERNAL;
	}
	if (!b.quiet)
		fprintf(stderr,
			"bench: %zu tasks, %zu evaluated now, %zu resumed, %zu passed, %.1f s%s\n",
			s.tasks, s.evaluated, s.resumed, s.passed, s.seconds,
			s.env_failed ? " (some results say the environment failed: env.*; they are "
				       "evaluated again on the next run)"
				     : "");
	/* Like eval: 4 when the environment kept every evaluation from happening. */
	return s.env_failed > 0 && s.env_failed == s.tasks ? EXIT_ENV : 0;
}
