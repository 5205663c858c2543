/* cuda-agent synth: data synthesis (docs/synth.md). The steps are Python
 * (python/cuda_agent_bridge/synth); this command runs them in the bridge's Python with
 * cuda-agent's package on PYTHONPATH, its output going straight to the terminal. Three parts
 * are C: `filter` runs in the sandbox (synth/filter_sandbox.h: it runs every task's code),
 * `compose --llm-url` sends the prompts (synth/llm_compose.h), `export --store` imports into
 * the task store.
 *
 * Exit codes: those of the step (0 done, 2 usage or a missing input, 3 a step failed); 4 the
 * Python cannot be run, the sandbox cannot be set up or the LLM cannot be reached; 130 stopped. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "synth/filter_sandbox.h"
#include "synth/llm_compose.h"
#include "util/diag.h"
#include "util/fs.h"
#include "util/pylaunch.h"

static const char synth_help[] =
	"usage: cuda-agent synth STEP --dir DIR [options]\n"
	"\n"
	"Makes training tasks from PyTorch's operators (docs/synth.md). Each step reads and writes\n"
	"files in DIR and goes on from where an interrupted run stopped.\n"
	"\n"
	"  crawl     DIR/catalog.json: the operators of torch.nn, torch.nn.functional, torch,\n"
	"            torch.special, torch.linalg (and transformers, when installed), found by\n"
	"            introspection and probed on the CPU\n"
	"  compose   DIR/tasks.jsonl: -n N tasks of 1-5 operators in the KernelBench convention,\n"
	"            the paper's mix, sized for 1-100 ms of eager runtime (--seed S; --measured\n"
	"            RUN, repeatable: sized with the slowdowns over the roofline that an earlier\n"
	"            filter run on a GPU measured per operator, RUN being its --dir); with\n"
	"            --llm-url URL --model NAME, N tasks written by an LLM from the same draws of\n"
	"            operators (--api-key-env VAR (OPENAI_API_KEY), --llm-concurrency K (4),\n"
	"            --temperature T, --max-tokens N); its code is only parsed here\n"
	"  filter    DIR/verdicts.jsonl: runs, deterministic, not stochastic, not degenerate,\n"
	"            torch.compile (--no-compile skips it), runtime, decontaminated against\n"
	"            --kernelbench PATH (AST similarity <= 0.9), no near-copies (--jobs J); in\n"
	"            the sandbox (no network, no file of yours), unless CUDA_AGENT_SANDBOX=0\n"
	"  export    DIR/ops.jsonl and ops.parquet (Ops-6K columns: cuda-agent tasks import ops6k\n"
	"            reads them), DIR/funnel.json and the funnel table; with --store S also\n"
	"            into the task store S as source --source NAME (default synth): the same as\n"
	"            `cuda-agent tasks import ops6k DIR/ops.jsonl --store S --source NAME`;\n"
	"            --baselines then measures their eager and torch.compile baselines on this\n"
	"            GPU into the baseline cache (`cuda-agent baselines measure --store S\n"
	"            --source NAME`)\n"
	"\n"
	"  --python PATH   the Python with torch ($CUDA_AGENT_PYTHON, else python3)\n";

/* Runs `python -m cuda_agent_bridge.synth ARGS` in a child and waits: its exit status. */
static int run_step(const char *python, const char *const *args)
{
	int status;
	pid_t pid;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "cuda-agent synth: fork: %s\n", strerror(errno));
		return EXIT_ENV;
	}
	if (pid == 0) {
		execvp(python, (char *const *)args);
		fprintf(stderr, "cuda-agent synth: cannot run %s: %s\n", python, strerror(errno));
		_exit(EXIT_ENV);
	}
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return EXIT_INTERNAL;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

struct synth_args {
	const char *python, *dir, *store, *source, *kernelbench;
	const char *llm_url, *model, *key_env;
	double temperature;
	long max_tokens, concurrency, n;
	const char *n_text, *seed_text;
	bool sandbox_off;
	bool baselines; /* export --store: measure the exported tasks' baselines */
	const char *rest[32]; /* the step's other arguments, passed on */
	int n_rest;
};

static int number(const char *opt, const char *v, double lo, double hi, double *out)
{
	char *end;
	double x = strtod(v, &end);
	if (end == v || *end || !(x >= lo && x <= hi)) {
		fprintf(stderr, "cuda-agent synth: %s takes a number %g-%g\n", opt, lo, hi);
		return -1;
	}
	*out = x;
	return 0;
}

