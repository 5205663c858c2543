#include "agent/loop.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "agent/tools.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/str.h"
#include "workspace/workspace.h"

#define PROMPT_FILE_MAX (256u << 10)
#define ARGS_MAX        (8u << 20) /* a tool call's arguments string */

static const char *const read_only_files[] = {"model.py", "task.json", "SKILL.md",
					      "INTERFACE.md", NULL};

void agent_opts_defaults(struct agent_opts *o)
{
	memset(o, 0, sizeof *o);
	llm_opts_defaults(&o->llm);
	eval_opts_defaults(&o->eval);
	o->max_turns = 150;
	o->context_tokens = 128000;
	o->tool_output_cap = 30000;
	o->bash_timeout_s = 120;
}

void agent_result_free(struct agent_result *res)
{
	json_decref(res->final);
	res->final = NULL;
}

bool agent_eval_command(const char *command, enum eval_mode *mode, bool *json)
{
	static const struct {
		const char *name;
		enum eval_mode mode;
	} verbs[] = {{"compile", EVAL_COMPILE}, {"verify", EVAL_VERIFY}, {"profile", EVAL_PROFILE}};
	char words[4][32];
	int n = 0;
	const char *p = command;

	while (*p && n < 4) {
		size_t len = 0;
		while (isspace((unsigned char)*p))
			p++;
		if (!*p)
			break;
		while (p[len] && !isspace((unsigned char)p[len]))
			len++;
		if (len >= sizeof words[0])
			return false;
		memcpy(words[n], p, len);
		words[n++][len] = '\0';
		p += len;
	}
	while (isspace((unsigned char)*p))
		p++;
	if (*p || n < 2 || n > 3 || strcmp(words[0], "cuda-agent") != 0)
		return false;
	*json = n == 3;
	if (n == 3 && strcmp(words[2], "--json") != 0)
		return false;
	for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
		if (strcmp(words[1], verbs[i].name) == 0) {
			*mode = verbs[i].mode;
			return true;
		}
	return false;
}

/* ---- the trajectory ------------------------------------------------------------------------ */

struct trajectory {
	FILE *f;
};

static void traj_write(struct trajectory *t, json_t *obj)
{
	char *line;
	if (!t->f) {
		json_decref(obj);
		return;
	}
	json_object_set_new(obj, "time", json_real(ca_wall_now()));
	line = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(9));
	if (line) {
		fputs(line, t->f);
		fputc('\n', t->f);
		fflush(t->f);
	}
	free(line);
	json_decref(obj);
}

/* ---- the conversation's start -------------------------------------------------------------- */

static char *read_text(const char *dir, const char *name, struct ca_diag *d)
{
	char path[PATH_MAX];
	char *data = NULL;
	size_t len = 0;
	if (ca_path_join(path, sizeof path, dir, name)) {
		ca_fail(d, CA_ERR_LIMIT, "path too long");
		return NULL;
	}
	if (ca_read_file(path, PROMPT_FILE_MAX, &data, &len, d))
		return NULL;
	return data;
}

json_t *agent_opening_messages(const char *workspace, struct ca_diag *d)
{
	char *skill = read_text(workspace, "SKILL.md", d);
	char *model = skill ? read_text(workspace, "model.py", d) : NULL;
	char *iface = model ? read_text(workspace, "INTERFACE.md", d) : NULL;
	json_t *msgs = NULL;
	char *user = NULL;

	if (iface &&
	    asprintf(&user,
		     "Your workspace is the bash tool's working directory; the file tools take "
		     "paths relative to it. The task (model.py):\n\n```python\n%s\n```\n\n"
		     "The interface your ca_forward receives (INTERFACE.md):\n\n%s\n\n"
		     "Write your CUDA code in kernels/, then compile, verify and profile with "
		     "`cuda-agent compile`, `cuda-agent verify` and `cuda-agent profile` through "
		     "the bash tool, and iterate until it is correct and faster than "
		     "torch.compile by at least 5%%. When you are done, reply without calling a "
		     "tool.",
		     model, iface) >= 0)
		msgs = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", skill,
				 "role", "user", "content", user);
	else if (iface)
		ca_fail(d, CA_ERR_NOMEM, "out of memory");
	free(skill);
	free(model);
	free(iface);
	free(user);
	return msgs;
}

