/* sessions: the service's agent sessions (sessions.h). */
#include "serve/sessions.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>

#include "agent/loop.h"
#include "agent/tools.h"
#include "eval/eval.h"
#include "serve/workers.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

#define SESSION_SETUP_S 300.0  /* a workspace is ready within this */
#define SESSION_EVAL_S  1800.0 /* compile, verify, profile, finalize answer within this */

static const char *const read_only_files[] = {"model.py", "task.json", "SKILL.md",
					      "INTERFACE.md", NULL};

static void *reaper_main(void *arg);

int session_table_init(struct session_table *t, const char *root, size_t max, double idle_s,
		       struct job_queue *q, struct ca_diag *d)
{
	const char *sb = getenv("CUDA_AGENT_SANDBOX");
	int rc;
	memset(t, 0, sizeof *t);
	t->max = max ? max : 1;
	t->idle_s = idle_s > 0 ? idle_s : 1800.0;
	t->q = q;
	t->sandbox = !(sb && strcmp(sb, "0") == 0);
	if (ca_strlcpy(t->root, root, sizeof t->root))
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	ca_remove_tree(root, NULL); /* sessions of a run that ended */
	if ((rc = ca_mkdirs(root, 0711, d)))
		return rc;
	if (chmod(root, 0711) != 0)
		return ca_fail(d, CA_ERR_IO, "chmod %s: %s", root, strerror(errno));
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->wake, NULL);
	if (pthread_create(&t->reaper, NULL, reaper_main, t) != 0)
		return ca_fail(d, CA_ERR_NOMEM, "cannot start the session reaper");
	t->reaper_started = true;
	return 0;
}

static void session_free(struct serve_session *s)
{
	ca_remove_tree(s->dir, NULL);
	pthread_mutex_destroy(&s->bash);
	free(s);
}

/* Unlinks s from the table (the table's reference goes to *dead when it was the last). */
static void unlink_locked(struct session_table *t, struct serve_session *s,
			  struct serve_session **dead)
{
	for (struct serve_session **p = &t->head; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			t->n--;
			s->closed = true;
			if (--s->refs == 0) {
				s->next = *dead;
				*dead = s;
			}
			return;
		}
}

static void free_all(struct serve_session *dead)
{
	while (dead) {
		struct serve_session *next = dead->next;
		session_free(dead);
		dead = next;
	}
}

static void *reaper_main(void *arg)
{
	struct session_table *t = arg;
	pthread_mutex_lock(&t->mu);
	while (!t->stopping) {
		struct serve_session *dead = NULL;
		struct timespec ts;
		ca_timespec_after(CLOCK_REALTIME, t->idle_s / 4 < 5.0 ? t->idle_s / 4 : 5.0, &ts);
		pthread_cond_timedwait(&t->wake, &t->mu, &ts);
		for (struct serve_session *s = t->head, *next; s; s = next) {
			next = s->next;
			if (ca_now() - s->last_used > t->idle_s) {
				ca_log_info("serve: session %s idle for %.0f s: closed", s->id,
					    ca_now() - s->last_used);
				unlink_locked(t, s, &dead);
			}
		}
		pthread_mutex_unlock(&t->mu);
		free_all(dead);
		pthread_mutex_lock(&t->mu);
	}
	pthread_mutex_unlock(&t->mu);
	return NULL;
}

void session_table_destroy(struct session_table *t)
{
	struct serve_session *dead = NULL;
	if (!t->reaper_started)
		return;
	pthread_mutex_lock(&t->mu);
	t->stopping = true;
	pthread_cond_broadcast(&t->wake);
	pthread_mutex_unlock(&t->mu);
	pthread_join(t->reaper, NULL);
	pthread_mutex_lock(&t->mu);
	while (t->head)
		unlink_locked(t, t->head, &dead);
	pthread_mutex_unlock(&t->mu);
	free_all(dead);
	pthread_cond_destroy(&t->wake);
	pthread_mutex_destroy(&t->mu);
	t->reaper_started = false;
}

