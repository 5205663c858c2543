/* serve_int: what the HTTP side's files share (serve.c: the server, /v1/evaluate, sessions and
 * the routing; openenv.c: OpenEnv's endpoints). Private to src/serve. */
#ifndef CA_SERVE_SERVE_INT_H
#define CA_SERVE_SERVE_INT_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

#include <jansson.h>
#include <microhttpd.h>

#include "serve/fleet.h"
#include "serve/jobstore.h"
#include "serve/metrics.h"
#include "serve/queue.h"
#include "serve/serve.h"
#include "serve/sessions.h"
#include "serve/workers.h"
#include "util/buf.h"
#include "util/diag.h"

#define SERVE_RETRY_AFTER_S "5"

struct serve {
	const struct serve_opts *o;
	struct job_queue q;
	struct serve_metrics m;
	struct serve_pool pool;
	struct fleet_server fleet; /* with --redis, instead of the pool */
	bool fleet_started;
	struct session_table sessions;
	struct job_store store;
	char jobs_dir[PATH_MAX];
	char token[256]; /* "" when no token is asked for */
	pthread_mutex_t mu;
	int in_flight; /* handlers between their request and their answer */
	int ws_open;   /* OpenEnv WebSocket connections (openenv_ws.c) */
	bool stopping; /* SIGINT or SIGTERM came: WebSocket connections close */
};

struct conn {
	struct ca_buf body;
	bool too_big;
};

/* Answers: text (taken, freed by MHD), a JSON body (taken), an error {"error": {code,
 * message}}; extra: Retry-After (429, 503) or Allow (405). */
enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type, char *text,
			const char *retry_after);
enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *body,
			     const char *retry_after);
enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *code,
			      const char *message, const char *extra);
/* POST /v1/evaluate's work: the answer (the result with "job"), or NULL with *status, *code
 * and a message in d. */
json_t *run_evaluate(struct serve *S, const char *body, size_t len, const char *hkey,
		     unsigned *status, const char **code, struct ca_diag *d);
/* POST /v1/sessions's work, shared with OpenEnv's WebSocket reset: a new session (*out, a
 * reference) and its answer {session_id, prompt, tools}, or NULL with *status, *code and a
 * message in d. */
json_t *run_session_open(struct serve *S, const char *body, size_t len, bool too_big,
			 struct serve_session **out, unsigned *status, const char **code,
			 struct ca_diag *d);
/* GET /ws: OpenEnv's WebSocket sessions (openenv_ws.c). */
enum MHD_Result openenv_ws_upgrade(struct serve *S, struct MHD_Connection *c, unsigned *status);
/* /reset, /step, /state, /schema, /health (openenv.c). */
enum MHD_Result openenv(struct serve *S, struct MHD_Connection *c, const char *url, bool get,
			bool post, struct conn *cc, unsigned *status);

#endif