/* ---- one tool call ------------------------------------------------------------------------- */

struct call_outcome {
	char *output; /* owned */
	bool ok, violation;
	int exit_code; /* of the cuda-agent command (docs/cli.md), for the shim */
	double seconds;
};

/* The loop's own compile/verify/profile of the workspace against the original task. */
static void run_eval_command(struct eval_session *s, const struct agent_opts *o,
			     enum eval_mode mode, bool as_json, struct call_outcome *out)
{
	struct eval_opts eo = o->eval;
	struct ca_diag d = {{0}};
	json_t *result = NULL;

	eo.mode = mode;
	eo.task_dir = o->task_dir;
	eo.candidate_dir = o->workspace;
	eo.format = CANDIDATE_NATIVE;
	if (eval_run(s, &eo, &result, &d) != 0) {
		if (asprintf(&out->output, "cuda-agent: %s", d.msg) < 0)
			out->output = NULL;
		out->ok = false;
		out->exit_code = 5;
		return;
	}
	out->exit_code = eval_exit_code(result);
	out->ok = out->exit_code == 0;
	if (as_json)
		out->output = json_dumps(result, JSON_COMPACT | JSON_REAL_PRECISION(6));
	else
		out->output = strdup(json_string_value(json_object_get(result, "summary")));
	json_decref(result);
}

/* `cuda-agent ...` typed inside a bash command (the shim, tools.h): the same commands as above. */
struct shim_target {
	struct eval_session *s;
	const struct agent_opts *o;
};

static int serve_shim(void *arg, const char *line, char **output, int *exit_code)
{
	const struct shim_target *t = arg;
	struct call_outcome out = {0};
	enum eval_mode mode;
	bool as_json;
	if (!agent_eval_command(line, &mode, &as_json)) {
		*output = strdup("cuda-agent: in the agent's workspace the commands are "
				 "`cuda-agent compile`, `cuda-agent verify` and `cuda-agent profile`, "
				 "each with an optional --json");
		*exit_code = 2;
		return 0;
	}
	run_eval_command(t->s, t->o, mode, as_json, &out);
	*output = out.output;
	*exit_code = out.output ? out.exit_code : 5;
	return 0;
}

static void run_call(struct eval_session *s, const struct agent_opts *o,
		     const struct tool_ctx *ctx, const char *name, const char *arguments,
		     struct call_outcome *out)
{
	struct ca_diag d = {{0}};
	json_error_t jerr;
	json_t *args = NULL;
	double t0 = ca_now();
	enum eval_mode mode;
	bool as_json;

