/* pool: the one job pool. Worker threads take the items 0..n-1 in order, one at a time, and call
 * fn(ctx, i) for each; the caller may take items too (ca_pool_work), stop the handing out
 * (ca_pool_stop: items not yet taken are never run) and waits for the threads (ca_pool_join).
 * fn runs concurrently with itself: what it shares, it locks.
 *
 * Used by the build (compiling units), bench (warming the build cache ahead of the
 * evaluations) and solve --batch (tasks at once).
 *
 * Ownership: the pool owns its threads and its lock from ca_pool_start to ca_pool_join. */
#ifndef CA_UTIL_POOL_H
#define CA_UTIL_POOL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#define CA_POOL_MAX_THREADS 256

typedef void (*ca_pool_fn)(void *ctx, size_t index);

struct ca_pool {
	pthread_t threads[CA_POOL_MAX_THREADS];
	size_t nthreads;
	pthread_mutex_t lock;
	size_t next, n;
	bool stop;
	ca_pool_fn fn;
	void *ctx;
};

/* Starts up to `threads` workers (at most CA_POOL_MAX_THREADS, none for n == 0) over n items.
 * Returns how many started: 0 when none could (the caller then runs the items with
 * ca_pool_work). */
size_t ca_pool_start(struct ca_pool *p, size_t n, int threads, ca_pool_fn fn, void *ctx);
/* The calling thread takes items until none are left (or the pool is stopped). */
void ca_pool_work(struct ca_pool *p);
/* No item is handed out after this; items running finish. */
void ca_pool_stop(struct ca_pool *p);
/* Waits for the workers; the pool can be started again afterwards. */
void ca_pool_join(struct ca_pool *p);

#endif
