/* fleet_node: `cuda-agent worker --redis URL`, a GPU node of the fleet (fleet.h). */
#include "serve/fleet.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/baseline_cache.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/str.h"

#define NODE_BLOCK_MS "1000"
#define SYNC_EVERY_S 2.0

struct node;

struct consumer {
	struct node *n;
	int index;
	char name[96];
	pthread_t thread;
	bool started;
};

struct node {
	const struct fleet_node_opts *o;
	struct job_queue q;
	struct serve_metrics m;
	struct serve_pool pool;
	char jobs_dir[PATH_MAX];
	struct consumer consumers[SERVE_MAX_WORKERS];
	int nconsumers;
	pthread_t syncer;
	bool syncer_started;
	pthread_mutex_t mu;
	pthread_cond_t wake;
	bool stopping, push_baselines;
	unsigned long long jobs, reclaimed;
};

void fleet_node_opts_defaults(struct fleet_node_opts *o)
{
	memset(o, 0, sizeof *o);
	o->reclaim_s = 60.0;
	o->device = "auto";
}

static bool stopping(struct node *n)
{
	pthread_mutex_lock(&n->mu);
	bool s = n->stopping;
	pthread_mutex_unlock(&n->mu);
	return s;
}

/* One stream entry: its id and its fields' values (borrowed from the reply). */
struct entry {
	const char *id, *key, *job;
	size_t job_len;
};

static bool entry_of(const redisReply *e, struct entry *out)
{
	memset(out, 0, sizeof *out);
	if (!e || e->type != REDIS_REPLY_ARRAY || e->elements != 2 ||
	    e->element[0]->type != REDIS_REPLY_STRING || e->element[1]->type != REDIS_REPLY_ARRAY)
		return false;
	out->id = e->element[0]->str;
	const redisReply *f = e->element[1];
	for (size_t i = 0; i + 1 < f->elements; i += 2) {
		const redisReply *k = f->element[i], *v = f->element[i + 1];
		if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
			continue;
		if (strcmp(k->str, "key") == 0)
			out->key = v->str;
		else if (strcmp(k->str, "job") == 0) {
			out->job = v->str;
			out->job_len = v->len;
		}
	}
	return out->key && out->job && strlen(out->key) < SERVE_KEY_MAX + 40;
}

/* Stores the answer (the first one wins), announces it, and lets the entry go. */
static void publish(struct redis_conn *r, const struct entry *e, const json_t *res)
{
	char rkey[SERVE_KEY_MAX + 64], ttl[16];
	struct ca_diag d = {{0}};
	char *text = json_dumps(res, JSON_COMPACT);
	snprintf(rkey, sizeof rkey, "ca:result:%s", e->key);
	snprintf(ttl, sizeof ttl, "%d", FLEET_TTL_S);
	for (int attempt = 0; text && attempt < 30; attempt++) {
		if (redis_do(r, (const char *[]){"SET", rkey, text, "NX", "EX", ttl, NULL}, NULL,
			     &d) == 0 &&
		    redis_do(r, (const char *[]){"XADD", FLEET_DONE, "MAXLEN", "~", "100000", "*",
						 "key", e->key, NULL},
			     NULL, &d) == 0 &&
		    redis_do(r, (const char *[]){"XACK", FLEET_STREAM, FLEET_GROUP, e->id, NULL},
			     NULL, &d) == 0 &&
		    redis_do(r, (const char *[]){"XDEL", FLEET_STREAM, e->id, NULL}, NULL, &d) == 0)
			break;
		/* Redis is away (a restart): the answer waits here; the entry stays pending
		 * and is ours until it is acknowledged. */
		ca_log_warn("worker: cannot store the answer of %s: %s; trying again", e->key, d.msg);
		sleep(1);
	}
	free(text);
}

/* How many times the entry was delivered (XPENDING), 0 when unknown. */
static long long deliveries(struct redis_conn *r, const char *id)
{
	struct ca_diag d = {{0}};
	int rc;
	long long n = 0;
	redisReply *rep = redis_cmd(r, (const char *[]){"XPENDING", FLEET_STREAM, FLEET_GROUP, id,
							id, "1", NULL},
				    NULL, 0, &rc, &d);
	if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
	    rep->element[0]->elements == 4 && rep->element[0]->element[3]->type == REDIS_REPLY_INTEGER)
		n = rep->element[0]->element[3]->integer;
	if (rep)
		freeReplyObject(rep);
	return n;
}

