#include "util/pool.h"

#include <string.h>

/* The next item, or n when there is none. */
static size_t take(struct ca_pool *p)
{
	size_t i;
	pthread_mutex_lock(&p->lock);
	i = !p->stop && p->next < p->n ? p->next++ : p->n;
	pthread_mutex_unlock(&p->lock);
	return i;
}

void ca_pool_work(struct ca_pool *p)
{
	for (size_t i = take(p); i < p->n; i = take(p))
		p->fn(p->ctx, i);
}

static void *worker(void *arg)
{
	ca_pool_work(arg);
	return NULL;
}

size_t ca_pool_start(struct ca_pool *p, size_t n, int threads, ca_pool_fn fn, void *ctx)
{
	memset(p, 0, sizeof *p);
	pthread_mutex_init(&p->lock, NULL);
	p->n = n;
	p->fn = fn;
	p->ctx = ctx;
	if (threads > CA_POOL_MAX_THREADS)
		threads = CA_POOL_MAX_THREADS;
	for (int t = 0; t < threads && (size_t)t < n; t++) {
		if (pthread_create(&p->threads[p->nthreads], NULL, worker, p) != 0)
			break;
		p->nthreads++;
	}
	return p->nthreads;
}

void ca_pool_stop(struct ca_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_mutex_unlock(&p->lock);
}

void ca_pool_join(struct ca_pool *p)
{
	for (size_t t = 0; t < p->nthreads; t++)
		pthread_join(p->threads[t], NULL);
	p->nthreads = 0;
	pthread_mutex_destroy(&p->lock);
}
