/* metrics: the service's Prometheus text (GET /metrics, docs/service.md "Metrics").
 *
 * Counters of requests by endpoint and status, latency histograms by endpoint and by evaluation
 * step (the result's "seconds", and the time a job waited in the queue), results by reason code,
 * worker restarts and retries; the queue's gauges are passed in when rendering.
 *
 * Threads: every function locks; serve_metrics_render returns a heap string the caller frees. */
#ifndef CA_SERVE_METRICS_H
#define CA_SERVE_METRICS_H

#include <pthread.h>
#include <stddef.h>

#include <jansson.h>

enum serve_endpoint { EP_EVALUATE, EP_SESSION_NEW, EP_TOOL, EP_FINALIZE, EP_SESSION_CLOSE,
		      EP_OPENENV, EP_HEALTH, EP_METRICS, EP_OPENAPI, EP_OTHER, EP_COUNT };

#define METRICS_BUCKETS 17
#define METRICS_STEPS   9
#define METRICS_CODES   128 /* distinct reason codes counted; more go to "other" */

struct metrics_hist {
	unsigned long long bucket[METRICS_BUCKETS]; /* cumulative at render time, not here */
	unsigned long long count;
	double sum;
};

struct serve_metrics {
	pthread_mutex_t mu;
	unsigned long long requests[EP_COUNT][6]; /* by status / 100 */
	struct metrics_hist latency[EP_COUNT];
	struct metrics_hist steps[METRICS_STEPS];
	char codes[METRICS_CODES][48];
	unsigned long long code_count[METRICS_CODES + 1];
	size_t ncodes;
	unsigned long long worker_restarts, retries, rejected_full;
};

/* One GPU's workers at render time (serve_pool_gpus): its index as given to --gpus. */
struct serve_gpu_load {
	char gpu[16];
	size_t workers, running;
	unsigned long long jobs; /* answered by its workers so far */
};

void serve_metrics_init(struct serve_metrics *m);
void serve_metrics_destroy(struct serve_metrics *m);
void serve_metrics_request(struct serve_metrics *m, enum serve_endpoint ep, unsigned status,
			   double seconds);
/* A finished job: its reason code and the result's seconds by step, and its queue wait. */
void serve_metrics_result(struct serve_metrics *m, const json_t *result, double queued_s);
void serve_metrics_count(struct serve_metrics *m, unsigned long long *counter);
/* gpus: the per-GPU gauges (none when ngpus is 0: workers without GPUs of their own, or a
 * server whose jobs run on fleet nodes). */
char *serve_metrics_render(struct serve_metrics *m, size_t queued, size_t running,
			   size_t workers, const struct serve_gpu_load *gpus, size_t ngpus);

#endif
