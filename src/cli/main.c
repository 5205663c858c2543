/* cuda-agent: command-line entry point. Subcommands: compile, verify, profile, eval, version.
 * Exit codes (docs/cli.md): 0 ok, 1 the candidate failed (build, correctness, fault, hack),
 * 2 usage error, 3 the task is broken, 4 environment problem (no GPU, bridge, worker missing),
 * 5 internal error. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "eval/eval.h"
#include "util/log.h"
#include "util/str.h"

#define CA_VERSION "0.1.0"


static const char main_usage[] =
	"usage: cuda-agent <command> [options]\n"
	"\n"
	"Evaluates CUDA kernels against PyTorch tasks: builds them with nvcc, verifies them on\n"
	"fresh secret inputs, times them against eager PyTorch and torch.compile, and gives the\n"
	"CUDA-Agent reward.\n"
	"\n"
	"commands (inside a workspace holding model.py and kernels/, DIR defaults to .):\n"
	"  compile [DIR]                 build kernels/ and check the library (no GPU needed)\n"
	"  verify  [DIR]                 compile, then check correctness on the GPU\n"
	"  profile [DIR]                 verify, time, and show a per-kernel GPU time table\n"
	"  eval TASK CANDIDATE...        full evaluation of candidates: dirs with kernels/, CUDA-Agent\n"
	"                                workdirs, KernelBench ModelNew .py files\n"
	"  tasks import|list|show|check|export\n"
	"                                the task store: import KernelBench and Ops-6K tasks,\n"
	"                                export prompts for RL trainers\n"
	"  bench TASKS CANDIDATES        evaluate one candidate per task, resumable, with a report\n"
	"  solve TASK --llm-url URL --model NAME\n"
	"                                an LLM agent writes, verifies and tunes the kernels\n"
	"  workspace new TASK DIR        lay out an agent's workspace: SKILL.md, INTERFACE.md,\n"
	"                                model.py, a kernels/ template\n"
	"  report RESULTS.jsonl...       the benchmark report (table, --html FILE)\n"
	"  baselines export|import|measure\n"
	"                                the baseline table as JSON lines, shared by a fleet;\n"
	"                                measure times tasks' baselines with no candidate\n"
	"  serve [--listen ADDR:PORT]    the evaluation service over HTTP (docs/service.md)\n"
	"  worker --redis URL            a GPU node serving the jobs of `serve --redis URL`\n"
	"  synth crawl|compose|filter|export --dir DIR\n"
	"                                training tasks made from PyTorch's operators\n"
	"  rft TRAJECTORIES --out F      rejection fine-tuning data (verl's multi-turn SFT format)\n"
	"                                from solve's trajectories\n"
	"  sandbox-exec [--ro P] [--rw D] -- PROGRAM [ARGS...]\n"
	"                                run one program in the build sandbox\n"
	"  version                       print versions\n"
	"\n"
	"Run 'cuda-agent <command> --help' for a command's options.\n"
	"Exit codes: 0 ok, 1 candidate failed, 2 usage, 3 task broken, 4 environment, 5 internal.\n";

static const char options_help[] =
	"options:\n"
	"  --task DIR             the task directory (default: the workspace itself)\n"
	"  --json                 print the result JSON (one line per candidate) instead of text\n"
	"  --trials N             verification trials, each on fresh secret inputs (default 5)\n"
	"  --budget SECONDS       time budget of the timed loop (default 2)\n"
	"  --target-rse X         stop timing when the median's relative standard error < X (0.005)\n"
	"  --settle-calls N       after each call checked at once (not kept), up to N calls neither\n"
	"                         sampled nor checked\n"
	"                         (0-16, default 3; docs/protocol.md, \"After a checked call\")\n"
	"  --settle-ms MS         after each call checked at once, settle until MS have passed\n"
	"                         (at least one call, at most --settle-calls; default 10; 0:\n"
	"                         protocol 6's rule, below)\n"
	"  --settle-below-ms MS   with --settle-ms 0: settle only after checked calls whose window\n"
	"                         was shorter (default 5)\n"
	"  --hold-us US           hold the GPU this long before each call of a native candidate\n"
	"                         (default 100; docs/protocol.md, \"The timed loop\", step 2)\n"
	"  --defer-checks-mb MB   copy checked calls' inputs and outputs (up to MB MiB) and judge\n"
	"                         them after the timed loop (default 4096; 0: judged at once)\n"
	"  --slow-budget SECONDS  a correct kernel whose calls are slow takes as many timed calls as\n"
	"                         fit this (at least 3; default 30; 0: never fewer); the result's\n"
	"                         \"slow\" says so\n"
	"  --arch sm_XX           GPU architecture (default: detected, else sm_90)\n"
	"  --no-cache             rebuild every translation unit\n"
	"  --refresh-baselines    re-measure eager and torch.compile even if cached\n"
	"  --keep                 keep the run directory (plan, the candidate's stderr)\n"
	"  --timeout SECONDS      watchdog: how long one command (a call) of the candidate's process\n"
	"                         may run (default 60 + 2 x budget); a whole run, 10 times that\n"
	"  --verify-only          eval: build and verify each candidate, no timing and no reward\n"
	"  --rules R              acceptance rules: cuda-agent (default: the published rules, no\n"
	"                         torch compute in forward, both models in eval mode) or\n"
	"                         kernelbench (KernelBench's: torch compute allowed, both models\n"
	"                         in training mode, parameters paired by order and shape or else\n"
	"                         both models built under one seed, no try/except fallback, a\n"
	"                         __global__ kernel required) (docs/torch-rules.md)\n"
	"  --interleave WHEN      re-time the candidate and a baseline in alternating rounds before\n"
	"                         deciding the reward: auto (default: when the speed-up's interval\n"
	"                         holds the 5% threshold), always, never\n"
	"  --format F             the candidate's format: auto (default), native (kernels/),\n"
	"                         workdir (CUDA-Agent: binding.cpp, model_new.py, kernels/) or\n"
	"                         kernelbench (a .py file defining ModelNew, load_inline)\n"
	"  --python PATH          Python with torch for the bridge ($CUDA_AGENT_PYTHON, python3)\n"
	"  --device auto|cuda|cpu where the bridge runs PyTorch (default auto)\n"
	"  --no-sandbox           run the candidate's worker without the sandbox (namespaces,\n"
	"                         seccomp, rlimits; docs/security.md), which is on by default;\n"
	"                         also CUDA_AGENT_SANDBOX=0 (--sandbox turns it back on)\n"
	"  -q, --quiet            no progress messages\n"
	"  -v, --verbose          debug messages (and the bridge's own log on stderr)\n"
	"  -h, --help             this help\n";

static int parse_double(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end)
		return -1;
	*out = v;
	return 0;
}

/* If argv[*i] is `name VALUE` or `name=VALUE`, the value (advancing *i past it), else NULL;
 * *missing is set (never cleared) when the name matches but no value follows. */