	memset(out, 0, sizeof *out);
	if (strlen(arguments) > ARGS_MAX) {
		out->violation = true;
		if (asprintf(&out->output, "error: the arguments of %s are longer than %u bytes", name,
			     ARGS_MAX) < 0)
			out->output = NULL;
		goto done;
	}
	args = json_loads(arguments[0] ? arguments : "{}", 0, &jerr);
	if (!json_is_object(args)) {
		out->violation = true;
		if (asprintf(&out->output,
			     "error: the arguments of %s must be a JSON object (%s at line %d); "
			     "nothing was run",
			     name, args ? "not an object" : jerr.text, jerr.line) < 0)
			out->output = NULL;
		goto done;
	}
	if (strcmp(name, "bash") == 0 &&
	    agent_eval_command(json_string_value(json_object_get(args, "command"))
				       ? json_string_value(json_object_get(args, "command"))
				       : "",
			       &mode, &as_json)) {
		run_eval_command(s, o, mode, as_json, out);
		goto done;
	}
	{
		struct tool_result tr = {0};
		int rc = tools_run(ctx, name, args, &tr, &d);
		if (rc == CA_ERR_NOTFOUND || rc == CA_ERR_INVALID) {
			out->violation = true;
			if (asprintf(&out->output, "error: %s; nothing was run", d.msg) < 0)
				out->output = NULL;
		} else if (rc) {
			if (asprintf(&out->output, "error: the tool failed: %s", d.msg) < 0)
				out->output = NULL;
		} else {
			out->ok = tr.ok;
			out->output = tr.output;
			tr.output = NULL;
		}
		tool_result_free(&tr);
	}
done:
	if (!out->output)
		out->output = strdup("error: out of memory");
	json_decref(args);
	out->seconds = ca_now() - t0;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static long usage_of(const struct llm_reply *r, long fallback)
{
	return r->total_tokens >= 0 ? r->total_tokens
	       : r->prompt_tokens >= 0 ? r->prompt_tokens + (r->completion_tokens > 0 ? r->completion_tokens : 0)
				       : fallback;
}

static int ensure_workspace(const struct agent_opts *o, struct ca_diag *d)
{
	struct workspace_opts wo = {.task_dir = o->task_dir, .dir = o->workspace};
	struct workspace_report rep;
	char skill[PATH_MAX];
	if (ca_path_join(skill, sizeof skill, o->workspace, "SKILL.md"))
		return ca_fail(d, CA_ERR_LIMIT, "workspace path too long");
	if (ca_is_file(skill))
		return 0; /* an existing workspace: go on from where it is */
	return workspace_create(&wo, &rep, d);
}

/* The bash tool's scratch directory and the directory of its `cuda-agent` shim, under the
 * cache (removed by the caller). */
static int tool_dirs(char *scratch, size_t scratch_size, char *shim_dir, size_t shim_size,
		     struct ca_diag *d)
{
	char base[PATH_MAX];
	if (ca_cache_dir(base, sizeof base, d) ||
	    ca_make_temp_dir(base, "agent-tmp-", scratch, scratch_size, d) ||
	    ca_make_temp_dir(base, "agent-bin-", shim_dir, shim_size, d) ||
	    tools_bash_write_shim(shim_dir, d))
		return CA_ERR_IO;
	return 0;
}

static void tool_ctx_init(struct tool_ctx *ctx, const struct agent_opts *o, const char *scratch,
			  const char *shim_dir, struct shim_target *shim)
{
	memset(ctx, 0, sizeof *ctx);
	ctx->workspace = o->workspace;
	ctx->read_only = read_only_files;
	ctx->bash_timeout_s = o->bash_timeout_s;
	ctx->output_cap = o->tool_output_cap;
	ctx->sandbox = o->eval.sandbox;
	ctx->scratch_dir = scratch;
	ctx->agent_cmd = serve_shim;
	ctx->agent_cmd_arg = shim;
	ctx->shim_dir = shim_dir;
}

static void traj_turn(struct trajectory *traj, int turn, const struct llm_reply *reply,
		      double seconds)
{
	traj_write(traj, json_pack("{s:s, s:i, s:O, s:s, s:I, s:I, s:I, s:i, s:f}", "type", "turn",
				   "turn", turn, "message", reply->message, "finish_reason",
				   reply->finish_reason, "prompt_tokens",
				   (json_int_t)reply->prompt_tokens, "completion_tokens",
				   (json_int_t)reply->completion_tokens, "total_tokens",
				   (json_int_t)reply->total_tokens, "attempts", reply->attempts,
				   "seconds", seconds));
}

/* Runs one reply's tool calls in order: each answer appended to messages, each call written to
 * the trajectory, repeats and schema violations counted. Returns the seconds the tools took. */
static double handle_calls(struct eval_session *s, const struct agent_opts *o,
			   struct tool_ctx *ctx, int turn, json_t *calls, json_t *messages,
			   json_t *seen, struct trajectory *traj, struct agent_result *res)
{
	double spent = 0;
	size_t i;
	json_t *call;
	json_array_foreach(calls, i, call) {
		const char *id = json_string_value(json_object_get(call, "id"));
		json_t *fn = json_object_get(call, "function");
		const char *name = json_string_value(json_object_get(fn, "name"));
		const char *arguments = json_string_value(json_object_get(fn, "arguments"));
		char *args_text = NULL; /* arguments sent as an object instead of a string */
		struct call_outcome oc;
		char key[512];
		bool repeated = false;

		if (!name)
			name = "";
		if (!arguments && json_is_object(json_object_get(fn, "arguments")))
			arguments = args_text = json_dumps(json_object_get(fn, "arguments"),
							   JSON_COMPACT);
		if (!arguments)
			arguments = "";
		run_call(s, o, ctx, name, arguments, &oc);
		spent += oc.seconds;
		/* repeated: the same tool with the same arguments as an earlier call */
		{
			char digest[CA_HASH_HEX_LEN + 1];
			ca_hash_hex(arguments, strlen(arguments), digest);
			snprintf(key, sizeof key, "%.64s:%s", name, digest);
			repeated = json_object_get(seen, key) != NULL;
			json_object_set_new(seen, key, json_true());
		}
		res->tool_calls++;
		res->schema_violations += oc.violation;
		res->repeated_calls += repeated;
		json_array_append_new(messages,
				      json_pack("{s:s, s:s, s:s}", "role", "tool",
						"tool_call_id", id ? id : "", "content",
						oc.output));
		traj_write(traj, json_pack("{s:s, s:i, s:s, s:s, s:s, s:s, s:b, s:b, s:b, s:f}",
					    "type", "tool", "turn", turn, "id", id ? id : "",
					    "name", name, "arguments", arguments, "output",
					    oc.output, "ok", oc.ok, "violation", oc.violation,
					    "repeated", repeated, "seconds", oc.seconds));
		free(oc.output);
		free(args_text);
	}
	return spent;
}

/* The final evaluation: the workspace's kernels against the original task. */
static int final_evaluation(struct eval_session *s, const struct agent_opts *o,
			    struct trajectory *traj, struct agent_result *res, struct ca_diag *d)
{
	struct eval_opts eo = o->eval;
	struct ca_diag ed = {{0}};
	int rc;
	eo.mode = EVAL_FULL;
	eo.task_dir = o->task_dir;
	eo.candidate_dir = o->workspace;
	eo.format = CANDIDATE_NATIVE;
	if (!o->quiet)
		ca_log_info("final evaluation of %s", o->workspace);
	if ((rc = eval_run(s, &eo, &res->final, &ed)))
		return ca_fail(d, rc, "final evaluation: %s", ed.msg);
	traj_write(traj, json_pack("{s:s, s:O}", "type", "final", "result", res->final));
	return 0;
}

static void traj_summary(struct trajectory *traj, const struct agent_result *res)
{
	traj_write(traj,
		   json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:I, s:I, s:O, s:f, s:f, s:f, s:f}",
			     "type", "summary", "stop_reason", res->stop_reason, "turns", res->turns,
			     "tool_calls", res->tool_calls, "schema_violations",
			     res->schema_violations, "repeated_calls", res->repeated_calls,
			     "prompt_tokens", (json_int_t)res->prompt_tokens, "completion_tokens",
			     (json_int_t)res->completion_tokens, "reward",
			     json_object_get(res->final, "reward"), "seconds", res->seconds,
			     "llm_seconds", res->llm_seconds, "tool_seconds", res->tool_seconds,
			     "overhead_ms_per_turn", res->overhead_ms_per_turn));
}