/* The job's spec here: its files written under dir. */
static int spec_of(const json_t *p, const char *dir, json_t **spec, struct ca_diag *d)
{
	char task[PATH_MAX], cand[PATH_MAX], where[PATH_MAX];
	const char *kind = json_string_value(json_object_get(p, "kind"));
	int rc = 0;
	*spec = json_object();
	if (json_object_get(p, "task")) {
		if (ca_format(where, sizeof where, "%s/task", dir) ||
		    (rc = fleet_unpack_path(json_object_get(p, "task"), where, task, sizeof task, d)))
			return rc ? rc : ca_fail(d, CA_ERR_LIMIT, "path too long");
		json_object_set_new(*spec, "task_dir", json_string(task));
	}
	if (json_object_get(p, "candidate")) {
		if (ca_format(where, sizeof where, "%s/candidate", dir) ||
		    (rc = fleet_unpack_path(json_object_get(p, "candidate"), where, cand, sizeof cand,
					    d)))
			return rc ? rc : ca_fail(d, CA_ERR_LIMIT, "path too long");
		json_object_set_new(*spec, "candidate", json_string(cand));
	}
	static const char *const plain[] = {"kind", "format", "rules", "mode"};
	for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
		json_t *v = json_object_get(p, plain[i]);
		if (json_is_string(v))
			json_object_set(*spec, plain[i], v);
	}
	if (kind && strcmp(kind, "workspace") == 0) {
		if (ca_format(where, sizeof where, "%s/ws", dir))
			return ca_fail(d, CA_ERR_LIMIT, "path too long");
		json_object_set_new(*spec, "dir", json_string(where));
	}
	return 0;
}

/* Runs the job on this node's workers, renewing the entry's claim while it runs. */
static json_t *run_here(struct node *n, struct consumer *c, struct redis_conn *r,
			const struct entry *e, const json_t *p, const char *dir)
{
	struct ca_diag d = {{0}};
	json_t *spec = NULL, *res = NULL;
	struct job *j = NULL;
	bool dup;
	double deadline = ca_now() + (json_number_value(json_object_get(p, "deadline_unix")) -
				      fleet_wall_now());
	const char *kind = json_string_value(json_object_get(p, "kind"));
	bool workspace = kind && strcmp(kind, "workspace") == 0;
	if (deadline <= ca_now())
		return serve_env_result("env.deadline", "the request's deadline passed before a "
							"node took it");
	if (spec_of(p, dir, &spec, &d)) {
		json_decref(spec);
		return serve_env_result("internal", d.msg);
	}
	if (job_queue_submit(&n->q, "", workspace ? JOB_PRIO_HIGH : JOB_PRIO_NORMAL, spec,
			     deadline, &j, &dup, &d))
		return serve_env_result("internal", d.msg);
	while (!res) {
		double renew = n->o->reclaim_s / 4.0;
		res = job_queue_wait(&n->q, j, ca_now() + (renew > 0.05 ? renew : 0.05));
		if (!res) /* still ours: its idle time starts again (XCLAIM ... JUSTID) */
			(void)redis_do(r, (const char *[]){"XCLAIM", FLEET_STREAM, FLEET_GROUP,
							   c->name, "0", e->id, "JUSTID", NULL},
				       NULL, &d);
	}
	job_queue_release(&n->q, j);
	if (workspace && json_object_get(res, "dir")) {
		json_t *copy = json_deep_copy(res), *files = NULL;
		json_decref(res);
		res = copy;
		if (fleet_pack_path(json_string_value(json_object_get(res, "dir")), &files, &d) == 0)
			json_object_set_new(res, "files", files);
		else
			res = (json_decref(res), serve_env_result("internal", d.msg));
	}
	return res;
}

