/* serve: the HTTP side of `cuda-agent serve` (serve.h). */
#include "serve/serve.h"
#include "serve/serve_int.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <microhttpd.h>

#include "serve/jobstore.h"
#include "serve/metrics.h"
#include "serve/queue.h"
#include "serve/request.h"
#include "serve/sessions.h"
#include "serve/workers.h"
#include "store/task_store.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/str.h"

void serve_opts_defaults(struct serve_opts *o)
{
	memset(o, 0, sizeof *o);
	o->listen = "127.0.0.1:8040";
	o->workers = 0; /* auto: one per GPU (each given its own), else 2 */
	o->max_queue = 1024;
	o->keep_done = 4096;
	o->max_sessions = 1024;
	o->session_idle_s = 1800.0;
	o->device = "auto";
}

/* ---- responses --------------------------------------------------------------------------------- */

enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
			       char *text, const char *retry_after)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text,
								 MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ok;
	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", type);
	if (retry_after)
		MHD_add_response_header(r, status == 405 ? "Allow" : "Retry-After", retry_after);
	ok = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ok;
}

enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *body,
				    const char *retry_after)
{
	char *text = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	if (!text) /* never a connection closed unanswered */
		return respond(c, 500, "application/json",
			       strdup("{\"error\": {\"code\": \"internal\", \"message\": \"the "
				      "answer could not be made\"}}"),
			       NULL);
	return respond(c, status, "application/json", text, retry_after);
}

/* extra: the Retry-After value (429, 503) or the Allow value (405). */
enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *code,
				     const char *message, const char *extra)
{
	char text[CA_DIAG_MAX + 64];
	/* Messages quote what the client sent, maybe cut inside a character: valid UTF-8 first,
	 * or the JSON answer could not be made and the connection would close unanswered. */
	ca_strlcpy(text, message ? message : "", sizeof text);
	ca_utf8_sanitize(text);
	return respond_json(c, status,
			    json_pack("{s:{s:s, s:s}}", "error", "code", code, "message", text),
			    extra);
}

/* ---- POST /v1/evaluate ------------------------------------------------------------------------- */

struct hash_find {
	const char *hash;
	struct task_record rec;
	bool found;
};

static int find_hash(const struct task_record *r, void *ctx)
{
	struct hash_find *h = ctx;
	if (strcmp(r->hash, h->hash) != 0)
		return 0;
	h->rec = *r;
	h->found = true;
	return 1;
}

/* A stored task's directory: 0, CA_ERR_NOTFOUND (a 404), or another error (a 503). */
static int stored_task(const struct serve *S, const struct serve_request *r, char *out,
		       size_t size, struct ca_diag *d)
{
	struct task_store st;
	char root[PATH_MAX];
	struct hash_find *h = calloc(1, sizeof *h);
	int rc;
	if (!h)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	if ((rc = task_store_default_dir(S->o->tasks, root, sizeof root, d)) ||
	    (rc = task_store_open(&st, root, false, d))) {
		free(h);
		return rc == CA_ERR_NOTFOUND ? ca_fail(d, CA_ERR_NOTFOUND, "no task store at %s",
						       root)
					     : rc;
	}
	if (r->task_by == SERVE_TASK_ID) {
		rc = task_store_get(&st, r->task_ref, &h->rec, d);
		h->found = rc == 0;
	} else {
		h->hash = r->task_ref;
		rc = task_store_list(&st, &(struct task_filter){.level = -1}, find_hash, h, d);
		rc = rc == 1 ? 0 : rc;
	}
	if (!rc && !h->found)
		rc = ca_fail(d, CA_ERR_NOTFOUND, "no task with %s \"%s\" in the store",
			     r->task_by == SERVE_TASK_ID ? "id" : "hash", r->task_ref);
	else if (rc == CA_ERR_NOTFOUND)
		ca_fail(d, CA_ERR_NOTFOUND, "no task with id \"%s\" in the store", r->task_ref);
	if (!rc && task_store_task_dir(&st, &h->rec, out, size))
		rc = ca_fail(d, CA_ERR_INVALID, "the store's entry for %s is damaged", h->rec.id);
	task_store_close(&st);
	free(h);
	return rc;
}