const char *cli_option_value(int argc, char **argv, int *i, const char *name, bool *missing)
{
	size_t len = strlen(name);
	const char *a = argv[*i];
	if (strncmp(a, name, len) != 0)
		return NULL;
	if (a[len] == '=')
		return a[len + 1] ? a + len + 1 : (*missing = true, NULL);
	if (a[len] != '\0')
		return NULL;
	if (*i + 1 >= argc || !argv[*i + 1][0]) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

int cli_dispatch(const char *command, int argc, char **argv, const char *usage,
		 const char *help, const struct cli_subcommand *subs, size_t n)
{
	const char *sub = argc > 1 ? argv[1] : NULL;
	char shown[64];
	if (!sub) {
		fprintf(stderr, "%s%s", usage, help);
		return EXIT_USAGE;
	}
	if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
		printf("%s%s", usage, help);
		return EXIT_OK;
	}
	for (size_t i = 0; i < n; i++)
		if (strcmp(sub, subs[i].name) == 0)
			return subs[i].run(argc - 1, argv + 1);
	fprintf(stderr, "cuda-agent: %s: unknown subcommand '%s'\n%s", command,
		ca_printable(shown, sub, sizeof shown), usage);
	return EXIT_USAGE;
}

enum cli_opt {
	O_TASK = 256, O_JSON, O_TRIALS, O_BUDGET, O_RSE, O_ARCH, O_NOCACHE, O_REFRESH, O_KEEP,
	O_TIMEOUT, O_PYTHON, O_DEVICE, O_SANDBOX, O_NO_SANDBOX, O_FORMAT, O_RULES, O_INTERLEAVE,
	O_VERIFY_ONLY, O_SETTLE, O_SETTLE_BELOW, O_SETTLE_MS, O_HOLD, O_DEFER, O_SLOW
};

