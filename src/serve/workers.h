/* workers: the service's evaluation worker processes (docs/service.md, "Scheduling").
 *
 * Each slot is a thread that owns one long-lived child, `cuda-agent serve-worker`, which keeps
 * a torch bridge warm and runs one evaluation at a time (eval_run), reading a job as one JSON
 * line on its stdin and answering the result as one line on its stdout. A slot takes jobs from
 * the queue; a slot with a GPU gives its child only that GPU (CUDA_VISIBLE_DEVICES), so each GPU
 * runs one evaluation at a time. A child that dies (or says nothing until the job's deadline
 * plus a grace) is replaced; its job is retried once on the fresh child, and a second death
 * answers `env.worker_died` (reward null). A job whose deadline passed before a slot took it is
 * answered `env.deadline` without running.
 *
 * A job (the line sent to the child): {"task_dir", "candidate", "format", "rules", "mode",
 * "timeout_s"}; the answer: the result JSON (docs/result.md).
 *
 * Ownership: the pool owns its slots, threads and children; serve_pool_stop joins them. */
#ifndef CA_SERVE_WORKERS_H
#define CA_SERVE_WORKERS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "eval/cpu_claim.h"
#include "serve/metrics.h"
#include "serve/queue.h"
#include "util/proc.h"

#define SERVE_MAX_WORKERS 256
#define SERVE_RESULT_MAX  (64u << 20) /* bytes of a worker's answer line */
#define SERVE_GRACE_S     30.0        /* a child may answer this long after a job's deadline */
/* Workers per GPU unless --gpu-slots says: they take turns on the GPU (one evaluation at a time
 * on it), while the others build and start. One alone leaves the GPU idle for its build and
 * start (~2.8 s of an evaluation's ~3.5 s); 3 gave 59 evaluations a minute on the H200, the
 * lock busy (docs/service.md, "Measured"). */
#define SERVE_GPU_SLOTS_DEFAULT 3

struct serve_pool;

struct serve_slot {
	struct serve_pool *pool;
	int index;
	char gpu[16]; /* "" when the slot has no GPU of its own */
	struct ca_child child;
	bool running; /* the child is started */
	atomic_bool busy;             /* running a job now (read by /metrics) */
	atomic_ullong jobs;           /* jobs answered */
	pthread_t thread;
	bool thread_started;
};

struct serve_pool {
	struct job_queue *q;
	struct serve_metrics *m;
	char exe[4096];     /* this program */
	char python[256];   /* the bridge's Python, "" for the default */
	char device[16];    /* the bridge's device */
	char log_dir[4096]; /* the children's stderr files */
	char lock_dir[4096]; /* the GPUs' lock files: <cache>/gpu-locks, shared by the host */
	char timing_cpus[CPU_LIST_MAX]; /* the reserved timing CPUs (eval/cpu_claim.h), or "" */
	struct serve_slot slots[SERVE_MAX_WORKERS];
	int nslots;
};

/* Starts n slots (gpus: a comma-separated list of GPU indices, per_gpu slots each (1 to 16), or
 * NULL for n slots that share what the machine has). Every slot given a GPU N takes turns on it
 * (eval/gpu_stage.h) through <cache>/gpu-locks/gpu-N.lock ($CUDA_AGENT_GPU_LOCK): with the pool's
 * other slots, and with every other pool of the host (another service, another node). */
int serve_pool_start(struct serve_pool *p, struct job_queue *q, struct serve_metrics *m, int n,
		     const char *gpus, int per_gpu, const char *python, const char *device,
		     const char *log_dir, struct ca_diag *d);
/* serve_pool_start with the service's defaults: gpus given, per_gpu slots each; else
 * `workers` slots (> 0) sharing the machine (a warning when they share a GPU); else per_gpu
 * slots per GPU (/dev/nvidiaN), each given only its own, or 2 slots without a GPU. */
int serve_pool_start_auto(struct serve_pool *p, struct job_queue *q, struct serve_metrics *m,
			  int workers, const char *gpus, int per_gpu, const char *python,
			  const char *device, const char *log_dir, struct ca_diag *d);
/* The per-GPU load of the pool's slots (those with a GPU of their own), at most max GPUs, in the
 * order the GPUs were given: the number filled. */
size_t serve_pool_gpus(struct serve_pool *p, struct serve_gpu_load *out, size_t max);
/* After job_queue_close: waits for the slots to finish their jobs and ends the children. */
void serve_pool_stop(struct serve_pool *p);
/* A result for a job that never got a worker's answer (reward null, reason code). */
json_t *serve_env_result(const char *code, const char *message);

/* The child's side: `cuda-agent serve-worker`. Returns the process exit code. */
int serve_worker_main(const char *python, const char *device);

#endif
