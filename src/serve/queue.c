/* queue: the embedded job queue (queue.h). */
#include "serve/queue.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/str.h"

int job_queue_init(struct job_queue *q, size_t capacity, size_t keep_done, struct ca_diag *d)
{
	pthread_condattr_t ca;
	memset(q, 0, sizeof *q);
	q->capacity = capacity ? capacity : 1;
	q->keep_done = keep_done;
	q->index_cap = q->capacity + keep_done + 64;
	q->index = calloc(q->index_cap, sizeof *q->index);
	if (!q->index)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory for the job index");
	pthread_mutex_init(&q->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&q->work, &ca);
	pthread_cond_init(&q->done, &ca);
	pthread_condattr_destroy(&ca);
	q->seq = (unsigned long long)(ca_now() * 1e6);
	return 0;
}

static void job_free(struct job *j)
{
	json_decref(j->spec);
	json_decref(j->result);
	free(j);
}

static void unref_locked(struct job *j)
{
	if (--j->refs == 0)
		job_free(j);
}

void job_queue_destroy(struct job_queue *q)
{
	for (size_t i = 0; i < q->nindex; i++)
		unref_locked(q->index[i]);
	free(q->index);
	q->index = NULL;
	q->nindex = 0;
	pthread_cond_destroy(&q->work);
	pthread_cond_destroy(&q->done);
	pthread_mutex_destroy(&q->mu);
}

static void enqueue_locked(struct job_queue *q, struct job *j)
{
	if (q->tail[j->prio])
		q->tail[j->prio]->next = j;
	else
		q->head[j->prio] = j;
	q->tail[j->prio] = j;
	q->queued++;
}

/* The job in the store (before anyone can wait for it): 0 or CA_ERR_IO. */
static int keep_locked(struct job_queue *q, const struct job *j, struct ca_diag *d)
{
	char *spec = json_dumps(j->spec, JSON_COMPACT);
	struct job_row r = {.key = j->key, .id = j->id, .spec = spec, .prio = (int)j->prio,
			    .attempts = j->attempts,
			    .deadline = ca_wall_now() + (j->deadline - ca_now()),
			    .submitted = ca_wall_now()};
	int rc = spec ? job_store_put(q->store, &r, d) : ca_fail(d, CA_ERR_NOMEM, "out of memory");
	free(spec);
	return rc ? ca_fail(d, CA_ERR_IO, "the job cannot be kept: %s", d->msg) : 0;
}

static struct job *find_locked(struct job_queue *q, const char *key)
{
	for (size_t i = 0; key[0] && i < q->nindex; i++)
		if (strcmp(q->index[i]->key, key) == 0)
			return q->index[i];
	return NULL;
}

static void unindex_locked(struct job_queue *q, struct job *j)
{
	for (size_t i = 0; i < q->nindex; i++)
		if (q->index[i] == j) {
			q->index[i] = q->index[--q->nindex];
			unref_locked(j);
			return;
		}
}

int job_queue_submit(struct job_queue *q, const char *key, enum job_priority prio, json_t *spec,
		     double deadline, struct job **out, bool *dup, struct ca_diag *d)
{
	struct job *j;
	int rc = 0;
	*out = NULL;
	*dup = false;
	pthread_mutex_lock(&q->mu);
	if (q->closing) {
		rc = ca_fail(d, CA_ERR_INTERRUPTED, "the service is shutting down");
		goto out;
	}
	if (key && (j = find_locked(q, key))) {
		j->refs++;
		*out = j;
		*dup = true;
		goto out;
	}
	if (q->queued >= q->capacity || q->nindex >= q->index_cap) {
		rc = ca_fail(d, CA_ERR_LIMIT, "the queue is full (%zu jobs waiting)", q->queued);
		goto out;
	}
	if (!(j = calloc(1, sizeof *j))) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	snprintf(j->id, sizeof j->id, "j-%016llx", ++q->seq);
	ca_strlcpy(j->key, key ? key : "", sizeof j->key);
	j->prio = prio;
	j->spec = spec;
	spec = NULL;
	j->submitted = ca_now();
	j->deadline = deadline;
	j->refs = 2; /* the queue's, the caller's */
	if (j->key[0] && q->store && (rc = keep_locked(q, j, d))) {
		job_free(j);
		goto out;
	}
	enqueue_locked(q, j);
	q->index[q->nindex++] = j;
	*out = j;
	pthread_cond_signal(&q->work);
out:
	pthread_mutex_unlock(&q->mu);
	json_decref(spec);
	return rc;
}

struct job *job_queue_take(struct job_queue *q)
{
	struct job *j = NULL;
	pthread_mutex_lock(&q->mu);
	for (;;) {
		for (int p = 0; p < JOB_PRIO_COUNT && !j; p++) {
			if ((j = q->head[p])) {
				q->head[p] = j->next;
				if (!q->head[p])
					q->tail[p] = NULL;
				j->next = NULL;
			}
		}
		if (j || q->closing)
			break;
		pthread_cond_wait(&q->work, &q->mu);
	}
	if (j) {
		q->queued--;
		q->running++;
		j->state = JOB_RUNNING;
		j->attempts++;
		j->refs++;
	}
	pthread_mutex_unlock(&q->mu);
	return j;
}

static void done_locked(struct job_queue *q, struct job *j);

