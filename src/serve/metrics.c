/* metrics: Prometheus text of the service (metrics.h). */
#include "serve/metrics.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"

static const double bounds[METRICS_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
					       0.25,  0.5,    1,     2.5,  5,     10,   30,
					       60,    300,    600};
static const char *const endpoints[EP_COUNT] = {"evaluate", "session_new", "tool", "finalize",
						"session_close", "openenv", "health", "metrics",
						"openapi", "other"};
/* The steps of a result's "seconds", and "queue" (the wait before a worker took the job). */
static const char *const steps[METRICS_STEPS] = {"queue", "build", "describe", "start",
						 "verify", "timing", "baselines", "finish", "total"};

void serve_metrics_init(struct serve_metrics *m)
{
	memset(m, 0, sizeof *m);
	pthread_mutex_init(&m->mu, NULL);
}

void serve_metrics_destroy(struct serve_metrics *m)
{
	pthread_mutex_destroy(&m->mu);
}

static void observe(struct metrics_hist *h, double v)
{
	for (int i = 0; i < METRICS_BUCKETS; i++)
		if (v <= bounds[i]) {
			h->bucket[i]++;
			break;
		}
	h->count++;
	h->sum += v;
}

void serve_metrics_request(struct serve_metrics *m, enum serve_endpoint ep, unsigned status,
			   double seconds)
{
	unsigned cls = status / 100 < 6 ? status / 100 : 5;
	pthread_mutex_lock(&m->mu);
	m->requests[ep][cls]++;
	observe(&m->latency[ep], seconds);
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_result(struct serve_metrics *m, const json_t *result, double queued_s)
{
	const char *code = json_string_value(json_object_get(json_object_get(result, "reason"),
							     "code"));
	const json_t *secs = json_object_get(result, "seconds");
	size_t i;
	pthread_mutex_lock(&m->mu);
	observe(&m->steps[0], queued_s);
	for (int s = 1; s < METRICS_STEPS; s++) {
		const json_t *v = json_object_get(secs, steps[s]);
		if (json_is_number(v))
			observe(&m->steps[s], json_number_value(v));
	}
	code = code ? code : "none";
	for (i = 0; i < m->ncodes && strcmp(m->codes[i], code) != 0; i++)
		;
	if (i == m->ncodes && m->ncodes < METRICS_CODES && strlen(code) < sizeof m->codes[0])
		snprintf(m->codes[m->ncodes++], sizeof m->codes[0], "%s", code);
	m->code_count[i < m->ncodes ? i : METRICS_CODES]++;
	pthread_mutex_unlock(&m->mu);
}

void serve_metrics_count(struct serve_metrics *m, unsigned long long *counter)
{
	pthread_mutex_lock(&m->mu);
	(*counter)++;
	pthread_mutex_unlock(&m->mu);
}

static void hist(struct ca_buf *b, const char *name, const char *label, const char *value,
		 const struct metrics_hist *h)
{
	unsigned long long cum = 0;
	for (int i = 0; i < METRICS_BUCKETS; i++) {
		cum += h->bucket[i];
		ca_buf_printf(b, "%s_bucket{%s=\"%s\",le=\"%g\"} %llu\n", name, label, value,
			      bounds[i], cum);
	}
	ca_buf_printf(b, "%s_bucket{%s=\"%s\",le=\"+Inf\"} %llu\n", name, label, value, h->count);
	ca_buf_printf(b, "%s_sum{%s=\"%s\"} %.6f\n%s_count{%s=\"%s\"} %llu\n", name, label, value,
		      h->sum, name, label, value, h->count);
}

/* One labelled family by GPU: which selects the field. */
static void gpu_family(struct ca_buf *b, const char *name, const char *type, const char *help,
		       const struct serve_gpu_load *gpus, size_t ngpus, int which)
{
	if (!ngpus)
		return;
	ca_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
	for (size_t i = 0; i < ngpus; i++)
		ca_buf_printf(b, "%s{gpu=\"%s\"} %llu\n", name, gpus[i].gpu,
			      which == 0   ? (unsigned long long)gpus[i].workers
			      : which == 1 ? (unsigned long long)gpus[i].running
					   : gpus[i].jobs);
}

char *serve_metrics_render(struct serve_metrics *m, size_t queued, size_t running,
			   size_t workers, const struct serve_gpu_load *gpus, size_t ngpus)
{
	struct ca_buf b = {0};
	pthread_mutex_lock(&m->mu);
	ca_buf_printf(&b, "# HELP cuda_agent_queue_depth Jobs waiting for a worker.\n"
			  "# TYPE cuda_agent_queue_depth gauge\ncuda_agent_queue_depth %zu\n"
			  "# HELP cuda_agent_jobs_running Jobs a worker is running.\n"
			  "# TYPE cuda_agent_jobs_running gauge\ncuda_agent_jobs_running %zu\n"
			  "# HELP cuda_agent_workers Evaluation worker processes.\n"
			  "# TYPE cuda_agent_workers gauge\ncuda_agent_workers %zu\n",
		      queued, running, workers);
	gpu_family(&b, "cuda_agent_gpu_workers", "gauge", "Evaluation workers of each GPU.", gpus,
		   ngpus, 0);
	gpu_family(&b, "cuda_agent_gpu_jobs_running", "gauge",
		   "Jobs running on each GPU's workers (one at a time on the GPU itself: they take "
		   "turns).",
		   gpus, ngpus, 1);
	gpu_family(&b, "cuda_agent_gpu_jobs_total", "counter", "Jobs each GPU's workers answered.",
		   gpus, ngpus, 2);
	ca_buf_printf(&b, "# HELP cuda_agent_requests_total HTTP requests by endpoint and status "
			  "class.\n# TYPE cuda_agent_requests_total counter\n");
	for (int e = 0; e < EP_COUNT; e++)
		for (int c = 1; c < 6; c++)
			ca_buf_printf(&b, "cuda_agent_requests_total{endpoint=\"%s\",code=\"%dxx\"} "
					  "%llu\n",
				      endpoints[e], c, m->requests[e][c]);
	ca_buf_printf(&b, "# HELP cuda_agent_request_seconds Latency by endpoint.\n"
			  "# TYPE cuda_agent_request_seconds histogram\n");
	for (int e = 0; e < EP_COUNT; e++)
		hist(&b, "cuda_agent_request_seconds", "endpoint", endpoints[e], &m->latency[e]);
	ca_buf_printf(&b, "# HELP cuda_agent_step_seconds Evaluation time by step (queue: the "
			  "wait for a worker).\n# TYPE cuda_agent_step_seconds histogram\n");
	for (int s = 0; s < METRICS_STEPS; s++)
		hist(&b, "cuda_agent_step_seconds", "step", steps[s], &m->steps[s]);
	ca_buf_printf(&b, "# HELP cuda_agent_results_total Results by reason code.\n"
			  "# TYPE cuda_agent_results_total counter\n");
	for (size_t i = 0; i < m->ncodes; i++)
		ca_buf_printf(&b, "cuda_agent_results_total{reason=\"%s\"} %llu\n", m->codes[i],
			      m->code_count[i]);
	if (m->code_count[METRICS_CODES])
		ca_buf_printf(&b, "cuda_agent_results_total{reason=\"other\"} %llu\n",
			      m->code_count[METRICS_CODES]);
	ca_buf_printf(&b, "# HELP cuda_agent_worker_restarts_total Worker processes started again "
			  "after one died.\n# TYPE cuda_agent_worker_restarts_total counter\n"
			  "cuda_agent_worker_restarts_total %llu\n"
			  "# HELP cuda_agent_retries_total Jobs retried on a fresh worker.\n"
			  "# TYPE cuda_agent_retries_total counter\ncuda_agent_retries_total %llu\n"
			  "# HELP cuda_agent_rejected_total Requests refused because the queue was "
			  "full.\n# TYPE cuda_agent_rejected_total counter\n"
			  "cuda_agent_rejected_total %llu\n",
		      m->worker_restarts, m->retries, m->rejected_full);
	pthread_mutex_unlock(&m->mu);
	return ca_buf_take(&b);
}