/* The options every command that evaluates shares (options.h). */
static const struct option cli_longopts[] = {
	{"task", required_argument, NULL, O_TASK},
	{"json", no_argument, NULL, O_JSON},
	{"trials", required_argument, NULL, O_TRIALS},
	{"budget", required_argument, NULL, O_BUDGET},
	{"target-rse", required_argument, NULL, O_RSE},
	{"settle-calls", required_argument, NULL, O_SETTLE},
	{"settle-below-ms", required_argument, NULL, O_SETTLE_BELOW},
	{"settle-ms", required_argument, NULL, O_SETTLE_MS},
	{"hold-us", required_argument, NULL, O_HOLD},
	{"defer-checks-mb", required_argument, NULL, O_DEFER},
	{"slow-budget", required_argument, NULL, O_SLOW},
	{"arch", required_argument, NULL, O_ARCH},
	{"no-cache", no_argument, NULL, O_NOCACHE},
	{"refresh-baselines", no_argument, NULL, O_REFRESH},
	{"keep", no_argument, NULL, O_KEEP},
	{"timeout", required_argument, NULL, O_TIMEOUT},
	{"python", required_argument, NULL, O_PYTHON},
	{"device", required_argument, NULL, O_DEVICE},
	{"sandbox", no_argument, NULL, O_SANDBOX},
	{"no-sandbox", no_argument, NULL, O_NO_SANDBOX},
	{"format", required_argument, NULL, O_FORMAT},
	{"rules", required_argument, NULL, O_RULES},
	{"interleave", required_argument, NULL, O_INTERLEAVE},
	{"verify-only", no_argument, NULL, O_VERIFY_ONLY},
	{"quiet", no_argument, NULL, 'q'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

/* A number option in [lo, hi] ((lo, hi] with lo_open) into *out: 0, or EXIT_USAGE after saying
 * what --name takes. */
static int number_option(const char *arg, const char *name, double lo, bool lo_open, double hi,
			 double *out)
{
	double v;
	if (parse_double(arg, &v) || !(lo_open ? v > lo : v >= lo) || v > hi) {
		fprintf(stderr, "cuda-agent: --%s takes a number in %c%g, %g]\n", name,
			lo_open ? '(' : '[', lo, hi);
		return EXIT_USAGE;
	}
	*out = v;
	return 0;
}

/* An option that takes a value: 0 taken, EXIT_USAGE (with a message) refused, -1 not one of
 * these. */
static int value_option(struct cli *c, int ch, const char *arg)
{
	double v;
	switch (ch) {
	case O_TRIALS:
		if (parse_double(arg, &v) || v < 1 || v > 100 || v != (int)v) {
			fprintf(stderr, "cuda-agent: --trials takes a whole number 1-100\n");
			return EXIT_USAGE;
		}
		c->opts.protocol.trials = (int)v;
		break;
	case O_BUDGET:
		if (parse_double(arg, &v) || v <= 0 || v > 600) {
			fprintf(stderr, "cuda-agent: --budget takes seconds in (0, 600]\n");
			return EXIT_USAGE;
		}
		c->opts.protocol.timing.budget_s = v;
		break;
	case O_RSE:
		if (parse_double(arg, &v) || v <= 0 || v >= 1) {
			fprintf(stderr, "cuda-agent: --target-rse takes a number in (0, 1)\n");
			return EXIT_USAGE;
		}
		c->opts.protocol.timing.target_rse = v;
		break;
	case O_SETTLE:
		if (parse_double(arg, &v) || v < 0 || v > TIMING_MAX_SETTLE_CALLS || v != (int)v) {
			fprintf(stderr, "cuda-agent: --settle-calls takes a whole number 0-%d\n",
				TIMING_MAX_SETTLE_CALLS);
			return EXIT_USAGE;
		}
		c->opts.protocol.timing.settle_calls = (int)v;
		break;
	case O_SETTLE_BELOW:
		return number_option(arg, "settle-below-ms", 0.0, true, TIMING_MAX_SETTLE_BELOW_MS,
				     &c->opts.protocol.timing.settle_below_ms);
	case O_SETTLE_MS:
		return number_option(arg, "settle-ms", 0.0, false, TIMING_MAX_SETTLE_MS,
				     &c->opts.protocol.timing.settle_ms);
	case O_HOLD:
		return number_option(arg, "hold-us", 0.0, false, TIMING_MAX_HOLD_US,
				     &c->opts.protocol.timing.hold_us);
	case O_DEFER:
		return number_option(arg, "defer-checks-mb", 0.0, false, TIMING_MAX_DEFER_CHECKS_MB,
				     &c->opts.protocol.timing.defer_checks_mb);
	case O_SLOW:
		return number_option(arg, "slow-budget", 0.0, false, TIMING_MAX_SLOW_BUDGET_S,
				     &c->opts.protocol.timing.slow_budget_s);
	case O_ARCH:
		if (strncmp(arg, "sm_", 3) != 0 || strlen(arg) > 8) {
			fprintf(stderr, "cuda-agent: --arch takes a name like sm_90\n");
			return EXIT_USAGE;
		}
		c->opts.arch = arg;
		break;
	case O_TIMEOUT:
		if (parse_double(arg, &v) || v <= 0 || v > 86400) {
			fprintf(stderr, "cuda-agent: --timeout takes seconds\n");
			return EXIT_USAGE;
		}
		c->opts.worker_timeout_s = v;
		break;
	case O_FORMAT: {
		struct ca_diag fd = {{0}};
		if (candidate_format_parse(arg, &c->opts.format, &fd)) {
			fprintf(stderr, "cuda-agent: %s\n", fd.msg);
			return EXIT_USAGE;
		}
		break;
	}
	case O_RULES: {
		struct ca_diag fd = {{0}};
		if (torch_profile_parse(arg, &c->opts.rules, &fd)) {
			fprintf(stderr, "cuda-agent: --rules: %s\n", fd.msg);
			return EXIT_USAGE;
		}
		c->opts.rules_by_format = false;
		break;
	}
	case O_INTERLEAVE:
		if (strcmp(arg, "auto") == 0)
			c->opts.interleave = EVAL_INTERLEAVE_AUTO;
		else if (strcmp(arg, "always") == 0)
			c->opts.interleave = EVAL_INTERLEAVE_ALWAYS;
		else if (strcmp(arg, "never") == 0)
			c->opts.interleave = EVAL_INTERLEAVE_NEVER;
		else {
			fprintf(stderr, "cuda-agent: --interleave takes auto, always or never\n");
			return EXIT_USAGE;
		}
		break;
	case O_DEVICE:
		if (strcmp(arg, "auto") && strcmp(arg, "cuda") && strcmp(arg, "cpu")) {
			fprintf(stderr, "cuda-agent: --device takes auto, cuda or cpu\n");
			return EXIT_USAGE;
		}
		c->device = arg;
		break;
	default:
		return -1;
	}
	return 0;
}

int cli_parse_options(struct cli *c, int argc, char **argv, const char *usage_line)
{
	int ch, rc;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "qvh", cli_longopts, NULL)) != -1) {
		switch (ch) {
		case O_TASK: c->task = optarg; break;
		case O_JSON: c->json = 1; break;
		case O_NOCACHE: c->opts.no_build_cache = true; break;
		case O_REFRESH: c->opts.refresh_baselines = true; break;
		case O_KEEP: c->opts.keep_run_dir = true; break;
		case O_VERIFY_ONLY:
			if (!c->eval_options) {
				fprintf(stderr, "%s\n(--verify-only is an option of eval)\n",
					usage_line);
				return EXIT_USAGE;
			}
			c->opts.mode = EVAL_VERIFY;
			break;
		case O_PYTHON: c->python = optarg; break;
		case O_SANDBOX: c->opts.sandbox = true; break;
		case O_NO_SANDBOX: c->opts.sandbox = false; break;
		case 'q': ca_log_set_level(CA_LOG_QUIET); break;
		case 'v': ca_log_set_level(CA_LOG_DEBUG); break;
		case 'h':
			printf("%s\n%s", usage_line, options_help);
			exit(0);
		default:
			if ((rc = value_option(c, ch, optarg)) >= 0) {
				if (rc)
					return rc;
				break;
			}
			fprintf(stderr, "%s\nTry '--help'.\n", usage_line);
			return EXIT_USAGE;
		}
	}
	return 0;
}