struct serve_session *session_get(struct session_table *t, const char *id)
{
	struct serve_session *s;
	pthread_mutex_lock(&t->mu);
	for (s = t->head; s && strcmp(s->id, id) != 0; s = s->next)
		;
	if (s) {
		s->refs++;
		s->last_used = ca_now();
	}
	pthread_mutex_unlock(&t->mu);
	return s;
}

void session_put(struct session_table *t, struct serve_session *s)
{
	bool last;
	if (!s)
		return;
	pthread_mutex_lock(&t->mu);
	s->last_used = ca_now();
	last = --s->refs == 0;
	pthread_mutex_unlock(&t->mu);
	if (last)
		session_free(s);
}

int session_close(struct session_table *t, const char *id)
{
	struct serve_session *s, *dead = NULL;
	pthread_mutex_lock(&t->mu);
	for (s = t->head; s && strcmp(s->id, id) != 0; s = s->next)
		;
	if (s)
		unlink_locked(t, s, &dead);
	pthread_mutex_unlock(&t->mu);
	free_all(dead);
	return s ? 0 : CA_ERR_NOTFOUND;
}

size_t session_count(struct session_table *t)
{
	size_t n;
	pthread_mutex_lock(&t->mu);
	n = t->n;
	pthread_mutex_unlock(&t->mu);
	return n;
}

/* ---- creation ---------------------------------------------------------------------------------- */

static int new_session(struct session_table *t, struct serve_session **out, struct ca_diag *d)
{
	unsigned char rnd[16];
	struct serve_session *s;
	*out = NULL;
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		return ca_fail(d, CA_ERR_IO, "getrandom: %s", strerror(errno));
	if (!(s = calloc(1, sizeof *s)))
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	memcpy(s->id, "s-", 2);
	for (size_t i = 0; i < sizeof rnd; i++)
		snprintf(s->id + 2 + 2 * i, 3, "%02x", rnd[i]);
	pthread_mutex_init(&s->bash, NULL);
	if (ca_format(s->dir, sizeof s->dir, "%s/%s", t->root, s->id) ||
	    ca_format(s->ws, sizeof s->ws, "%s/ws", s->dir) ||
	    ca_format(s->scratch, sizeof s->scratch, "%s/tmp", s->dir)) {
		pthread_mutex_destroy(&s->bash);
		free(s);
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	}
	if (mkdir(s->dir, 0711) != 0 || chmod(s->dir, 0711) != 0 || mkdir(s->scratch, 0700) != 0) {
		int e = errno;
		session_free(s);
		return ca_fail(d, CA_ERR_IO, "cannot make the session directory: %s", strerror(e));
	}
	/* `cuda-agent` inside bash (tools.h's shim) */
	if (ca_format(s->bin, sizeof s->bin, "%s/bin", s->dir) || ca_mkdirs(s->bin, 0755, d) ||
	    tools_bash_write_shim(s->bin, d)) {
		session_free(s);
		return CA_ERR_IO;
	}
	s->refs = 1;
	*out = s;
	return 0;
}

/* The eval tools beside src/agent/tools.h's: compile, verify, profile (no arguments). */
static json_t *all_tools(void)
{
	static const char *const eval_tools[][2] = {
		{"compile", "Builds kernels/ with nvcc and checks the library (cuda-agent compile)."},
		{"verify", "Compiles, then checks ca_forward against the reference on fresh secret "
			   "inputs (cuda-agent verify)."},
		{"profile", "Verifies, then times the kernel against eager PyTorch and torch.compile "
			    "(cuda-agent profile; needs a GPU)."},
	};
	json_t *tools = tools_schemas();
	for (size_t i = 0; i < sizeof eval_tools / sizeof eval_tools[0]; i++)
		json_array_append_new(
			tools, json_pack("{s:s, s:{s:s, s:s, s:{s:s, s:{}, s:b}}}", "type", "function",
					 "function", "name", eval_tools[i][0], "description",
					 eval_tools[i][1], "parameters", "type", "object",
					 "properties", "additionalProperties", 0));
	return tools;
}