int agent_run(struct eval_session *s, const struct agent_opts *o, struct agent_result *res,
	      struct ca_diag *d)
{
	struct trajectory traj = {0};
	struct llm_client client;
	bool client_ok = false;
	char traj_path[PATH_MAX], scratch[PATH_MAX] = "", shim_dir[PATH_MAX] = "";
	struct shim_target shim = {s, o};
	json_t *messages = NULL, *tools = NULL, *seen = NULL;
	struct tool_ctx ctx;
	double t0 = ca_now(), loop_own = 0;
	int max_turns = o->max_turns > 0 ? o->max_turns : 150;
	long context = o->context_tokens > 0 ? o->context_tokens : 128000, last_size = 0;
	int rc;

	memset(res, 0, sizeof *res);
	ca_strlcpy(res->stop_reason, "done", sizeof res->stop_reason);
	if ((rc = ensure_workspace(o, d)))
		return ca_fail_prefix(d, rc, "workspace %s", o->workspace);
	if (o->trajectory_path)
		ca_strlcpy(traj_path, o->trajectory_path, sizeof traj_path);
	else if (ca_path_join(traj_path, sizeof traj_path, o->workspace, "trajectory.jsonl"))
		return ca_fail(d, CA_ERR_LIMIT, "workspace path too long");
	traj.f = fopen(traj_path, "w");
	if (!traj.f)
		return ca_fail(d, CA_ERR_IO, "cannot write the trajectory %s: %s", traj_path,
			       strerror(errno));
	if ((rc = llm_client_init(&client, &o->llm, d)))
		goto out;
	client_ok = true;
	if (!(messages = agent_opening_messages(o->workspace, d))) {
		rc = CA_ERR_IO;
		goto out;
	}
	if ((rc = tool_dirs(scratch, sizeof scratch, shim_dir, sizeof shim_dir, d)))
		goto out;
	tool_ctx_init(&ctx, o, scratch, shim_dir, &shim);
	tools = tools_schemas();
	seen = json_object();
	traj_write(&traj, json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:O, s:O}", "type", "start",
				    "task", o->task_dir, "workspace", o->workspace, "model",
				    o->llm.model ? o->llm.model : "", "max_turns", max_turns,
				    "context_tokens", (json_int_t)context, "messages", messages,
				    "tools", tools));

	for (int turn = 1;; turn++) {
		struct llm_reply reply = {0};
		struct ca_diag ld = {{0}};
		double turn0 = ca_now(), spent_llm, spent_tools = 0;
		json_t *calls;

		if (turn > max_turns) {
			ca_strlcpy(res->stop_reason, "turn_limit", sizeof res->stop_reason);
			break;
		}
		if (last_size >= context) {
			ca_strlcpy(res->stop_reason, "token_limit", sizeof res->stop_reason);
			break;
		}
		if (!o->quiet)
			ca_log_info("turn %d: asking %s", turn, o->llm.model ? o->llm.model : "the model");
		int lrc = llm_chat(&client, messages, tools, &reply, &ld);
		spent_llm = reply.seconds > 0 ? reply.seconds : ca_now() - turn0;
		res->llm_seconds += spent_llm;
		if (lrc) {
			ca_strlcpy(res->stop_reason, "llm_error", sizeof res->stop_reason);
			ca_strlcpy(res->llm_error, ld.msg, sizeof res->llm_error);
			traj_write(&traj, json_pack("{s:s, s:i, s:s, s:i, s:f}", "type", "turn", "turn",
						    turn, "error", ld.msg, "attempts",
						    reply.attempts, "seconds", spent_llm));
			llm_reply_free(&reply);
			break;
		}
		res->turns = turn;
		last_size = usage_of(&reply, last_size);
		res->prompt_tokens = reply.prompt_tokens;
		if (reply.completion_tokens > 0)
			res->completion_tokens += reply.completion_tokens;
		json_array_append(messages, reply.message);
		calls = json_object_get(reply.message, "tool_calls");
		traj_turn(&traj, turn, &reply, spent_llm);
		if (!json_is_array(calls) || json_array_size(calls) == 0) {
			llm_reply_free(&reply);
			loop_own += ca_now() - turn0 - spent_llm;
			break; /* no tool calls: the model is done */
		}
		spent_tools = handle_calls(s, o, &ctx, turn, calls, messages, seen, &traj, res);
		res->tool_seconds += spent_tools;
		llm_reply_free(&reply);
		loop_own += ca_now() - turn0 - spent_llm - spent_tools;
	}

	if ((rc = final_evaluation(s, o, &traj, res, d)))
		goto out;
	res->seconds = ca_now() - t0;
	res->overhead_ms_per_turn = res->turns > 0 ? loop_own * 1e3 / res->turns : 0;
	traj_summary(&traj, res);
	rc = 0;
out:
	if (client_ok)
		llm_client_free(&client);
	if (scratch[0])
		ca_remove_tree(scratch, NULL);
	if (shim_dir[0])
		ca_remove_tree(shim_dir, NULL);
	json_decref(messages);
	json_decref(tools);
	json_decref(seen);
	if (traj.f)
		fclose(traj.f);
	return rc;
}
