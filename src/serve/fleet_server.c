/* fleet_server: the HTTP server's side of the Redis scale-out (fleet.h): a forwarder that sends
 * the queue's jobs to ca:jobs, and a listener that answers them from ca:result:KEY. */
#include "serve/fleet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

#define FLEET_KEY_MAX (SERVE_KEY_MAX + 40)
#define LISTEN_BLOCK_MS "200"
#define MGET_CHUNK 256

struct fleet_flight {
	struct job *j;
	char key[FLEET_KEY_MAX]; /* "k:<idempotency key>" or "j:<job id>" */
	char dir[PATH_MAX];      /* a workspace job's directory here, "" otherwise */
};

static void nap(double s)
{
	struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
	nanosleep(&ts, NULL);
}

double fleet_wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The job as it travels: its kind and options, its files inline, its deadline on the wall
 * clock (the nodes' clocks are assumed to agree to within seconds, as NTP keeps them). */
static int payload_of(const struct job *j, char **text, struct ca_diag *d)
{
	json_t *p = json_object(), *packed;
	const char *task = json_string_value(json_object_get(j->spec, "task_dir"));
	const char *cand = json_string_value(json_object_get(j->spec, "candidate"));
	static const char *const plain[] = {"kind", "format", "rules", "mode"};
	int rc = 0;
	for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
		json_t *v = json_object_get(j->spec, plain[i]);
		if (json_is_string(v))
			json_object_set(p, plain[i], v);
	}
	json_object_set_new(p, "deadline_unix", json_real(fleet_wall_now() + (j->deadline - ca_now())));
	json_object_set_new(p, "job", json_string(j->id));
	if (task && !(rc = fleet_pack_path(task, &packed, d)))
		json_object_set_new(p, "task", packed);
	if (!rc && cand && !(rc = fleet_pack_path(cand, &packed, d)))
		json_object_set_new(p, "candidate", packed);
	if (!rc && !(*text = json_dumps(p, JSON_COMPACT)))
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
	json_decref(p);
	return rc;
}

static void finish(struct fleet_server *f, struct job *j, json_t *res)
{
	serve_metrics_result(f->m, res, ca_now() - j->submitted);
	job_queue_finish(f->q, j, res);
	job_queue_release(f->q, j);
}

static int add_flight(struct fleet_server *f, struct job *j, const char *key)
{
	const char *dir = json_string_value(json_object_get(j->spec, "dir"));
	struct fleet_flight *fl;
	pthread_mutex_lock(&f->mu);
	fl = realloc(f->flights, (f->nflights + 1) * sizeof *fl);
	if (fl) {
		f->flights = fl;
		fl = &f->flights[f->nflights++];
		fl->j = j;
		ca_strlcpy(fl->key, key, sizeof fl->key);
		ca_strlcpy(fl->dir, dir ? dir : "", sizeof fl->dir);
	}
	pthread_mutex_unlock(&f->mu);
	return fl ? 0 : -1;
}

/* Sends one job (or joins the one its key already names); 0 once it is sent or answered. */
static int forward(struct fleet_server *f, struct redis_conn *r, struct job *j, const char *key,
		   const char *text, struct ca_diag *d)
{
	char rkey[FLEET_KEY_MAX + 16], ckey[FLEET_KEY_MAX + 16], ttl[16];
	redisReply *rep;
	int rc;
	snprintf(rkey, sizeof rkey, "ca:result:%s", key);
	snprintf(ckey, sizeof ckey, "ca:job:%s", key);
	snprintf(ttl, sizeof ttl, "%d", FLEET_TTL_S);
	rep = redis_cmd(r, (const char *[]){"GET", rkey, NULL}, NULL, 0, &rc, d);
	if (!rep)
		return rc;
	if (rep->type == REDIS_REPLY_STRING) { /* answered already (another replica's job) */
		json_t *res = json_loadb(rep->str, rep->len, 0, NULL);
		freeReplyObject(rep);
		finish(f, j, res ? res : serve_env_result("internal", "a stored answer is garbled"));
		return 0;
	}
	freeReplyObject(rep);
	rep = redis_cmd(r, (const char *[]){"SET", ckey, f->instance, "NX", "EX", ttl, NULL}, NULL,
			0, &rc, d);
	if (!rep)
		return rc;
	bool mine = rep->type == REDIS_REPLY_STATUS;
	freeReplyObject(rep);
	/* Not mine: sent by another replica (or before a restart); its answer will come. */
	if (mine && (rc = redis_do(r, (const char *[]){"XADD", FLEET_STREAM, "*", "key", key,
							"job", text, NULL},
				   NULL, d))) {
		/* Not queued: the claim goes, so that the next try (ours or a replica's) sends it. */
		struct ca_diag dd = {{0}};
		(void)redis_do(r, (const char *[]){"DEL", ckey, NULL}, NULL, &dd);
		return rc;
	}
	if (add_flight(f, j, key))
		finish(f, j, serve_env_result("internal", "out of memory"));
	return 0;
}

