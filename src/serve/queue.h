/* queue: the service's jobs (docs/service.md, "Scheduling"): a bounded queue with two
 * priorities, each job answered once, and an index by idempotency key so that a request sent
 * again gets the same job (queued, running or done) instead of a second evaluation.
 *
 * This is the embedded, in-process queue; the interface is what the service's workers and HTTP
 * handlers use, so that another implementation (Redis streams, issue 15) can take its place.
 *
 * Threads: every function is safe to call from any thread. A job is reference-counted: the
 * queue holds one reference while it indexes the job (until it is evicted from the done set),
 * job_queue_submit and job_queue_take hand the caller one each (job_queue_release). */
#ifndef CA_SERVE_QUEUE_H
#define CA_SERVE_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "serve/jobstore.h"
#include "serve/request.h"
#include "util/diag.h"

enum job_state { JOB_QUEUED, JOB_RUNNING, JOB_DONE };
enum job_priority { JOB_PRIO_HIGH, JOB_PRIO_NORMAL, JOB_PRIO_COUNT };

struct job {
	char id[24];                 /* "j-<16 hex>" */
	char key[SERVE_KEY_MAX + 1]; /* idempotency key, "" when none */
	enum job_state state;
	enum job_priority prio;
	json_t *spec;    /* what a worker runs (owned) */
	json_t *result;  /* once done (owned) */
	double submitted; /* monotonic seconds */
	double deadline;  /* monotonic seconds: the request's answer is due */
	int attempts;     /* worker processes that started it (a retry is a second) */
	int refs;
	struct job *next;      /* in its priority's queue */
	struct job *done_next; /* in the done list (eviction order) */
};

struct job_queue {
	pthread_mutex_t mu;
	pthread_cond_t work; /* a job was queued, or the queue closes */
	pthread_cond_t done; /* a job finished */
	struct job *head[JOB_PRIO_COUNT], *tail[JOB_PRIO_COUNT];
	size_t queued, running, capacity;
	struct job **index; /* every job the queue holds a reference to, by key ("" not indexed) */
	size_t nindex, index_cap;
	struct job *done_head, *done_tail;
	size_t ndone, keep_done;
	bool closing;
	unsigned long long seq;
	struct job_store *store; /* NULL: nothing kept on disk */
};

/* capacity: jobs queued (not running) at most; keep_done: finished jobs kept for repeated
 * requests (the oldest are forgotten first). */
int job_queue_init(struct job_queue *q, size_t capacity, size_t keep_done, struct ca_diag *d);
void job_queue_destroy(struct job_queue *q);
/* From now on jobs with a key are kept in store (borrowed; serve/jobstore.h), and the jobs it
 * holds come back: unanswered ones queued again (their deadlines as they were, on the wall
 * clock), answered ones for their keys. *requeued: how many were queued again. */
int job_queue_restore(struct job_queue *q, struct job_store *store, size_t *requeued,
		      struct ca_diag *d);
/* Queues spec (stolen) as a new job, or, when key names a job the queue still has, returns that
 * one with *dup true (spec is released). CA_ERR_IO when the job store cannot keep it,
 * CA_ERR_LIMIT when the queue is full, CA_ERR_INTERRUPTED when
 * it is closing. *out is a new reference. */
int job_queue_submit(struct job_queue *q, const char *key, enum job_priority prio, json_t *spec,
		     double deadline, struct job **out, bool *dup, struct ca_diag *d);
/* The next job (high priority first, then in order), now running, or NULL once the queue is
 * closing. Blocks. A new reference. */
struct job *job_queue_take(struct job_queue *q);
/* The job's answer (result stolen); wakes whoever waits for it. Once only: a second finish
 * of the same job is ignored (and its result released). */
void job_queue_finish(struct job_queue *q, struct job *j, json_t *result);
/* Waits until j is done or until the monotonic time `until`: a new reference to its result,
 * or NULL on time-out. */
json_t *job_queue_wait(struct job_queue *q, struct job *j, double until);
void job_queue_release(struct job_queue *q, struct job *j);
/* Submits spec (stolen; no key) and waits for its answer until `until`: the result (a new
 * reference), or NULL with CA_ERR_LIMIT (full), CA_ERR_INTERRUPTED (closing) or CA_ERR_TIMEOUT
 * in *rc and a message in d. */
json_t *job_queue_run(struct job_queue *q, enum job_priority prio, json_t *spec, double deadline,
		      double until, int *rc, struct ca_diag *d);
/* No new jobs; job_queue_take returns NULL to every worker once the queue is empty of them. */
void job_queue_close(struct job_queue *q);
void job_queue_counts(struct job_queue *q, size_t *queued, size_t *running, size_t *done);

#endif
