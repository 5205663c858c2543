/* queue: the embedded job queue (queue.h). */
#include "serve/queue.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/hash.h"
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
	if (q->tail[prio])
		q->tail[prio]->next = j;
	else
		q->head[prio] = j;
	q->tail[prio] = j;
	q->queued++;
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
	pthread_cond_broadcast(&q->done);
	pthread_mutex_unlock(&q->mu);
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