static void handle(struct node *n, struct consumer *c, struct redis_conn *r,
		   const struct entry *e)
{
	char rkey[SERVE_KEY_MAX + 64], dir[PATH_MAX];
	struct ca_diag d = {{0}};
	redisReply *rep;
	json_t *p, *res;
	long long times;
	int rc;

	snprintf(rkey, sizeof rkey, "ca:result:%s", e->key);
	rep = redis_cmd(r, (const char *[]){"EXISTS", rkey, NULL}, NULL, 0, &rc, &d);
	bool answered = rep && rep->type == REDIS_REPLY_INTEGER && rep->integer > 0;
	if (rep)
		freeReplyObject(rep);
	if (answered) { /* a copy of an answered job (a reclaim, a resend): only let it go */
		(void)redis_do(r, (const char *[]){"XACK", FLEET_STREAM, FLEET_GROUP, e->id, NULL},
			       NULL, &d);
		(void)redis_do(r, (const char *[]){"XDEL", FLEET_STREAM, e->id, NULL}, NULL, &d);
		return;
	}
	if ((times = deliveries(r, e->id)) > 2) {
		char msg[160];
		snprintf(msg, sizeof msg, "the job was given to a node %lld times and none answered "
					  "(each died or lost Redis while running it)",
			 times - 1);
		res = serve_env_result("env.worker_died", msg);
		publish(r, e, res);
		json_decref(res);
		return;
	}
	p = json_loadb(e->job, e->job_len, 0, NULL);
	unsigned char rnd[8];
	FILE *ur = fopen("/dev/urandom", "rb");
	bool got = ur && fread(rnd, 1, sizeof rnd, ur) == sizeof rnd;
	if (ur)
		fclose(ur);
	if (!json_is_object(p) || !got ||
	    ca_format(dir, sizeof dir, "%s/%02x%02x%02x%02x%02x%02x%02x%02x", n->jobs_dir, rnd[0],
		      rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]) ||
	    mkdir(dir, 0711) != 0) {
		res = serve_env_result("internal", json_is_object(p) ? "cannot make a job directory"
								       : "a malformed job");
	} else {
		res = run_here(n, c, r, e, p, dir);
		ca_remove_tree(dir, NULL);
	}
	json_decref(p);
	publish(r, e, res);
	if (json_is_false(json_object_get(json_object_get(res, "timing"), "baselines_cached"))) {
		pthread_mutex_lock(&n->mu);
		n->push_baselines = true; /* measured here: the fleet gets them */
		pthread_cond_signal(&n->wake);
		pthread_mutex_unlock(&n->mu);
	}
	json_decref(res);
	pthread_mutex_lock(&n->mu);
	n->jobs++;
	pthread_mutex_unlock(&n->mu);
}