/* The options this command reads itself; the others go to the step as they are. */
static int parse_args(int argc, char **argv, struct synth_args *a)
{
	double x;
	for (int i = 2; i < argc; i++) {
		const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		const char **slot = NULL;
		if (strcmp(o, "--python") == 0)
			slot = &a->python;
		else if (strcmp(o, "--dir") == 0)
			slot = &a->dir;
		else if (strcmp(o, "--store") == 0)
			slot = &a->store;
		else if (strcmp(o, "--source") == 0)
			slot = &a->source;
		else if (strcmp(o, "--kernelbench") == 0)
			slot = &a->kernelbench;
		else if (strcmp(o, "--llm-url") == 0)
			slot = &a->llm_url;
		else if (strcmp(o, "--model") == 0)
			slot = &a->model;
		else if (strcmp(o, "--api-key-env") == 0)
			slot = &a->key_env;
		else if (strcmp(o, "-n") == 0)
			slot = &a->n_text;
		else if (strcmp(o, "--seed") == 0)
			slot = &a->seed_text;
		else if (strcmp(o, "--baselines") == 0) {
			a->baselines = true;
			continue;
		}
		if (slot || strcmp(o, "--temperature") == 0 || strcmp(o, "--max-tokens") == 0 ||
		    strcmp(o, "--llm-concurrency") == 0) {
			if (!v) {
				fprintf(stderr, "cuda-agent synth: %s needs a value\n", o);
				return -1;
			}
			i++;
		}
		if (slot) {
			*slot = v;
			if (slot == &a->n_text || slot == &a->seed_text) {
				if (a->n_rest + 2 > 30)
					return -1;
				a->rest[a->n_rest++] = o;
				a->rest[a->n_rest++] = v;
			}
		} else if (strcmp(o, "--temperature") == 0) {
			if (number(o, v, 0, 10, &a->temperature))
				return -1;
		} else if (strcmp(o, "--max-tokens") == 0) {
			if (number(o, v, 1, 1e7, &x))
				return -1;
			a->max_tokens = (long)x;
		} else if (strcmp(o, "--llm-concurrency") == 0) {
			if (number(o, v, 1, SYNTH_LLM_MAX_CONCURRENCY, &x))
				return -1;
			a->concurrency = (long)x;
		} else {
			if (a->n_rest >= 30) {
				fprintf(stderr, "cuda-agent synth: too many arguments\n");
				return -1;
			}
			a->rest[a->n_rest++] = o;
		}
	}
	return 0;
}

/* compose --llm-url: the prompts (Python), the replies (here), their code parsed into tasks
 * (Python). */
static int compose_with_llm(const struct synth_args *a, const char **args, int base)
{
	struct llm_opts o;
	struct synth_llm_stats st;
	struct ca_diag d = {{0}};
	int rc, n = base;

	args[n++] = "llm-prompts";
	args[n++] = "--dir";
	args[n++] = a->dir;
	for (int i = 0; i < a->n_rest; i++)
		args[n++] = a->rest[i];
	args[n] = NULL;
	if ((rc = run_step(a->python, args)) != 0)
		return rc;
	llm_opts_defaults(&o);
	o.url = a->llm_url;
	o.model = a->model;
	o.api_key = getenv(a->key_env ? a->key_env : "OPENAI_API_KEY");
	if (a->temperature >= 0)
		o.temperature = a->temperature;
	if (a->max_tokens > 0)
		o.max_tokens = (int)a->max_tokens;
	rc = synth_llm_replies(a->dir, &o, a->concurrency > 0 ? (int)a->concurrency : 4, &st, &d);
	if (rc == CA_ERR_INTERRUPTED)
		fprintf(stderr, "cuda-agent synth compose: %s (run it again to go on)\n", d.msg);
	else if (rc)
		fprintf(stderr, "cuda-agent synth compose: %s\n", d.msg);
	if (rc == 0 && st.sent > 0 && st.failed == st.sent) {
		fprintf(stderr, "cuda-agent synth compose: every request to %s failed (see "
			"%s/llm_replies.jsonl)\n", a->llm_url, a->dir);
		return EXIT_ENV;
	}
	if (rc)
		return rc == CA_ERR_INTERRUPTED ? 130 : rc == CA_ERR_PARSE ? EXIT_TASK : EXIT_ENV;
	n = base;
	args[n++] = "llm-ingest";
	args[n++] = "--dir";
	args[n++] = a->dir;
	args[n] = NULL;
	return run_step(a->python, args);
}

/* filter: the KernelBench corpus made outside (the tree is parsed, never run), the step in the
 * sandbox. */