int session_create(struct session_table *t, const struct serve_request *r,
		   const char *task_dir, struct serve_session **out, json_t **answer,
		   unsigned *status, struct ca_diag *d)
{
	struct serve_session *s = NULL;
	json_t *spec, *res;
	const char *code;
	int rc;

	*out = NULL;
	*answer = NULL;
	*status = 500;
	pthread_mutex_lock(&t->mu);
	rc = t->n >= t->max ? ca_fail(d, CA_ERR_LIMIT, "%zu sessions are open (the limit); close "
							   "one or retry later",
					   t->n)
			    : 0;
	pthread_mutex_unlock(&t->mu);
	if (rc) {
		*status = 429;
		return rc;
	}
	if ((rc = new_session(t, &s, d)))
		return rc;
	s->bash_timeout_s = r->bash_timeout_s;
	s->output_cap = r->output_cap;
	if (r->task_by == SERVE_TASK_INLINE) {
		if (ca_format(s->task_dir, sizeof s->task_dir, "%s/task", s->dir) ||
		    (rc = serve_files_write(s->task_dir, r->task_files, r->ntask_files, d))) {
			rc = rc ? rc : ca_fail(d, CA_ERR_LIMIT, "path too long");
			goto fail;
		}
	} else {
		ca_strlcpy(s->task_dir, task_dir, sizeof s->task_dir);
	}
	spec = json_pack("{s:s, s:s, s:s}", "kind", "workspace", "task_dir", s->task_dir, "dir",
			 s->ws);
	res = job_queue_run(t->q, JOB_PRIO_HIGH, spec, ca_now() + SESSION_SETUP_S,
			    ca_now() + SESSION_SETUP_S + SERVE_GRACE_S, &rc, d);
	if (!res) {
		*status = rc == CA_ERR_LIMIT ? 429 : 503;
		goto fail;
	}
	code = json_string_value(json_object_get(json_object_get(res, "reason"), "code"));
	if (!code || strcmp(code, "ok") != 0) {
		const char *msg = json_string_value(json_object_get(json_object_get(res, "reason"),
								    "message"));
		*status = code && strncmp(code, "task.", 5) == 0 ? 422 : 503;
		rc = ca_fail(d, CA_ERR_INVALID, "%s: %s", code ? code : "internal",
			     msg ? msg : "the workspace could not be made");
		json_decref(res);
		goto fail;
	}
	json_decref(res);
	{
		/* solve's opening messages (agent/loop.h); the prompt is their text in one string */
		struct ca_diag md = {{0}};
		json_t *messages = agent_opening_messages(s->ws, &md);
		char *prompt = NULL;
		if (!messages || asprintf(&prompt, "%s\n\n%s",
					  json_string_value(json_object_get(
						  json_array_get(messages, 0), "content")),
					  json_string_value(json_object_get(
						  json_array_get(messages, 1), "content"))) < 0) {
			json_decref(messages);
			*status = 503;
			rc = ca_fail(d, CA_ERR_IO, "the workspace's prompt: %s",
				     md.msg[0] ? md.msg : "out of memory");
			goto fail;
		}
		*answer = json_pack("{s:s, s:s, s:o, s:o}", "session_id", s->id, "prompt", prompt,
				    "messages", messages, "tools", all_tools());
		free(prompt);
	}
	pthread_mutex_lock(&t->mu);
	s->last_used = ca_now();
	s->refs = 2; /* the table's, the caller's */
	s->next = t->head;
	t->head = s;
	t->n++;
	pthread_mutex_unlock(&t->mu);
	*out = s;
	*status = 200;
	return 0;
fail:
	session_free(s);
	return rc ? rc : CA_ERR_INVALID;
}

/* ---- tools ------------------------------------------------------------------------------------- */

/* An evaluation of the workspace (mode: compile, verify, profile, eval) through the queue. */
static json_t *session_eval(struct session_table *t, struct serve_session *s, const char *mode,
			    enum job_priority prio)
{
	struct ca_diag d = {{0}};
	int rc;
	json_t *spec = json_pack("{s:s, s:s, s:s, s:s, s:s}", "task_dir", s->task_dir, "candidate",
				 s->ws, "format", "native", "rules", "", "mode", mode);
	json_t *res = job_queue_run(t->q, prio, spec, ca_now() + SESSION_EVAL_S,
				    ca_now() + SESSION_EVAL_S + SERVE_GRACE_S, &rc, &d);
	if (!res)
		res = serve_env_result("env.deadline", d.msg); /* a full queue or no answer */
	return res;
}