static void *consumer_main(void *arg)
{
	struct consumer *c = arg;
	struct node *n = c->n;
	struct redis_conn r = {0};
	struct ca_diag d = {{0}};
	char idle_ms[32];
	snprintf(idle_ms, sizeof idle_ms, "%lld", (long long)(n->o->reclaim_s * 1000.0));
	if (redis_url_parse(n->o->redis_url, &r.url, &d) == 0)
		r.timeout_s = 5.0;
	while (!stopping(n)) {
		struct entry e;
		int rc;
		bool reclaimed = false;
		redisReply *rep = redis_cmd(&r, (const char *[]){"XREADGROUP", "GROUP", FLEET_GROUP,
							       c->name, "COUNT", "1", "BLOCK",
							       NODE_BLOCK_MS, "STREAMS", FLEET_STREAM,
							       ">", NULL},
					    NULL, 1.0, &rc, &d);
		const redisReply *got = NULL;
		if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1 &&
		    rep->element[0]->elements == 2 && rep->element[0]->element[1]->elements > 0)
			got = rep->element[0]->element[1]->element[0];
		if (!got && rep) {
			freeReplyObject(rep);
			/* Nothing new: an entry whose node stopped renewing it (it died)? */
			rep = redis_cmd(&r, (const char *[]){"XAUTOCLAIM", FLEET_STREAM, FLEET_GROUP,
							     c->name, idle_ms, "0-0", "COUNT", "1",
							     NULL},
					NULL, 0, &rc, &d);
			if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements >= 2 &&
			    rep->element[1]->type == REDIS_REPLY_ARRAY && rep->element[1]->elements > 0) {
				got = rep->element[1]->element[0];
				reclaimed = true;
			}
		}
		if (!rep) {
			if (rc == CA_ERR_PARSE && strstr(d.msg, "NOGROUP"))
				(void)redis_do(&r, (const char *[]){"XGROUP", "CREATE", FLEET_STREAM,
								    FLEET_GROUP, "0", "MKSTREAM",
								    NULL},
					       NULL, &d);
			else
				sleep(1); /* Redis is away: try again */
			continue;
		}
		if (got && entry_of(got, &e)) {
			if (reclaimed) {
				ca_log_info("worker: took over job %s (its node stopped renewing it)",
					    e.key);
				pthread_mutex_lock(&n->mu);
				n->reclaimed++;
				pthread_mutex_unlock(&n->mu);
			}
			handle(n, c, &r, &e);
		} else if (got && got->type == REDIS_REPLY_ARRAY && got->elements >= 1 &&
			   got->element[0]->type == REDIS_REPLY_STRING) { /* unreadable: dropped */
			(void)redis_do(&r, (const char *[]){"XACK", FLEET_STREAM, FLEET_GROUP,
							    got->element[0]->str, NULL},
				       NULL, &d);
		}
		freeReplyObject(rep);
	}
	redis_close(&r);
	return NULL;
}

/* ---- baselines: the fleet's one table ---------------------------------------------------------- */

struct seen {
	char **keys;
	size_t n, cap;
};

static bool seen_has(const struct seen *s, const char *k)
{
	for (size_t i = 0; i < s->n; i++)
		if (strcmp(s->keys[i], k) == 0)
			return true;
	return false;
}

static void seen_add(struct seen *s, const char *k)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		char **keys = realloc(s->keys, cap * sizeof *keys);
		if (!keys)
			return;
		s->keys = keys;
		s->cap = cap;
	}
	if ((s->keys[s->n] = strdup(k)))
		s->n++;
}

/* An exported line's key, "" when the line is not an entry. */
static void line_key(const char *line, size_t len, char *key, size_t size)
{
	struct baseline_entry e;
	struct ca_diag d = {{0}};
	json_t *o = json_loadb(line, len, 0, NULL);
	key[0] = '\0';
	if (o && baseline_entry_from_json(o, &e, &d) == 0)
		snprintf(key, size, "%s|%s|%s|%d", e.task_hash, e.gpu_name, e.torch_version,
			 e.protocol_version);
	json_decref(o);
}

/* Imports the stream's entries not seen yet (the first of each key wins) into this node's
 * cache. */
static void pull(struct node *n, struct redis_conn *r, struct seen *s, char *last, size_t size)
{
	struct ca_diag d = {{0}};
	int rc;
	for (int round = 0; round < 100; round++) {
		redisReply *rep = redis_cmd(r, (const char *[]){"XREAD", "COUNT", "500", "STREAMS",
							      FLEET_BASELINES, last, NULL},
					    NULL, 0, &rc, &d);
		char path[PATH_MAX];
		FILE *batch = NULL;
		size_t added = 0, skipped = 0, lines = 0;
		if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 1) {
			if (rep)
				freeReplyObject(rep);
			return;
		}
		redisReply *entries = rep->element[0]->element[1];
		if (ca_format(path, sizeof path, "%s/baselines-%d.jsonl", n->jobs_dir, (int)getpid()) ==
		    0)
			batch = fopen(path, "w");
		for (size_t i = 0; batch && i < entries->elements; i++) {
			redisReply *e = entries->element[i];
			char key[4 * BASELINE_FIELD_MAX];
			snprintf(last, size, "%s", e->element[0]->str);
			for (size_t k = 0; k + 1 < e->element[1]->elements; k += 2) {
				redisReply *v = e->element[1]->element[k + 1];
				if (strcmp(e->element[1]->element[k]->str, "line") != 0)
					continue;
				line_key(v->str, v->len, key, sizeof key);
				if (!key[0] || seen_has(s, key))
					continue;
				seen_add(s, key);
				fprintf(batch, "%.*s\n", (int)v->len, v->str);
				lines++;
			}
		}
		bool more = entries->elements == 500;
		freeReplyObject(rep);
		if (batch) {
			fclose(batch);
			struct baseline_cache c;
			if (lines && baseline_cache_open(&c, NULL, &d) == 0) {
				if (baseline_cache_import(&c, path, true, &added, &skipped, &d))
					ca_log_warn("worker: fleet baselines: %s", d.msg);
				else
					ca_log_info("worker: %zu baseline%s from the fleet", added,
						    added == 1 ? "" : "s");
				baseline_cache_close(&c);
			}
			unlink(path);
		}
		if (!more)
			return;
	}
}