/* The job's spec: its request written under a fresh job directory. */
static int make_spec(const struct serve *S, const struct serve_request *r, json_t **spec,
		     unsigned *status, struct ca_diag *d)
{
	char dir[PATH_MAX], cand[PATH_MAX], task[PATH_MAX];
	unsigned char rnd[8];
	int rc;
	*status = 500;
	if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
		return ca_fail(d, CA_ERR_IO, "getrandom: %s", strerror(errno));
	if (ca_format(dir, sizeof dir, "%s/%02x%02x%02x%02x%02x%02x%02x%02x", S->jobs_dir, rnd[0],
		      rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]))
		return ca_fail(d, CA_ERR_LIMIT, "path too long");
	if ((rc = serve_request_write(r, dir, cand, sizeof cand, task, sizeof task, d))) {
		ca_remove_tree(dir, NULL);
		return rc;
	}
	if (r->task_by != SERVE_TASK_INLINE && (rc = stored_task(S, r, task, sizeof task, d))) {
		ca_remove_tree(dir, NULL);
		*status = rc == CA_ERR_NOTFOUND ? 404 : 503;
		return rc;
	}
	*spec = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "job_dir", dir, "task_dir", task,
			  "candidate", cand, "format", r->format, "rules", r->rules, "mode", r->mode);
	return *spec ? 0 : ca_fail(d, CA_ERR_NOMEM, "out of memory");
}

/* Error codes of the answers below, by HTTP status. */
static const char *error_code(unsigned status, int parse_rc)
{
	switch (status) {
	case 400: return parse_rc == CA_ERR_PARSE ? "bad_json" : "bad_request";
	case 404: return "not_found";
	case 413: return "too_large";
	case 429: return "queue_full";
	case 503: return "unavailable";
	default: return "internal";
	}
}

/* POST /v1/evaluate's work, shared with OpenEnv's /step: the body parsed, its job run (or the
 * job of its key joined). The answer (the result with "job"), or NULL with *status, *code and
 * a message in d. */
json_t *run_evaluate(struct serve *S, const char *body, size_t len, const char *hkey,
			    unsigned *status, const char **code, struct ca_diag *d)
{
	struct serve_request *r = calloc(1, sizeof *r);
	json_t *spec = NULL, *res;
	struct job *j = NULL;
	bool dup = false;
	double deadline;
	int rc;

	*code = "internal";
	if (!r) {
		*status = 500;
		ca_fail(d, CA_ERR_NOMEM, "out of memory");
		return NULL;
	}
	if ((rc = serve_request_parse(r, body, len, d))) {
		*status = rc == CA_ERR_LIMIT ? 413 : 400;
		*code = error_code(*status, rc);
		free(r);
		return NULL;
	}
	if (hkey && (strlen(hkey) == 0 || strlen(hkey) > SERVE_KEY_MAX)) {
		*status = 400;
		*code = "bad_request";
		ca_fail(d, CA_ERR_INVALID, "the idempotency key must be 1 to 128 bytes");
		serve_request_free(r);
		free(r);
		return NULL;
	}
	if (hkey)
		ca_strlcpy(r->key, hkey, sizeof r->key);
	rc = make_spec(S, r, &spec, status, d);
	if (!rc) {
		char keep[PATH_MAX];
		ca_strlcpy(keep, json_string_value(json_object_get(spec, "job_dir")), sizeof keep);
		rc = job_queue_submit(&S->q, r->key, JOB_PRIO_NORMAL, spec, ca_now() + r->deadline_s,
				      &j, &dup, d);
		if (rc || dup)
			ca_remove_tree(keep, NULL); /* nothing of ours runs from it */
		*status = rc == CA_ERR_LIMIT ? 429 : rc == CA_ERR_INTERRUPTED || rc == CA_ERR_IO ? 503
											: 500;
		if (rc == CA_ERR_LIMIT)
			serve_metrics_count(&S->m, &S->m.rejected_full);
	}
	deadline = ca_now() + r->deadline_s + SERVE_GRACE_S + 5.0;
	serve_request_free(r);
	free(r);
	if (rc) {
		*code = error_code(*status, rc);
		return NULL;
	}
	res = job_queue_wait(&S->q, j, dup ? j->deadline + SERVE_GRACE_S + 5.0 : deadline);
	if (!res) {
		*status = 504;
		res = serve_env_result("env.deadline",
				       "the request's deadline passed before its job was answered");
	} else {
		json_t *copy = json_deep_copy(res); /* the queue's copy may be sent to others */
		json_decref(res);
		res = copy;
		*status = res ? 200 : 500;
	}
	if (res)
		json_object_set_new(res, "job", json_pack("{s:s, s:b, s:i}", "id", j->id, "repeated",
							  dup, "attempts", j->attempts));
	job_queue_release(&S->q, j);
	return res;
}

