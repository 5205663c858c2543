/* cuda-agent solve TASK --llm-url URL --model NAME: the agent loop on one task (agent/loop.h,
 * docs/agent.md). Exit codes as eval's for the final evaluation (docs/cli.md), 2 for usage,
 * 4 when the loop could not start (LLM client, workspace, trajectory file). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <limits.h>
#include <pthread.h>
#include <unistd.h>

#include "agent/loop.h"
#include "bench/bench.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/pool.h"

static const char solve_usage[] =
	"usage: cuda-agent solve [options] TASK --llm-url URL --model NAME\n"
	"       cuda-agent solve [options] --batch TASKS --out DIR [--concurrency N] --llm-url URL\n"
	"                        --model NAME\n"
	"\n"
	"Runs an LLM as a CUDA engineer on TASK (a directory with model.py): it gets a workspace\n"
	"(cuda-agent workspace new), SKILL.md and the interface, and works through tool calls\n"
	"(bash in the sandbox, read_file, write_file, edit, multi_edit, glob, grep; compile, verify\n"
	"and profile through bash) until it stops calling tools or a budget ends. Then the\n"
	"workspace's kernels are evaluated against TASK and the reward printed. Every message,\n"
	"tool call, output, token count and the final result go to the trajectory (JSONL).\n"
	"\n"
	"solve options:\n"
	"  --llm-url URL          OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1\n"
	"                         ($CUDA_AGENT_LLM_URL)\n"
	"  --model NAME           the model name sent with each request\n"
	"  --api-key-env VAR      environment variable holding the API key (OPENAI_API_KEY);\n"
	"                         none set: no Authorization header\n"
	"  --temperature T        sampling temperature (default: the server's)\n"
	"  --max-tokens N         completion tokens per reply (default: the server's)\n"
	"  --max-turns N          model requests (default 150)\n"
	"  --context-tokens N     stop before a request whose conversation reaches N tokens\n"
	"                         (default 128000)\n"
	"  --llm-timeout S        per request, seconds (default 600)\n"
	"  --retries N            retries on 429, 5xx and connection errors (default 5)\n"
	"  --bash-timeout S       per bash call (default 120)\n"
	"  --workspace DIR        the workspace (default solve-<task name>; an existing one is\n"
	"                         continued)\n"
	"  --trajectory FILE      the trajectory (default WORKSPACE/trajectory.jsonl)\n"
	"\n"
	"batch mode: every task under TASKS (a directory holding model.py, e.g. an imported\n"
	"store) is solved by its own `cuda-agent solve` process, at most N at once, with\n"
	"OUT/<task>/workspace, OUT/<task>/trajectory.jsonl and OUT/<task>/result.json; each\n"
	"result is also appended to OUT/results.jsonl (for `cuda-agent report`). A task with a\n"
	"result.json is skipped, so running the same command again resumes. Progress on stderr.\n"
	"  --batch TASKS          the task tree\n"
	"  --out DIR              where workspaces, trajectories and results go (default solve-out)\n"
	"  --concurrency N        tasks at once (default 1: their evaluations share the GPU)\n"
	"\n"
	"evaluation (compile/verify/profile and the final evaluation, as `cuda-agent eval`)";

struct solve_args {
	const char *url, *model, *key_env, *workspace, *trajectory, *batch, *out;
	long concurrency;
	double temperature, llm_timeout, bash_timeout;
	long max_tokens, max_turns, context_tokens, retries;
};

static int number(const char *name, const char *v, double lo, double hi, double *out)
{
	char *end = NULL;
	double x = strtod(v, &end);
	if (!*v || *end || !(x >= lo && x <= hi)) {
		fprintf(stderr, "cuda-agent: %s takes a number from %g to %g\n", name, lo, hi);
		return EXIT_USAGE;
	}
	*out = x;
	return 0;
}

static int take_solve_options(int *argc, char **argv, struct solve_args *a)
{
	static const struct {
		const char *name;
		double lo, hi;
		size_t field; /* offset of a double or long in solve_args; 0: a string below */
		bool is_long;
	} nums[] = {
		{"--temperature", 0, 10, offsetof(struct solve_args, temperature), false},
		{"--llm-timeout", 1, 86400, offsetof(struct solve_args, llm_timeout), false},
		{"--bash-timeout", 1, 86400, offsetof(struct solve_args, bash_timeout), false},
		{"--max-tokens", 1, 10000000, offsetof(struct solve_args, max_tokens), true},
		{"--max-turns", 1, 100000, offsetof(struct solve_args, max_turns), true},
		{"--context-tokens", 1000, 100000000, offsetof(struct solve_args, context_tokens), true},
		{"--retries", 0, 100, offsetof(struct solve_args, retries), true},
		{"--concurrency", 1, 256, offsetof(struct solve_args, concurrency), true},
	};
	static const struct {
		const char *name;
		size_t field;
	} strs[] = {
		{"--llm-url", offsetof(struct solve_args, url)},
		{"--model", offsetof(struct solve_args, model)},
		{"--api-key-env", offsetof(struct solve_args, key_env)},
		{"--workspace", offsetof(struct solve_args, workspace)},
		{"--trajectory", offsetof(struct solve_args, trajectory)},
		{"--batch", offsetof(struct solve_args, batch)},
		{"--out", offsetof(struct solve_args, out)},
	};
	int out = 1;
	for (int i = 1; i < *argc; i++) {
		bool missing = false, taken = false;
		const char *v;
		if (strcmp(argv[i], "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		for (size_t k = 0; !taken && k < sizeof strs / sizeof strs[0]; k++)
			if ((v = cli_option_value(*argc, argv, &i, strs[k].name, &missing))) {
				*(const char **)((char *)a + strs[k].field) = v;
				taken = true;
			}
		for (size_t k = 0; !taken && !missing && k < sizeof nums / sizeof nums[0]; k++)
			if ((v = cli_option_value(*argc, argv, &i, nums[k].name, &missing))) {
				double x;
				if (number(nums[k].name, v, nums[k].lo, nums[k].hi, &x))
					return EXIT_USAGE;
				if (nums[k].is_long)
					*(long *)((char *)a + nums[k].field) = (long)x;
				else
					*(double *)((char *)a + nums[k].field) = x;
				taken = true;
			}
		if (missing) {
			fprintf(stderr, "cuda-agent: %s needs a value\n", argv[i]);
			return EXIT_USAGE;
		}
		if (!taken)
			argv[out++] = argv[i];
	}
	*argc = out;
	argv[out] = NULL;
	return 0;
}

/* ---- batch mode ---------------------------------------------------------------------------- */

#define BATCH_MAX_ARGS 128

struct batch {
	const char *self, *out;
	const char *const *fwd; /* the options every child gets */
	size_t nfwd;
	char **keys, **dirs;
	size_t n, done, skipped, failed;
	double t0, spent;
	pthread_mutex_t lock;
	FILE *results;
};

/* One task of the batch (an item of util/pool.h): `cuda-agent solve` in its own directory,
 * skipped when it already has a result. */
static void batch_item(void *ctx, size_t i)
{
	struct batch *b = ctx;
	char ws[PATH_MAX], traj[PATH_MAX], res_path[PATH_MAX], dir[PATH_MAX];
	const char *argv[BATCH_MAX_ARGS + 16];
	struct ca_run_opts ro = {.stdout_cap = 64u << 20, .stderr_cap = 4096};
	struct ca_run_result rr = {0};
	struct ca_diag d = {{0}};
	size_t a = 0;

	if (snprintf(dir, sizeof dir, "%s/%s", b->out, b->keys[i]) >= (int)sizeof dir ||
	    snprintf(ws, sizeof ws, "%s/workspace", dir) >= (int)sizeof ws ||
	    snprintf(traj, sizeof traj, "%s/trajectory.jsonl", dir) >= (int)sizeof traj ||
	    snprintf(res_path, sizeof res_path, "%s/result.json", dir) >=
		    (int)sizeof res_path)
		return;
	if (ca_is_file(res_path)) {
		pthread_mutex_lock(&b->lock);
		b->skipped++;
		pthread_mutex_unlock(&b->lock);
		return;
	}
	double t0 = ca_now();
	argv[a++] = b->self;
	argv[a++] = "solve";
	for (size_t k = 0; k < b->nfwd; k++)
		argv[a++] = b->fwd[k];
	argv[a++] = "--json";
	argv[a++] = "-q";
	argv[a++] = "--workspace";
	argv[a++] = ws;
	argv[a++] = "--trajectory";
	argv[a++] = traj;
	argv[a++] = b->dirs[i];
	argv[a] = NULL;
	int rc = ca_mkdirs(dir, 0755, &d);
	if (!rc)
		rc = ca_run(argv, &ro, &rr, &d);
	double secs = ca_now() - t0;
	json_t *result = rc == 0 && rr.out ? json_loads(rr.out, 0, NULL) : NULL;
	pthread_mutex_lock(&b->lock);
	b->done++;
	b->spent += secs;
	if (json_is_object(result)) {
		char *line = json_dumps(result, JSON_COMPACT | JSON_REAL_PRECISION(9));
		if (line) {
			(void)ca_write_file_atomic(res_path, line, strlen(line), &d);
			fprintf(b->results, "%s\n", line);
			fflush(b->results);
		}
		free(line);
	} else {
		b->failed++;
	}
	{
		const char *code = json_string_value(
			json_object_get(json_object_get(result, "reason"), "code"));
		const json_t *reward = json_object_get(result, "reward");
		char what[160];
		if (!json_is_object(result))
			snprintf(what, sizeof what, "no result (%.120s)",
				 rr.err && rr.err[0] ? rr.err : d.msg);
		else if (json_is_integer(reward))
			snprintf(what, sizeof what, "reward %lld, %s",
				 (long long)json_integer_value(reward), code ? code : "?");
		else
			snprintf(what, sizeof what, "no reward, %s", code ? code : "?");
		for (char *p = what; *p; p++)
			if (*p == '\n')
				*p = ' ';
		size_t left = b->n - b->done - b->skipped;
		fprintf(stderr, "[%zu/%zu] %s: %s (%.0f s) | elapsed %.0f s, ETA %.0f s\n",
			b->done + b->skipped, b->n, b->keys[i], what, secs, ca_now() - b->t0,
			b->spent / (double)b->done * (double)left);
	}
	pthread_mutex_unlock(&b->lock);
	json_decref(result);
	ca_run_result_free(&rr);
}

/* The options every child gets: the original ones minus the batch's own and the per-task
 * workspace/trajectory/--json/-q, which the batch sets. */
static int batch_forward(int argc, char **argv, const char **fwd, size_t *nfwd)
{
	static const char *const drop_value[] = {"--batch", "--out", "--concurrency", "--workspace",
						 "--trajectory"};
	size_t n = 0;
	for (int i = 1; i < argc; i++) {
		bool drop = false, takes_value = false;
		for (size_t k = 0; k < sizeof drop_value / sizeof drop_value[0]; k++) {
			size_t len = strlen(drop_value[k]);
			if (strncmp(argv[i], drop_value[k], len) == 0 &&
			    (argv[i][len] == '\0' || argv[i][len] == '=')) {
				drop = true;
				takes_value = argv[i][len] == '\0';
			}
		}
		if (strcmp(argv[i], "--json") == 0 || strcmp(argv[i], "-q") == 0 ||
		    strcmp(argv[i], "--quiet") == 0)
			drop = true;
		if (drop) {
			i += takes_value;
			continue;
		}
		if (n == BATCH_MAX_ARGS)
			return EXIT_USAGE;
		fwd[n++] = argv[i];
	}
	*nfwd = n;
	return 0;
}

static int solve_batch(int argc, char **argv, const struct solve_args *a)
{
	struct batch b;
	const char *fwd[BATCH_MAX_ARGS];
	char self[PATH_MAX], results[PATH_MAX];
	struct ca_diag d = {{0}};
	size_t nthreads;
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	int rc;

	memset(&b, 0, sizeof b);
	if (len <= 0) {
		fprintf(stderr, "cuda-agent: cannot find this executable\n");
		return EXIT_INTERNAL;
	}
	self[len] = '\0';
	if (batch_forward(argc, argv, fwd, &b.nfwd)) {
		fprintf(stderr, "cuda-agent: too many options\n");
		return EXIT_USAGE;
	}
	b.self = self;
	b.out = a->out ? a->out : "solve-out";
	b.fwd = fwd;
	if ((rc = bench_list_tasks(a->batch, &b.keys, &b.dirs, &b.n, &d)) ||
	    (rc = ca_mkdirs(b.out, 0755, &d))) {
		fprintf(stderr, "cuda-agent: solve --batch: %s\n", d.msg);
		ca_free_names(b.keys, b.n);
		ca_free_names(b.dirs, b.n);
		return rc == CA_ERR_NOTFOUND || rc == CA_ERR_IO ? EXIT_USAGE : EXIT_INTERNAL;
	}
	if (b.n == 0) {
		fprintf(stderr, "cuda-agent: no task under %s (a task is a directory holding "
				"model.py)\n", a->batch);
		return EXIT_USAGE;
	}
	snprintf(results, sizeof results, "%s/results.jsonl", b.out);
	b.results = fopen(results, "a");
	if (!b.results) {
		fprintf(stderr, "cuda-agent: cannot write %s\n", results);
		ca_free_names(b.keys, b.n);
		ca_free_names(b.dirs, b.n);
		return EXIT_ENV;
	}
	pthread_mutex_init(&b.lock, NULL);
	b.t0 = ca_now();
	nthreads = (size_t)(a->concurrency > 0 ? a->concurrency : 1);
	if (nthreads > b.n)
		nthreads = b.n;
	fprintf(stderr, "solve: %zu tasks under %s, %zu at once, into %s\n", b.n, a->batch,
		nthreads, b.out);
	{
		struct ca_pool pool;
		if (ca_pool_start(&pool, b.n, (int)nthreads, batch_item, &b) == 0)
			ca_pool_work(&pool); /* no thread: this one does them all */
		ca_pool_join(&pool);
	}
	fclose(b.results);
	pthread_mutex_destroy(&b.lock);
	fprintf(stderr, "solve: %zu tasks: %zu solved now, %zu already done, %zu without a result, "
			"%.0f s; results in %s\n",
		b.n, b.done - b.failed, b.skipped, b.failed, ca_now() - b.t0, results);
	ca_free_names(b.keys, b.n);
	ca_free_names(b.dirs, b.n);
	return b.failed == b.n ? EXIT_ENV : EXIT_OK;
}

int cmd_solve(int argc, char **argv)
{
	struct solve_args a = {.temperature = -1, .retries = -1};
	struct agent_opts o;
	struct agent_result res;
	struct eval_session session;
	struct cli c;
	struct ca_diag d = {{0}};
	char workspace[4096];
	int rc;

	memset(&c, 0, sizeof c);
	eval_opts_defaults(&c.opts);
	char *orig[BATCH_MAX_ARGS + 2];
	int orig_n = argc < BATCH_MAX_ARGS ? argc : BATCH_MAX_ARGS;
	memcpy(orig, argv, (size_t)orig_n * sizeof *orig);
	orig[orig_n] = NULL;
	if ((rc = take_solve_options(&argc, argv, &a)))
		return rc;
	if ((rc = cli_parse_options(&c, argc, argv, solve_usage)))
		return rc;
	if (!a.url)
		a.url = getenv("CUDA_AGENT_LLM_URL");
	if (a.batch) {
		if (argc - optind != 0 || !a.url || !a.url[0] || !a.model || !a.model[0] || c.task ||
		    a.workspace || a.trajectory) {
			fprintf(stderr, "usage: cuda-agent solve [options] --batch TASKS --out DIR "
					"--llm-url URL --model NAME\n(no TASK, --task, --workspace or "
					"--trajectory with --batch; --help for more)\n");
			return EXIT_USAGE;
		}
		return solve_batch(orig_n, orig, &a);
	}
	if (a.out || a.concurrency) {
		fprintf(stderr, "cuda-agent: --out and --concurrency go with --batch\n");
		return EXIT_USAGE;
	}
	if (argc - optind != 1 || !a.url || !a.url[0] || !a.model || !a.model[0] || c.task) {
		fprintf(stderr, "usage: cuda-agent solve [options] TASK --llm-url URL --model NAME\n"
				"(one task directory, the endpoint and the model; --help for more)\n");
		return EXIT_USAGE;
	}
	agent_opts_defaults(&o);
	o.task_dir = argv[optind];
	o.eval = c.opts;
	o.llm.url = a.url;
	o.llm.model = a.model;
	o.llm.api_key = getenv(a.key_env ? a.key_env : "OPENAI_API_KEY");
	if (a.temperature >= 0)
		o.llm.temperature = a.temperature;
	if (a.max_tokens > 0)
		o.llm.max_tokens = (int)a.max_tokens;
	if (a.llm_timeout > 0)
		o.llm.timeout_s = a.llm_timeout;
	if (a.retries >= 0)
		o.llm.max_retries = (int)a.retries;
	if (a.max_turns > 0)
		o.max_turns = (int)a.max_turns;
	if (a.context_tokens > 0)
		o.context_tokens = a.context_tokens;
	if (a.bash_timeout > 0)
		o.bash_timeout_s = a.bash_timeout;
	if (!a.workspace) {
		const char *base = strrchr(o.task_dir, '/');
		base = base && base[1] ? base + 1 : o.task_dir;
		snprintf(workspace, sizeof workspace, "solve-%s", base);
		a.workspace = workspace;
	}
	char abs_ws[4096];
	if (!realpath(a.workspace, abs_ws)) /* made by the loop: resolve its parent instead */
		snprintf(abs_ws, sizeof abs_ws, "%s", a.workspace);
	o.workspace = abs_ws[0] == '/' ? abs_ws : a.workspace;
	o.trajectory_path = a.trajectory;
	o.quiet = ca_log_get_level() == CA_LOG_QUIET;

	eval_session_init(&session, c.python, c.device);
	rc = agent_run(&session, &o, &res, &d);
	eval_session_close(&session);
	if (rc) {
		fprintf(stderr, "cuda-agent: solve: %s\n", d.msg);
		return rc == CA_ERR_INVALID ? EXIT_USAGE : EXIT_ENV;
	}
	if (c.json) {
		char *text = json_dumps(res.final, JSON_COMPACT | JSON_REAL_PRECISION(9));
		if (text)
			puts(text);
		free(text);
	} else {
		fputs(json_string_value(json_object_get(res.final, "summary")), stdout);
	}
	fprintf(stderr,
		"solve: %s after %d turn%s, %d tool call%s (%d schema violation%s, %d repeated), "
		"%ld completion tokens, %.1f s (model %.1f s, tools %.1f s, loop %.2f ms/turn)%s%s\n",
		res.stop_reason, res.turns, res.turns == 1 ? "" : "s", res.tool_calls,
		res.tool_calls == 1 ? "" : "s", res.schema_violations,
		res.schema_violations == 1 ? "" : "s", res.repeated_calls, res.completion_tokens,
		res.seconds, res.llm_seconds, res.tool_seconds, res.overhead_ms_per_turn,
		res.llm_error[0] ? "; the model's endpoint failed: " : "", res.llm_error);
	rc = eval_exit_code(res.final);
	agent_result_free(&res);
	return rc;
}