static int print_result(const struct cli *c, json_t *result)
{
	if (c->json) {
		char *text = json_dumps(result, JSON_COMPACT | JSON_REAL_PRECISION(9));
		if (!text)
			return EXIT_INTERNAL;
		puts(text);
		free(text);
	} else {
		fputs(json_string_value(json_object_get(result, "summary")), stdout);
	}
	fflush(stdout);
	return eval_exit_code(result);
}

static int run_eval(struct cli *c, const char *task, char **candidates, int count)
{
	struct eval_session session;
	struct ca_diag d = {{0}};
	int worst = 0;

	eval_session_init(&session, c->python, c->device);
	for (int i = 0; i < count; i++) {
		json_t *result = NULL;
		c->opts.task_dir = task;
		c->opts.candidate_dir = candidates[i];
		if (eval_run(&session, &c->opts, &result, &d) != 0) {
			fprintf(stderr, "cuda-agent: %s\n", d.msg);
			eval_session_close(&session);
			return EXIT_USAGE;
		}
		int code = print_result(c, result);
		json_decref(result);
		if (code > worst)
			worst = code;
	}
	eval_session_close(&session);
	return worst;
}

static int cmd_workspace(int argc, char **argv, enum eval_mode mode, const char *name)
{
	struct cli c = {0};
	char usage[160];
	int rc;

	snprintf(usage, sizeof usage, "usage: cuda-agent %s [options] [DIR]", name);
	eval_opts_defaults(&c.opts);
	c.opts.mode = mode;
	rc = cli_parse_options(&c, argc, argv, usage);
	if (rc)
		return rc;
	if (argc - optind > 1) {
		fprintf(stderr, "%s\n(one workspace directory at most)\n", usage);
		return EXIT_USAGE;
	}
	char *dir = optind < argc ? argv[optind] : ".";
	return run_eval(&c, c.task ? c.task : dir, &dir, 1);
}