static enum MHD_Result evaluate(struct serve *S, struct MHD_Connection *c, struct conn *cc,
				unsigned *status)
{
	struct ca_diag d = {{0}};
	const char *code;
	json_t *res;
	if (cc->too_big || cc->body.err) {
		*status = 413;
		return respond_error(c, 413, "too_large", "the body is larger than 16 MiB", NULL);
	}
	res = run_evaluate(S, cc->body.p ? cc->body.p : "", cc->body.len,
			   MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Idempotency-Key"), status,
			   &code, &d);
	if (!res)
		return respond_error(c, *status, code, d.msg,
				     *status == 429 || *status == 503 ? SERVE_RETRY_AFTER_S : NULL);
	return respond_json(c, *status, res, NULL);
}

/* ---- sessions ---------------------------------------------------------------------------------- */

json_t *run_session_open(struct serve *S, const char *body, size_t len, bool too_big,
			 struct serve_session **out, unsigned *status, const char **code,
			 struct ca_diag *d)
{
	struct serve_request *r = calloc(1, sizeof *r);
	char task[PATH_MAX] = "";
	json_t *answer = NULL;
	int rc;
	*out = NULL;
	*status = 500;
	*code = "internal";
	if (!r) {
		ca_fail(d, CA_ERR_NOMEM, "out of memory");
		return NULL;
	}
	rc = too_big ? ca_fail(d, CA_ERR_LIMIT, "the body is larger than 16 MiB")
		     : serve_session_request_parse(r, body ? body : "", len, d);
	*status = rc == CA_ERR_LIMIT ? 413 : rc ? 400 : 0;
	if (!rc && r->task_by != SERVE_TASK_INLINE && (rc = stored_task(S, r, task, sizeof task, d)))
		*status = rc == CA_ERR_NOTFOUND ? 404 : 503;
	if (!rc)
		rc = session_create(&S->sessions, r, task, out, &answer, status, d);
	serve_request_free(r);
	free(r);
	if (rc) {
		*code = *status == 400 ? "bad_request" : *status == 404 ? "not_found"
			: *status == 413 ? "too_large" : *status == 422 ? "bad_task"
			: *status == 429 ? "too_many_sessions" : "unavailable";
		return NULL;
	}
	*status = 200;
	return answer;
}

static enum MHD_Result session_new(struct serve *S, struct MHD_Connection *c, struct conn *cc,
				   unsigned *status)
{
	struct serve_session *s = NULL;
	struct ca_diag d = {{0}};
	const char *code;
	json_t *answer = run_session_open(S, cc->body.p, cc->body.len, cc->too_big, &s, status,
					  &code, &d);
	if (!answer)
		return respond_error(c, *status, code, d.msg,
				     *status == 429 || *status == 503 ? SERVE_RETRY_AFTER_S : NULL);
	session_put(&S->sessions, s);
	return respond_json(c, 200, answer, NULL);
}