static void *forwarder_main(void *arg)
{
	struct fleet_server *f = arg;
	struct redis_conn r = {0};
	struct ca_diag d = {{0}};
	struct job *j;
	if (redis_url_parse(f->url, &r.url, &d) == 0)
		r.timeout_s = 5.0;
	while ((j = job_queue_take(f->q))) {
		char key[FLEET_KEY_MAX], *text = NULL;
		const char *dir = json_string_value(json_object_get(j->spec, "job_dir"));
		snprintf(key, sizeof key, "%s:%s", j->key[0] ? "k" : "j", j->key[0] ? j->key : j->id);
		memset(&d, 0, sizeof d);
		if (payload_of(j, &text, &d)) {
			char msg[CA_DIAG_MAX + 64];
			snprintf(msg, sizeof msg, "cannot send the job to the fleet: %s", d.msg);
			finish(f, j, serve_env_result("internal", msg));
		} else {
			int rc;
			while ((rc = forward(f, &r, j, key, text, &d)) && ca_now() < j->deadline) {
				ca_log_warn("serve: Redis: %s; trying again", d.msg);
				nap(1.0);
			}
			if (rc)
				finish(f, j, serve_env_result("env.deadline",
							      "the request's deadline passed while "
							      "Redis could not be reached"));
		}
		free(text);
		if (dir)
			ca_remove_tree(dir, NULL); /* sent inline: nothing here runs from it */
	}
	redis_close(&r);
	pthread_mutex_lock(&f->mu);
	f->forwarding_done = true;
	pthread_mutex_unlock(&f->mu);
	return NULL;
}

/* A flight answered: its workspace's files written here, then the job finished. */
static void land(struct fleet_server *f, struct fleet_flight *fl, json_t *res)
{
	json_t *files = json_object_get(res, "files");
	if (fl->dir[0] && files) {
		struct ca_diag d = {{0}};
		char written[PATH_MAX];
		if (fleet_unpack_path(files, fl->dir, written, sizeof written, &d)) {
			json_decref(res);
			res = serve_env_result("internal", d.msg);
		} else {
			json_object_del(res, "files");
			json_object_set_new(res, "dir", json_string(fl->dir));
		}
	}
	finish(f, fl->j, res);
}

/* Looks up every flight's answer (MGET in chunks); lands those answered and those past their
 * deadline. */
static void sweep(struct fleet_server *f, struct redis_conn *r)
{
	struct fleet_flight *snap;
	size_t n;
	pthread_mutex_lock(&f->mu);
	n = f->nflights;
	snap = n ? malloc(n * sizeof *snap) : NULL;
	if (snap)
		memcpy(snap, f->flights, n * sizeof *snap);
	pthread_mutex_unlock(&f->mu);
	if (!snap)
		return;
	bool *gone = calloc(n, sizeof *gone);
	for (size_t at = 0; gone && at < n; at += MGET_CHUNK) {
		size_t k = n - at < MGET_CHUNK ? n - at : MGET_CHUNK;
		const char *argv[MGET_CHUNK + 2];
		char (*keys)[FLEET_KEY_MAX + 16] = malloc(k * sizeof *keys);
		struct ca_diag d = {{0}};
		redisReply *rep = NULL;
		int rc;
		if (!keys)
			break;
		argv[0] = "MGET";
		for (size_t i = 0; i < k; i++) {
			snprintf(keys[i], sizeof keys[i], "ca:result:%s", snap[at + i].key);
			argv[i + 1] = keys[i];
		}
		argv[k + 1] = NULL;
		rep = redis_cmd(r, argv, NULL, 0, &rc, &d);
		for (size_t i = 0; rep && rep->type == REDIS_REPLY_ARRAY && i < rep->elements && i < k;
		     i++) {
			redisReply *e = rep->element[i];
			if (e->type == REDIS_REPLY_STRING) {
				json_t *res = json_loadb(e->str, e->len, 0, NULL);
				land(f, &snap[at + i],
				     res ? res : serve_env_result("internal", "a stored answer is "
									       "garbled"));
				gone[at + i] = true;
			} else if (ca_now() > snap[at + i].j->deadline + SERVE_GRACE_S) {
				land(f, &snap[at + i],
				     serve_env_result("env.deadline", "the request's deadline passed "
								      "before a node answered it"));
				gone[at + i] = true;
			}
		}
		if (rep)
			freeReplyObject(rep);
		free(keys);
	}
	/* Drop the landed flights (new ones may have been added meanwhile, after n). */
	pthread_mutex_lock(&f->mu);
	size_t w = 0;
	for (size_t i = 0; i < f->nflights; i++) {
		bool drop = false;
		for (size_t s = 0; gone && s < n && !drop; s++)
			drop = gone[s] && snap[s].j == f->flights[i].j;
		if (!drop)
			f->flights[w++] = f->flights[i];
	}
	f->nflights = w;
	pthread_mutex_unlock(&f->mu);
	free(gone);
	free(snap);
}