static json_t *eval_answer(json_t *res, bool as_json)
{
	int exit_code = eval_exit_code(res);
	char *text = as_json ? json_dumps(res, JSON_COMPACT | JSON_REAL_PRECISION(6)) : NULL;
	const char *summary = json_string_value(json_object_get(res, "summary"));
	json_t *a = json_pack("{s:b, s:s, s:i, s:O}", "ok", exit_code == 0, "output",
			      text ? text : summary ? summary : "", "exit_code", exit_code,
			      "result", res);
	free(text);
	json_decref(res);
	return a;
}

struct shim_arg {
	struct session_table *t;
	struct serve_session *s;
};

/* `cuda-agent ...` typed in bash (tools.h's shim): compile, verify, profile through the queue. */
static int session_shim(void *arg, const char *line, char **output, int *exit_code)
{
	struct shim_arg *a = arg;
	enum eval_mode mode;
	bool as_json;
	if (!agent_eval_command(line, &mode, &as_json)) {
		*output = strdup("cuda-agent: in the agent's workspace the commands are "
				 "`cuda-agent compile`, `cuda-agent verify` and `cuda-agent profile`, "
				 "each with an optional --json");
		*exit_code = 2;
		return 0;
	}
	json_t *ans = eval_answer(session_eval(a->t, a->s, eval_mode_name(mode), JOB_PRIO_NORMAL),
				  as_json);
	*output = strdup(json_string_value(json_object_get(ans, "output")));
	*exit_code = (int)json_integer_value(json_object_get(ans, "exit_code"));
	json_decref(ans);
	return 0;
}

json_t *session_tool(struct session_table *t, struct serve_session *s, const char *name,
		     const json_t *args, unsigned *status, struct ca_diag *d)
{
	struct shim_arg shim = {t, s};
	struct tool_ctx ctx = {.workspace = s->ws, .read_only = read_only_files,
			       .bash_timeout_s = s->bash_timeout_s, .output_cap = s->output_cap,
			       .sandbox = t->sandbox, .scratch_dir = s->scratch,
			       .agent_cmd = session_shim, .agent_cmd_arg = &shim,
			       .shim_dir = s->bin};
	struct tool_result tr = {0};
	enum eval_mode mode;
	bool as_json, is_bash = strcmp(name, "bash") == 0;
	int rc;
	json_t *a;

	if (strcmp(name, "compile") == 0 || strcmp(name, "verify") == 0 ||
	    strcmp(name, "profile") == 0) {
		if (json_object_size(args) != 0) {
			*status = 400;
			ca_fail(d, CA_ERR_INVALID, "%s takes no arguments", name);
			return NULL;
		}
		return eval_answer(session_eval(t, s, name, JOB_PRIO_NORMAL), false);
	}
	if (is_bash && json_is_string(json_object_get(args, "command")) &&
	    agent_eval_command(json_string_value(json_object_get(args, "command")), &mode,
			       &as_json)) {
		return eval_answer(session_eval(t, s, eval_mode_name(mode), JOB_PRIO_NORMAL),
				   as_json);
	}
	if (is_bash)
		pthread_mutex_lock(&s->bash);
	rc = tools_run(&ctx, name, args, &tr, d);
	if (is_bash)
		pthread_mutex_unlock(&s->bash);
	if (rc) {
		*status = rc == CA_ERR_NOTFOUND ? 404 : rc == CA_ERR_INVALID ? 400 : 500;
		tool_result_free(&tr);
		return NULL;
	}
	a = json_pack("{s:b, s:s, s:i, s:b, s:f}", "ok", tr.ok, "output", tr.output, "exit_code",
		      tr.exit_code, "timed_out", tr.timed_out, "seconds", tr.seconds);
	tool_result_free(&tr);
	return a;
}

json_t *session_finalize(struct session_table *t, struct serve_session *s)
{
	return session_eval(t, s, "eval", JOB_PRIO_HIGH);
}