/* /v1/sessions/ID[/finalize | /tools/NAME] */
static enum MHD_Result session_route(struct serve *S, struct MHD_Connection *c, const char *rest,
				     const char *method, struct conn *cc, enum serve_endpoint *ep,
				     unsigned *status)
{
	char id[SESSION_ID_LEN + 1];
	size_t k = strcspn(rest, "/");
	const char *sub = rest + k;
	struct serve_session *s;
	struct ca_diag d = {{0}};
	json_t *ans = NULL;

	*ep = !*sub ? EP_SESSION_CLOSE : strcmp(sub, "/finalize") == 0 ? EP_FINALIZE : EP_TOOL;
	if (k == 0 || k > SESSION_ID_LEN || (*ep == EP_TOOL && strncmp(sub, "/tools/", 7) != 0))
		return *status = 404, respond_error(c, 404, "not_found", "no such endpoint", NULL);
	snprintf(id, sizeof id, "%.*s", (int)k, rest);
	if (*ep == EP_SESSION_CLOSE) {
		if (strcmp(method, "DELETE") != 0)
			return *status = 405, respond_error(c, 405, "method", "DELETE only", "DELETE");
		if (session_close(&S->sessions, id))
			return *status = 404, respond_error(c, 404, "not_found", "no such session",
							   NULL);
		*status = 200;
		return respond_json(c, 200, json_pack("{s:s, s:b}", "session_id", id, "closed", 1),
				    NULL);
	}
	if (strcmp(method, "POST") != 0)
		return *status = 405, respond_error(c, 405, "method", "POST only", "POST");
	if (!(s = session_get(&S->sessions, id)))
		return *status = 404, respond_error(c, 404, "not_found",
						   "no such session (closed, or idle too long)", NULL);
	if (*ep == EP_FINALIZE) {
		ans = session_finalize(&S->sessions, s);
		*status = 200;
	} else {
		json_error_t je;
		json_t *args = cc->body.len ? json_loadb(cc->body.p, cc->body.len,
							 JSON_REJECT_DUPLICATES, &je)
					    : json_object();
		if (cc->too_big)
			*status = 413, ca_fail(&d, CA_ERR_LIMIT, "the body is larger than 16 MiB");
		else if (!json_is_object(args))
			*status = 400, ca_fail(&d, CA_ERR_INVALID, "the tool's arguments must be a "
								  "JSON object%s%s",
					       args ? "" : ": ", args ? "" : je.text);
		else if ((ans = session_tool(&S->sessions, s, sub + 7, args, status, &d)))
			*status = 200;
		json_decref(args);
	}
	session_put(&S->sessions, s);
	if (!ans)
		return respond_error(c, *status,
				     *status == 404 ? "unknown_tool" : *status == 413 ? "too_large"
				     : *status == 400 ? "bad_arguments" : "internal",
				     d.msg, NULL);
	if (*ep == EP_FINALIZE)
		ans = json_pack("{s:o, s:O?}", "result", ans, "reward",
				json_object_get(ans, "reward"));
	return respond_json(c, 200, ans, NULL);
}

/* ---- routing ----------------------------------------------------------------------------------- */

