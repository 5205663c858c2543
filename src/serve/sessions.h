/* sessions: the service's agent sessions (docs/service.md, "Sessions"): one task, one workspace
 * (SKILL.md, INTERFACE.md, a kernels/ template: src/workspace), the agent's tools on it, and a
 * final evaluation.
 *
 * A session is a directory STATE/sessions/<id> holding the task (task/ when it came inline),
 * the workspace (ws/) and the bash tool's scratch (tmp/). The file tools and bash (src/agent/
 * tools.h: bash in the sandbox) run in the HTTP handler's thread, one bash at a time per
 * session; compile, verify and profile, and `cuda-agent compile|verify|profile` typed in bash,
 * are jobs of the queue (a worker process runs them, so GPU work is scheduled with everything
 * else); finalize is an `eval` job ahead of the others. Sessions idle longer than the idle limit
 * are closed by a reaper thread; a closed session's directory is removed once no call uses it.
 *
 * Threads: every function is safe from any thread. session_get hands out a reference
 * (session_put). */
#ifndef CA_SERVE_SESSIONS_H
#define CA_SERVE_SESSIONS_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "serve/queue.h"
#include "serve/request.h"
#include "util/diag.h"

#define SESSION_ID_LEN 34 /* "s-" + 32 hex */

struct serve_session {
	char id[SESSION_ID_LEN + 1];
	char dir[PATH_MAX];
	char ws[PATH_MAX];
	char task_dir[PATH_MAX];
	char scratch[PATH_MAX];
	char bin[PATH_MAX]; /* the `cuda-agent` shim bash finds first on its PATH */
	double bash_timeout_s;
	size_t output_cap;
	pthread_mutex_t bash; /* one bash at a time in a workspace */
	double last_used;     /* monotonic */
	int refs;
	bool closed;
	struct serve_session *next;
};

struct session_table {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	struct serve_session *head;
	size_t n, max;
	double idle_s;
	char root[PATH_MAX]; /* STATE/sessions */
	struct job_queue *q;
	bool sandbox; /* bash in the sandbox (CUDA_AGENT_SANDBOX=0 turns it off) */
	pthread_t reaper;
	bool reaper_started, stopping;
};

int session_table_init(struct session_table *t, const char *root, size_t max, double idle_s,
		       struct job_queue *q, struct ca_diag *d);
/* Stops the reaper and closes every session. */
void session_table_destroy(struct session_table *t);

/* POST /v1/sessions: a new session for the request's task (its candidate part unused); the
 * workspace is made by a worker (its warm bridge describes the task). 0 with *out (a
 * reference) and *answer ({session_id, prompt, tools}); or an HTTP status in *status and a
 * message in d (429 too many sessions, 422 a broken task, 404 an unknown task id, 503). */
int session_create(struct session_table *t, const struct serve_request *r,
		   const char *task_dir, struct serve_session **out, json_t **answer,
		   unsigned *status, struct ca_diag *d);
struct serve_session *session_get(struct session_table *t, const char *id);
void session_put(struct session_table *t, struct serve_session *s);
/* DELETE: 0, or CA_ERR_NOTFOUND. */
int session_close(struct session_table *t, const char *id);
/* POST /v1/sessions/{id}/tools/{name} with args (a JSON object): the answer, or NULL with the
 * status (400 bad arguments, 404 no such tool) and a message in d. */
json_t *session_tool(struct session_table *t, struct serve_session *s, const char *name,
		     const json_t *args, unsigned *status, struct ca_diag *d);
/* POST /v1/sessions/{id}/finalize: the evaluation's result (reward null with an env.* reason
 * when the service could not run it). */
json_t *session_finalize(struct session_table *t, struct serve_session *s);
size_t session_count(struct session_table *t);

#endif