static int cmd_eval(int argc, char **argv)
{
	struct cli c = {0};
	const char *usage = "usage: cuda-agent eval [options] TASK_DIR CANDIDATE...";
	int rc;

	eval_opts_defaults(&c.opts);
	c.opts.mode = EVAL_FULL;
	c.eval_options = 1;
	rc = cli_parse_options(&c, argc, argv, usage);
	if (rc)
		return rc;
	/* With --task every positional argument is a candidate. */
	int first = c.task ? optind : optind + 1;
	if (argc - first < 1) {
		fprintf(stderr, "%s\n(a task directory and at least one candidate directory)\n",
			usage);
		return EXIT_USAGE;
	}
	return run_eval(&c, c.task ? c.task : argv[optind], argv + first, argc - first);
}

int main(int argc, char **argv)
{
	signal(SIGPIPE, SIG_IGN);
	if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
	    strcmp(argv[1], "-h") == 0) {
		fputs(main_usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? EXIT_USAGE : 0;
	}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("cuda-agent %s (result schema %s, protocol %d)\n", CA_VERSION, CA_RESULT_SCHEMA,
		       CA_PROTOCOL_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "compile") == 0)
		return cmd_workspace(argc - 1, argv + 1, EVAL_COMPILE, "compile");
	if (strcmp(argv[1], "verify") == 0)
		return cmd_workspace(argc - 1, argv + 1, EVAL_VERIFY, "verify");
	if (strcmp(argv[1], "profile") == 0)
		return cmd_workspace(argc - 1, argv + 1, EVAL_PROFILE, "profile");
	if (strcmp(argv[1], "eval") == 0)
		return cmd_eval(argc - 1, argv + 1);
	if (strcmp(argv[1], "tasks") == 0)
		return cmd_tasks(argc - 1, argv + 1);
	if (strcmp(argv[1], "report") == 0)
		return cmd_report(argc - 1, argv + 1);
	if (strcmp(argv[1], "bench") == 0)
		return cmd_bench(argc - 1, argv + 1);
	if (strcmp(argv[1], "solve") == 0)
		return cmd_solve(argc - 1, argv + 1);
	if (strcmp(argv[1], "workspace") == 0)
		return cmd_workspace_tool(argc - 1, argv + 1);
	if (strcmp(argv[1], "baselines") == 0)
		return cmd_baselines(argc - 1, argv + 1);
	if (strcmp(argv[1], "serve") == 0)
		return cmd_serve(argc - 1, argv + 1);
	if (strcmp(argv[1], "synth") == 0)
		return cmd_synth(argc - 1, argv + 1);
	if (strcmp(argv[1], "rft") == 0)
		return cmd_rft(argc - 1, argv + 1);
	if (strcmp(argv[1], "worker") == 0)
		return cmd_worker(argc - 1, argv + 1);
	if (strcmp(argv[1], "sandbox-exec") == 0)
		return cmd_sandbox_exec(argc - 1, argv + 1);
	if (strcmp(argv[1], "serve-worker") == 0)
		return cmd_serve_worker(argc - 1, argv + 1);
	fprintf(stderr, "cuda-agent: unknown command '%s'\n%s", argv[1], main_usage);
	return EXIT_USAGE;
}