/* Adds this node's entries the fleet has not seen to the stream. */
static void push(struct redis_conn *r, struct seen *s)
{
	struct baseline_cache c;
	struct ca_diag d = {{0}};
	char *buf = NULL;
	size_t len = 0, count = 0;
	FILE *mem;
	if (baseline_cache_open(&c, NULL, &d))
		return;
	mem = open_memstream(&buf, &len);
	if (mem) {
		(void)baseline_cache_export(&c, mem, &count, &d);
		fclose(mem);
	}
	baseline_cache_close(&c);
	for (char *line = buf; line && *line;) {
		char *eol = strchr(line, '\n'), key[4 * BASELINE_FIELD_MAX];
		size_t ll = eol ? (size_t)(eol - line) : strlen(line);
		line_key(line, ll, key, sizeof key);
		if (key[0] && !seen_has(s, key)) {
			size_t lens[] = {4, strlen(FLEET_BASELINES), 1, 4, ll};
			const char *argv[] = {"XADD", FLEET_BASELINES, "*", "line", line, NULL};
			if (redis_do(r, argv, lens, &d))
				break;
		}
		line = eol ? eol + 1 : NULL;
	}
	free(buf);
}

static void *syncer_main(void *arg)
{
	struct node *n = arg;
	struct redis_conn r = {0};
	struct ca_diag d = {{0}};
	struct seen s = {0};
	char last[64] = "0-0";
	bool first = true;
	if (redis_url_parse(n->o->redis_url, &r.url, &d) == 0)
		r.timeout_s = 5.0;
	for (;;) {
		bool do_push;
		pull(n, &r, &s, last, sizeof last);
		pthread_mutex_lock(&n->mu);
		do_push = n->push_baselines || first;
		n->push_baselines = false;
		pthread_mutex_unlock(&n->mu);
		if (do_push) {
			push(&r, &s);
			pull(n, &r, &s, last, sizeof last);
		}
		first = false;
		pthread_mutex_lock(&n->mu);
		if (!n->stopping && !n->push_baselines) {
			struct timespec ts;
			ca_timespec_after(CLOCK_MONOTONIC, SYNC_EVERY_S, &ts);
			pthread_cond_timedwait(&n->wake, &n->mu, &ts);
		}
		bool stop = n->stopping;
		pthread_mutex_unlock(&n->mu);
		if (stop)
			break;
	}
	for (size_t i = 0; i < s.n; i++)
		free(s.keys[i]);
	free(s.keys);
	redis_close(&r);
	return NULL;
}

/* ---- the node ---------------------------------------------------------------------------------- */

static int node_dirs(struct node *n, char *logs, size_t size, struct ca_diag *d)
{
	char state[PATH_MAX];
	int rc;
	if (n->o->state_dir)
		rc = ca_strlcpy(state, n->o->state_dir, sizeof state) ? CA_ERR_LIMIT : 0;
	else if (!(rc = ca_cache_dir(state, sizeof state, d)))
		rc = ca_path_join(state, sizeof state, state, "worker") ? CA_ERR_LIMIT : 0;
	if (rc || ca_format(n->jobs_dir, sizeof n->jobs_dir, "%s/jobs", state) ||
	    ca_format(logs, size, "%s/logs", state))
		return rc == CA_ERR_LIMIT || !rc ? ca_fail(d, CA_ERR_LIMIT, "state path too long") : rc;
	if ((rc = ca_mkdirs(n->jobs_dir, 0711, d)) || (rc = ca_mkdirs(logs, 0700, d)))
		return rc;
	if (chmod(n->jobs_dir, 0711) != 0 || chmod(state, 0711) != 0)
		return ca_fail(d, CA_ERR_IO, "chmod %s: cannot set its mode", n->jobs_dir);
	return 0;
}