static void *listener_main(void *arg)
{
	struct fleet_server *f = arg;
	struct redis_conn r = {0};
	struct ca_diag d = {{0}};
	char last[64] = "$";
	if (redis_url_parse(f->url, &r.url, &d) == 0)
		r.timeout_s = 5.0;
	for (;;) {
		redisReply *rep;
		int rc;
		pthread_mutex_lock(&f->mu);
		bool done = f->forwarding_done && f->nflights == 0;
		pthread_mutex_unlock(&f->mu);
		if (done)
			break;
		/* Woken by an announcement, or after LISTEN_BLOCK_MS; then every flight is looked
		 * up, so an announcement missed (a reconnect) costs only the wait. */
		rep = redis_cmd(&r, (const char *[]){"XREAD", "COUNT", "512", "BLOCK", LISTEN_BLOCK_MS,
						     "STREAMS", FLEET_DONE, last, NULL},
				NULL, 1.0, &rc, &d);
		if (!rep) {
			nap(0.5);
		} else {
			if (rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
			    rep->element[0]->elements == 2) {
				redisReply *entries = rep->element[0]->element[1];
				if (entries->elements > 0) {
					redisReply *lastent = entries->element[entries->elements - 1];
					if (lastent->elements >= 1 &&
					    lastent->element[0]->type == REDIS_REPLY_STRING)
						snprintf(last, sizeof last, "%.*s",
							 (int)lastent->element[0]->len,
							 lastent->element[0]->str);
				}
			}
			freeReplyObject(rep);
		}
		sweep(f, &r);
	}
	redis_close(&r);
	return NULL;
}

int fleet_server_start(struct fleet_server *f, struct job_queue *q, struct serve_metrics *m,
		       const char *url, struct ca_diag *d)
{
	struct redis_conn r;
	char host[64] = "host";
	int rc;
	memset(f, 0, sizeof *f);
	f->q = q;
	f->m = m;
	pthread_mutex_init(&f->mu, NULL);
	if (ca_strlcpy(f->url, url, sizeof f->url))
		return ca_fail(d, CA_ERR_INVALID, "the Redis URL is too long");
	gethostname(host, sizeof host - 1);
	snprintf(f->instance, sizeof f->instance, "%.32s-%d", host, (int)getpid());
	if ((rc = redis_open(&r, url, 5.0, d)))
		return rc;
	rc = redis_do(&r, (const char *[]){"PING", NULL}, NULL, d);
	redis_close(&r);
	if (rc)
		return rc;
	if (pthread_create(&f->listener, NULL, listener_main, f) != 0)
		return ca_fail(d, CA_ERR_NOMEM, "cannot start the fleet listener");
	f->listener_started = true;
	if (pthread_create(&f->forwarder, NULL, forwarder_main, f) != 0)
		return ca_fail(d, CA_ERR_NOMEM, "cannot start the fleet forwarder");
	f->forwarder_started = true;
	return 0;
}

void fleet_server_stop(struct fleet_server *f)
{
	if (f->forwarder_started)
		pthread_join(f->forwarder, NULL);
	f->forwarder_started = false;
	pthread_mutex_lock(&f->mu);
	f->forwarding_done = true;
	pthread_mutex_unlock(&f->mu);
	if (f->listener_started)
		pthread_join(f->listener, NULL);
	f->listener_started = false;
	free(f->flights);
	f->flights = NULL;
	f->nflights = 0;
	pthread_mutex_destroy(&f->mu);
}
