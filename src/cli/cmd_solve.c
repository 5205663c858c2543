/* cuda-agent solve TASK --llm-url URL --model NAME: the agent loop on one task (agent/loop.h,
 * docs/agent.md). Exit codes as eval's for the final evaluation (docs/cli.md), 2 for usage,
 * 4 when the loop could not start (LLM client, workspace, trajectory file). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/loop.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "util/log.h"

static const char solve_usage[] =
	"usage: cuda-agent solve [options] TASK --llm-url URL --model NAME\n"
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
	"evaluation (compile/verify/profile and the final evaluation, as `cuda-agent eval`)";

struct solve_args {
	const char *url, *model, *key_env, *workspace, *trajectory;
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
	if ((rc = take_solve_options(&argc, argv, &a)))
		return rc;
	if ((rc = cli_parse_options(&c, argc, argv, solve_usage)))
		return rc;
	if (!a.url)
		a.url = getenv("CUDA_AGENT_LLM_URL");
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