static bool authorized(const struct serve *S, struct MHD_Connection *c)
{
	const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
	size_t n = strlen(S->token), m;
	unsigned diff = 0;
	if (!S->token[0])
		return true;
	if (!h || strncmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	m = strlen(h);
	for (size_t i = 0; i < n; i++) /* the same time whatever matches */
		diff |= (unsigned)(i < m ? h[i] : 0) ^ (unsigned)S->token[i];
	return diff == 0 && m == n;
}

static enum MHD_Result route(struct serve *S, struct MHD_Connection *c, const char *url,
			     const char *method, struct conn *cc, enum serve_endpoint *ep,
			     unsigned *status)
{
	bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
	size_t queued, running, done;

	*ep = EP_OTHER;
	if (strcmp(url, "/v1/health") == 0) {
		*ep = EP_HEALTH;
		if (!get)
			return *status = 405, respond_error(c, 405, "method", "GET only", "GET");
		job_queue_counts(&S->q, &queued, &running, &done);
		*status = 200;
		return respond_json(c, 200,
				    json_pack("{s:s, s:i, s:I, s:I, s:s}", "status", "ok", "workers",
					      S->pool.nslots, "queued", (json_int_t)queued, "running",
					      (json_int_t)running, "queue",
					      S->o->redis ? "redis" : "embedded"),
				    NULL);
	}
	if (strcmp(url, "/health") == 0) { /* OpenEnv's, open like ours */
		*ep = EP_OPENENV;
		return openenv(S, c, url, get, post, cc, status);
	}
	if (!authorized(S, c))
		return *status = 401, respond_error(c, 401, "unauthorized",
						   "a bearer token is required "
						   "(Authorization: Bearer ...)",
						   NULL);
	if (strcmp(url, "/metrics") == 0) {
		*ep = EP_METRICS;
		if (!get)
			return *status = 405, respond_error(c, 405, "method", "GET only", "GET");
		struct serve_gpu_load gpus[SERVE_MAX_WORKERS];
		size_t ngpus = serve_pool_gpus(&S->pool, gpus, SERVE_MAX_WORKERS);
		job_queue_counts(&S->q, &queued, &running, &done);
		*status = 200;
		return respond(c, 200, "text/plain; version=0.0.4",
			       serve_metrics_render(&S->m, queued, running, (size_t)S->pool.nslots,
						    gpus, ngpus),
			       NULL);
	}
	if (strcmp(url, "/v1/openapi.json") == 0) {
		*ep = EP_OPENAPI;
		if (!get)
			return *status = 405, respond_error(c, 405, "method", "GET only", "GET");
		*status = 200;
		return respond(c, 200, "application/json", strdup(serve_openapi_json), NULL);
	}
	if (strcmp(url, "/ws") == 0) {
		*ep = EP_OPENENV;
		if (!get)
			return *status = 405, respond_error(c, 405, "method", "GET only", "GET");
		return openenv_ws_upgrade(S, c, status);
	}
	if (strcmp(url, "/reset") == 0 || strcmp(url, "/step") == 0 || strcmp(url, "/state") == 0 ||
	    strcmp(url, "/schema") == 0 || strcmp(url, "/health") == 0) {
		*ep = EP_OPENENV;
		return openenv(S, c, url, get, post, cc, status);
	}
	if (strcmp(url, "/v1/sessions") == 0) {
		*ep = EP_SESSION_NEW;
		if (!post)
			return *status = 405, respond_error(c, 405, "method", "POST only", "POST");
		return session_new(S, c, cc, status);
	}
	if (strncmp(url, "/v1/sessions/", 13) == 0)
		return session_route(S, c, url + 13, method, cc, ep, status);
	if (strcmp(url, "/v1/evaluate") == 0) {
		*ep = EP_EVALUATE;
		if (!post)
			return *status = 405, respond_error(c, 405, "method", "POST only", "POST");
		return evaluate(S, c, cc, status);
	}
	*status = 404;
	return respond_error(c, 404, "not_found", "no such endpoint (see /v1/openapi.json)", NULL);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_size, void **con_cls)
{
	struct serve *S = cls;
	struct conn *cc = *con_cls;
	double t0;
	enum serve_endpoint ep;
	unsigned status = 500;
	enum MHD_Result ok;
	(void)version;

	if (!cc) {
		if (!(cc = calloc(1, sizeof *cc)))
			return MHD_NO;
		cc->body.max = SERVE_MAX_BODY;
		*con_cls = cc;
		return MHD_YES;
	}
	if (*upload_size) {
		if (cc->body.len + *upload_size > SERVE_MAX_BODY)
			cc->too_big = true;
		else
			ca_buf_add(&cc->body, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	t0 = ca_now();
	pthread_mutex_lock(&S->mu);
	S->in_flight++;
	pthread_mutex_unlock(&S->mu);
	ok = route(S, c, url, method, cc, &ep, &status);
	serve_metrics_request(&S->m, ep, status, ca_now() - t0);
	pthread_mutex_lock(&S->mu);
	S->in_flight--;
	pthread_mutex_unlock(&S->mu);
	return ok;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode why)
{
	struct conn *cc = *con_cls;
	(void)cls;
	(void)c;
	(void)why;
	if (cc) {
		ca_buf_free(&cc->body);
		free(cc);
	}
	*con_cls = NULL;
}

/* ---- the service ------------------------------------------------------------------------------- */

static int parse_listen(const char *s, struct sockaddr_in *sa, struct ca_diag *d)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	char *end;
	long port;
	if (!colon || (size_t)(colon - s) >= sizeof host)
		return ca_fail(d, CA_ERR_INVALID, "--listen \"%s\": expected ADDR:PORT", s);
	snprintf(host, sizeof host, "%.*s", (int)(colon - s), s);
	port = strtol(colon + 1, &end, 10);
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	if (*end || port < 0 || port > 65535 || inet_pton(AF_INET, host, &sa->sin_addr) != 1)
		return ca_fail(d, CA_ERR_INVALID, "--listen \"%s\": expected an IPv4 ADDR:PORT", s);
	sa->sin_port = htons((uint16_t)port);
	return 0;
}

/* STATE (--state, else <cache>/serve) with jobs/ and logs/. */
static int make_state(struct serve *S, char *state, char *logs, struct ca_diag *d)
{
	int rc;
	if (S->o->state_dir)
		rc = ca_strlcpy(state, S->o->state_dir, PATH_MAX) ? CA_ERR_LIMIT : 0;
	else if (!(rc = ca_cache_dir(state, PATH_MAX, d)))
		rc = ca_path_join(state, PATH_MAX, state, "serve") ? CA_ERR_LIMIT : 0;
	if (rc || ca_format(S->jobs_dir, sizeof S->jobs_dir, "%s/jobs", state) ||
	    ca_format(logs, PATH_MAX, "%s/logs", state))
		return rc ? rc : ca_fail(d, CA_ERR_LIMIT, "state path too long");
	/* jobs/ can be crossed but not listed: the sandboxed candidates read their own job's files
	 * (random names), not the others'. */
	if ((rc = ca_mkdirs(S->jobs_dir, 0711, d)) || (rc = ca_mkdirs(logs, 0700, d)))
		return rc;
	if (chmod(S->jobs_dir, 0711) != 0 || chmod(state, 0711) != 0)
		return ca_fail(d, CA_ERR_IO, "chmod %s: %s", S->jobs_dir, strerror(errno));
	return 0;
}

/* The jobs a run that ended left (jobstore.h): queued again, and every job directory no queued
 * job names removed. */
static int restore_jobs(struct serve *S, const char *state, struct ca_diag *d)
{
	char path[PATH_MAX];
	size_t requeued = 0;
	DIR *dir;
	struct dirent *e;
	int rc;
	if (ca_format(path, sizeof path, "%s/jobs.sqlite", state))
		return ca_fail(d, CA_ERR_LIMIT, "state path too long");
	if ((rc = job_store_open(&S->store, path, d)) ||
	    (rc = job_queue_restore(&S->q, &S->store, &requeued, d)))
		return rc;
	if (requeued)
		ca_log_info("serve: %zu job%s of the last run queued again", requeued,
			    requeued == 1 ? "" : "s");
	if (!(dir = opendir(S->jobs_dir)))
		return 0;
	while ((e = readdir(dir))) {
		bool wanted = false;
		if (e->d_name[0] == '.')
			continue;
		if (ca_format(path, sizeof path, "%s/%s", S->jobs_dir, e->d_name))
			continue;
		pthread_mutex_lock(&S->q.mu);
		for (size_t i = 0; i < S->q.nindex && !wanted; i++) {
			const char *jd = json_string_value(json_object_get(S->q.index[i]->spec,
									  "job_dir"));
			wanted = S->q.index[i]->state != JOB_DONE && jd && strcmp(jd, path) == 0;
		}
		pthread_mutex_unlock(&S->q.mu);
		if (!wanted)
			ca_remove_tree(path, NULL);
	}
	closedir(dir);
	return 0;
}

/* Where the jobs run: worker processes here (serve/workers.h), or the fleet's nodes through
 * Redis (serve/fleet.h). */
static int start_workers(struct serve *S, const char *logs, struct ca_diag *d)
{
	const struct serve_opts *o = S->o;
	if (o->redis) {
		int rc = fleet_server_start(&S->fleet, &S->q, &S->m, o->redis, d);
		S->fleet_started = rc == 0;
		return rc;
	}
	return serve_pool_start_auto(&S->pool, &S->q, &S->m, o->workers, o->gpus,
				     o->gpu_slots > 0 ? o->gpu_slots : SERVE_GPU_SLOTS_DEFAULT, o->python, o->device, logs,
				     d);
}

static void stop_workers(struct serve *S)
{
	if (S->fleet_started)
		fleet_server_stop(&S->fleet);
	S->fleet_started = false;
	serve_pool_stop(&S->pool);
}

int serve_run(const struct serve_opts *o, struct ca_diag *d)
{
	struct serve *S = calloc(1, sizeof *S);
	struct MHD_Daemon *mhd = NULL;
	struct sockaddr_in sa;
	char state[PATH_MAX], logs[PATH_MAX];
	const char *token = getenv("CUDA_AGENT_SERVE_TOKEN");
	sigset_t sigs;
	int sig = 0, rc;

	if (!S)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	S->o = o;
	pthread_mutex_init(&S->mu, NULL);
	if ((rc = parse_listen(o->listen, &sa, d)))
		goto out_free;
	if (token && strlen(token) >= sizeof S->token) {
		rc = ca_fail(d, CA_ERR_INVALID, "CUDA_AGENT_SERVE_TOKEN is too long");
		goto out_free;
	}
	ca_strlcpy(S->token, token ? token : "", sizeof S->token);
	if ((rc = make_state(S, state, logs, d)))
		goto out_free;
	/* Only this thread takes the signals that end the service. */
	ca_block_stop_signals(&sigs);
	serve_metrics_init(&S->m);
	if ((rc = job_queue_init(&S->q, o->max_queue, o->keep_done, d)))
		goto out_metrics;
	if ((rc = restore_jobs(S, state, d)))
		goto out_queue;
	if ((rc = start_workers(S, logs, d)))
		goto out_pool;
	{
		char sess[PATH_MAX];
		if (ca_format(sess, sizeof sess, "%s/sessions", state)) {
			rc = ca_fail(d, CA_ERR_LIMIT, "state path too long");
			goto out_pool;
		}
		if ((rc = session_table_init(&S->sessions, sess, o->max_sessions, o->session_idle_s,
					     &S->q, d)))
			goto out_pool;
	}
	mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
				       MHD_USE_ITC | MHD_USE_ERROR_LOG | MHD_ALLOW_UPGRADE,
			       0, NULL, NULL, on_request, S, MHD_OPTION_SOCK_ADDR, &sa,
			       MHD_OPTION_NOTIFY_COMPLETED, on_completed, S,
			       MHD_OPTION_CONNECTION_LIMIT, 2048u, MHD_OPTION_CONNECTION_TIMEOUT,
			       120u, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256u << 10),
			       MHD_OPTION_END);
	if (!mhd) {
		rc = ca_fail(d, CA_ERR_IO, "cannot listen on %s (in use, or not an address here)",
			     o->listen);
		goto out_pool;
	}
	{
		const union MHD_DaemonInfo *info = MHD_get_daemon_info(mhd,
								       MHD_DAEMON_INFO_BIND_PORT);
		unsigned port = info ? info->port : ntohs(sa.sin_port);
		char host[INET_ADDRSTRLEN] = "";
		inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
		if (o->redis)
			ca_log_info("serve: listening on http://%s:%u, jobs through Redis (%s); "
				    "state in %s",
				    host, port, o->redis, state);
		else
			ca_log_info("serve: listening on http://%s:%u with %d worker%s (state in %s)",
				    host, port, S->pool.nslots, S->pool.nslots == 1 ? "" : "s",
				    state);
		if (o->port_file) {
			char text[16];
			snprintf(text, sizeof text, "%u\n", port);
			if ((rc = ca_write_file_atomic(o->port_file, text, strlen(text), d)))
				goto out_mhd;
		}
	}
	sigwait(&sigs, &sig);
	ca_log_info("serve: %s: finishing the queued jobs, then stopping",
		    sig == SIGINT ? "SIGINT" : "SIGTERM");
out_mhd:
	{ /* no new connections; those open get their answers */
		MHD_socket ls = MHD_quiesce_daemon(mhd);
		if (ls != MHD_INVALID_SOCKET)
			close(ls);
	}
	pthread_mutex_lock(&S->mu);
	S->stopping = true; /* WebSocket connections close after their current message */
	pthread_mutex_unlock(&S->mu);
	job_queue_close(&S->q);
	stop_workers(S);
	for (int i = 0; i < 1000; i++) { /* the last handlers answer (503 once closed) */
		pthread_mutex_lock(&S->mu);
		int busy = S->in_flight + S->ws_open;
		pthread_mutex_unlock(&S->mu);
		if (!busy)
			break;
		struct timespec ts = {0, 10000000L};
		nanosleep(&ts, NULL);
	}
	MHD_stop_daemon(mhd);
	session_table_destroy(&S->sessions);
	goto out_queue;
out_pool:
	job_queue_close(&S->q);
	stop_workers(S);
	session_table_destroy(&S->sessions);
out_queue:
	job_queue_destroy(&S->q);
	job_store_close(&S->store);
out_metrics:
	serve_metrics_destroy(&S->m);
out_free:
	pthread_mutex_destroy(&S->mu);
	free(S);
	return rc;
}
