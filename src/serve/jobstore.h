/* jobstore: the service's jobs on disk (STATE/jobs.sqlite), so that a restart loses none
 * (docs/service.md, "Scheduling"): every job with an idempotency key is written when it is
 * queued and again when it is answered. At start the queue takes back the unanswered ones (they
 * run again: one that was running when the server died never finished) and the answered ones,
 * which a client retrying with its key is given. Jobs without a key are not kept: nobody could
 * ask for their answer after a restart.
 *
 * Threads: the queue calls these under its own lock; one connection (SQLite's serialized mode).
 * Ownership: the store owns its connection (job_store_close). */
#ifndef CA_SERVE_JOBSTORE_H
#define CA_SERVE_JOBSTORE_H

#include <stddef.h>

#include "util/diag.h"

struct job_store {
	void *db; /* sqlite3 * */
	unsigned long finished; /* answers written, for pruning now and then */
};

struct job_row {
	const char *key, *id, *spec, *result; /* result NULL: not answered */
	int prio, attempts;
	double deadline, submitted; /* wall-clock seconds */
};

int job_store_open(struct job_store *s, const char *path, struct ca_diag *d);
void job_store_close(struct job_store *s);
int job_store_put(struct job_store *s, const struct job_row *r, struct ca_diag *d);
int job_store_finish(struct job_store *s, const char *key, const char *result, int attempts,
		     struct ca_diag *d);
/* Calls fn for every row, oldest first; a nonzero return from fn stops and is returned. */
typedef int (*job_store_visit_fn)(const struct job_row *r, void *ctx);
int job_store_load(struct job_store *s, job_store_visit_fn fn, void *ctx, struct ca_diag *d);
/* Forgets answered jobs beyond the newest keep. */
int job_store_prune(struct job_store *s, size_t keep, struct ca_diag *d);

#endif