void job_queue_finish(struct job_queue *q, struct job *j, json_t *result)
{
	pthread_mutex_lock(&q->mu);
	if (j->state == JOB_DONE) {
		pthread_mutex_unlock(&q->mu);
		json_decref(result);
		return;
	}
	if (j->state == JOB_RUNNING)
		q->running--;
	j->state = JOB_DONE;
	j->result = result;
	if (j->key[0] && q->store) {
		struct ca_diag d = {{0}};
		char *text = json_dumps(result, JSON_COMPACT | JSON_ENCODE_ANY);
		if (!text || job_store_finish(q->store, j->key, text, j->attempts, &d) ||
		    (q->store->finished % 64 == 0 && job_store_prune(q->store, q->keep_done, &d)))
			ca_log_warn("serve: job %s's answer is not kept on disk: %s", j->id,
				    text ? d.msg : "out of memory");
		free(text);
	}
	done_locked(q, j);
	pthread_cond_broadcast(&q->done);
	pthread_mutex_unlock(&q->mu);
}

/* A finished job into the done list (for its key), the oldest forgotten beyond keep_done. */
static void done_locked(struct job_queue *q, struct job *j)
{
	if (j->key[0] && q->keep_done > 0) {
		if (q->done_tail)
			q->done_tail->done_next = j;
		else
			q->done_head = j;
		q->done_tail = j;
		q->ndone++;
		while (q->ndone > q->keep_done) { /* forget the oldest answers */
			struct job *old = q->done_head;
			q->done_head = old->done_next;
			if (!q->done_head)
				q->done_tail = NULL;
			q->ndone--;
			unindex_locked(q, old);
		}
	} else {
		unindex_locked(q, j); /* no key: nobody can ask for it again */
	}
}

struct restore {
	struct job_queue *q;
	size_t requeued;
	struct ca_diag *d;
};

static int restore_row(const struct job_row *r, void *ctx)
{
	struct restore *rs = ctx;
	struct job_queue *q = rs->q;
	struct job *j;
	json_t *spec = json_loads(r->spec, 0, NULL);
	json_t *result = r->result ? json_loads(r->result, JSON_DECODE_ANY, NULL) : NULL;
	if (!spec || (r->result && !result)) { /* a damaged row: skip it */
		json_decref(spec);
		json_decref(result);
		return 0;
	}
	if (q->nindex == q->index_cap) {
		struct job **bigger = realloc(q->index, 2 * q->index_cap * sizeof *bigger);
		if (!bigger) {
			json_decref(spec);
			json_decref(result);
			return ca_fail(rs->d, CA_ERR_NOMEM, "out of memory restoring jobs");
		}
		q->index = bigger;
		q->index_cap *= 2;
	}
	if (!(j = calloc(1, sizeof *j))) {
		json_decref(spec);
		json_decref(result);
		return ca_fail(rs->d, CA_ERR_NOMEM, "out of memory restoring jobs");
	}
	ca_strlcpy(j->id, r->id, sizeof j->id);
	ca_strlcpy(j->key, r->key, sizeof j->key);
	j->prio = r->prio == JOB_PRIO_HIGH ? JOB_PRIO_HIGH : JOB_PRIO_NORMAL;
	j->spec = spec;
	j->attempts = r->attempts;
	j->submitted = ca_now() - (ca_wall_now() - r->submitted);
	j->deadline = ca_now() + (r->deadline - ca_wall_now());
	j->refs = 1; /* the queue's */
	q->index[q->nindex++] = j;
	if (result) {
		j->state = JOB_DONE;
		j->result = result;
		done_locked(q, j);
	} else {
		enqueue_locked(q, j);
		rs->requeued++;
	}
	return 0;
}

int job_queue_restore(struct job_queue *q, struct job_store *store, size_t *requeued,
		      struct ca_diag *d)
{
	struct restore rs = {.q = q, .d = d};
	int rc;
	pthread_mutex_lock(&q->mu);
	q->store = store;
	rc = job_store_load(store, restore_row, &rs, d);
	if (rs.requeued)
		pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->mu);
	*requeued = rs.requeued;
	return rc;
}

json_t *job_queue_wait(struct job_queue *q, struct job *j, double until)
{
	json_t *res = NULL;
	pthread_mutex_lock(&q->mu);
	while (j->state != JOB_DONE) {
		double left = until - ca_now();
		struct timespec ts;
		if (left <= 0)
			break;
		ca_timespec_after(CLOCK_MONOTONIC, left, &ts);
		pthread_cond_timedwait(&q->done, &q->mu, &ts);
	}
	if (j->state == JOB_DONE)
		res = json_incref(j->result);
	pthread_mutex_unlock(&q->mu);
	return res;
}

void job_queue_release(struct job_queue *q, struct job *j)
{
	if (!j)
		return;
	pthread_mutex_lock(&q->mu);
	unref_locked(j);
	pthread_mutex_unlock(&q->mu);
}

json_t *job_queue_run(struct job_queue *q, enum job_priority prio, json_t *spec, double deadline,
		      double until, int *rc, struct ca_diag *d)
{
	struct job *j = NULL;
	bool dup;
	json_t *res;
	if ((*rc = job_queue_submit(q, "", prio, spec, deadline, &j, &dup, d)))
		return NULL;
	res = job_queue_wait(q, j, until);
	job_queue_release(q, j);
	if (!res)
		*rc = ca_fail(d, CA_ERR_TIMEOUT, "no answer by the deadline");
	return res;
}

void job_queue_close(struct job_queue *q)
{
	pthread_mutex_lock(&q->mu);
	q->closing = true;
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->mu);
}

void job_queue_counts(struct job_queue *q, size_t *queued, size_t *running, size_t *done)
{
	pthread_mutex_lock(&q->mu);
	*queued = q->queued;
	*running = q->running;
	*done = q->ndone;
	pthread_mutex_unlock(&q->mu);
}