static int filter_sandboxed(const struct synth_args *a, const char **args, int base)
{
	char corpus[4096];
	struct synth_filter_run run = {.python = a->python, .dir = a->dir, .args = a->rest};
	struct ca_diag d = {{0}};
	int rc, code = 0, n = base;

	if (a->kernelbench) {
		args[n++] = "kb-corpus";
		args[n++] = "--dir";
		args[n++] = a->dir;
		args[n++] = "--kernelbench";
		args[n++] = a->kernelbench;
		args[n] = NULL;
		if ((rc = run_step(a->python, args)) != 0)
			return rc;
		if (ca_path_join(corpus, sizeof corpus, a->dir, "kernelbench_corpus.json"))
			return EXIT_USAGE;
		run.corpus = corpus;
	}
	rc = synth_filter_sandboxed(&run, &code, &d);
	if (rc == CA_ERR_INTERRUPTED) {
		fprintf(stderr, "\ncuda-agent synth filter: %s\n", d.msg);
		return 130;
	}
	if (rc) {
		fprintf(stderr, "cuda-agent synth filter: %s (CUDA_AGENT_SANDBOX=0 runs it without "
			"the sandbox)\n", d.msg);
		return EXIT_ENV;
	}
	return code;
}

int cmd_synth(int argc, char **argv)
{
	struct synth_args a = {.temperature = -1, .source = NULL};
	char pp[PYLAUNCH_ENV_MAX];
	struct ca_diag d = {{0}};
	const char *step, *args[48];
	const char *sb = getenv("CUDA_AGENT_SANDBOX");
	int n = 0, rc;

	if (argc < 2 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		fputs(synth_help, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : EXIT_OK;
	}
	step = argv[1];
	a.python = getenv("CUDA_AGENT_PYTHON");
	if (parse_args(argc, argv, &a))
		return EXIT_USAGE;
	if ((a.store || a.source || a.baselines) && strcmp(step, "export") != 0) {
		fprintf(stderr, "cuda-agent synth: --store, --source and --baselines are export's "
			"options\n");
		return EXIT_USAGE;
	}
	if (a.baselines && !a.store) {
		fprintf(stderr, "cuda-agent synth export: --baselines measures the tasks exported "
			"into a store: give --store\n");
		return EXIT_USAGE;
	}
	if ((a.llm_url || a.model) && strcmp(step, "compose") != 0) {
		fprintf(stderr, "cuda-agent synth: --llm-url and --model are compose's options\n");
		return EXIT_USAGE;
	}
	if (!a.llm_url != !a.model) {
		fprintf(stderr, "cuda-agent synth compose: --llm-url and --model go together\n");
		return EXIT_USAGE;
	}
	if (!a.python || !a.python[0])
		a.python = "python3";
	if (ca_pythonpath_env(pp, sizeof pp, NULL, PYTHONPATH_INHERIT, "synth", &d)) {
		fprintf(stderr, "cuda-agent synth: %s\n", d.msg);
		return EXIT_ENV;
	}
	putenv(pp);
	args[n++] = a.python;
	args[n++] = "-m";
	args[n++] = "cuda_agent_bridge.synth";
	a.rest[a.n_rest] = NULL;
	if (a.dir && a.llm_url)
		return compose_with_llm(&a, args, n);
	if (a.dir && strcmp(step, "filter") == 0 && !(sb && strcmp(sb, "0") == 0))
		return filter_sandboxed(&a, args, n);
	if (strcmp(step, "filter") == 0)
		fprintf(stderr, "cuda-agent synth filter: CUDA_AGENT_SANDBOX=0: the tasks' code runs "
			"without the sandbox\n");
	/* the other steps: the Python step as it was asked for */
	args[n++] = step;
	if (a.dir) {
		args[n++] = "--dir";
		args[n++] = a.dir;
	}
	if (a.kernelbench) {
		args[n++] = "--kernelbench";
		args[n++] = a.kernelbench;
	}
	for (int i = 0; i < a.n_rest; i++)
		args[n++] = a.rest[i];
	args[n] = NULL;
	if (a.store && a.dir) {
		char file[4096];
		if ((rc = run_step(a.python, args)) != 0)
			return rc;
		if (ca_path_join(file, sizeof file, a.dir, "ops.jsonl") != 0) {
			fprintf(stderr, "cuda-agent synth: --dir is too long\n");
			return EXIT_USAGE;
		}
		char *src = (char *)(a.source ? a.source : "synth");
		char *targv[] = {"tasks", "import", "ops6k", file, "--store", (char *)a.store,
				 "--source", src, NULL};
		char *bargv[] = {"baselines", "measure", "--store", (char *)a.store, "--source", src,
				 NULL};
		if ((rc = cmd_tasks(8, targv)) != 0 || !a.baselines)
			return rc;
		return cmd_baselines(6, bargv);
	}
	(void)ca_exec_python_module(a.python, "cuda_agent_bridge.synth", args + 3, "synth", &d);
	fprintf(stderr, "cuda-agent synth: %s\n", d.msg);
	return EXIT_ENV;
}