int fleet_node_run(const struct fleet_node_opts *o, struct ca_diag *d)
{
	struct node *n = calloc(1, sizeof *n);
	struct redis_conn r;
	char logs[PATH_MAX], host[64] = "node";
	sigset_t sigs;
	int sig = 0, rc;

	if (!n)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	n->o = o;
	pthread_mutex_init(&n->mu, NULL);
	pthread_cond_init(&n->wake, NULL);
	ca_block_stop_signals(&sigs);
	serve_metrics_init(&n->m);
	if ((rc = node_dirs(n, logs, sizeof logs, d)) || (rc = redis_open(&r, o->redis_url, 5.0, d)))
		goto out;
	rc = redis_do(&r, (const char *[]){"XGROUP", "CREATE", FLEET_STREAM, FLEET_GROUP, "0",
					   "MKSTREAM", NULL},
		      NULL, d);
	redis_close(&r);
	if (rc && !strstr(d->msg, "BUSYGROUP"))
		goto out;
	memset(d, 0, sizeof *d);
	if ((rc = job_queue_init(&n->q, 4 * SERVE_MAX_WORKERS, 64, d)))
		goto out;
	if ((rc = serve_pool_start_auto(&n->pool, &n->q, &n->m, o->workers, o->gpus,
					o->gpu_slots > 0 ? o->gpu_slots : SERVE_GPU_SLOTS_DEFAULT, o->python, o->device,
					logs, d)))
		goto out_pool;
	gethostname(host, sizeof host - 1);
	n->nconsumers = n->pool.nslots;
	for (int i = 0; i < n->nconsumers; i++) {
		struct consumer *c = &n->consumers[i];
		c->n = n;
		c->index = i;
		if (o->consumer)
			snprintf(c->name, sizeof c->name, "%.64s-%d", o->consumer, i);
		else
			snprintf(c->name, sizeof c->name, "%.48s-%d-%d", host, (int)getpid(), i);
		if (pthread_create(&c->thread, NULL, consumer_main, c) != 0) {
			rc = ca_fail(d, CA_ERR_NOMEM, "cannot start consumer %d", i);
			goto out_consumers;
		}
		c->started = true;
	}
	if (pthread_create(&n->syncer, NULL, syncer_main, n) == 0)
		n->syncer_started = true;
	ca_log_info("worker: consuming %s (group %s) at %s with %d worker%s, reclaiming after "
		    "%.0f s",
		    FLEET_STREAM, FLEET_GROUP, o->redis_url, n->pool.nslots,
		    n->pool.nslots == 1 ? "" : "s", o->reclaim_s);
	sigwait(&sigs, &sig);
	ca_log_info("worker: %s: finishing the jobs it holds, then stopping",
		    sig == SIGINT ? "SIGINT" : "SIGTERM");
out_consumers:
	pthread_mutex_lock(&n->mu);
	n->stopping = true;
	pthread_cond_broadcast(&n->wake);
	pthread_mutex_unlock(&n->mu);
	for (int i = 0; i < n->nconsumers; i++)
		if (n->consumers[i].started)
			pthread_join(n->consumers[i].thread, NULL);
	if (n->syncer_started)
		pthread_join(n->syncer, NULL);
	ca_log_info("worker: %llu job%s answered, %llu taken over from other nodes", n->jobs,
		    n->jobs == 1 ? "" : "s", n->reclaimed);
out_pool:
	job_queue_close(&n->q);
	serve_pool_stop(&n->pool);
	job_queue_destroy(&n->q);
out:
	serve_metrics_destroy(&n->m);
	pthread_cond_destroy(&n->wake);
	pthread_mutex_destroy(&n->mu);
	free(n);
	return rc;
}
