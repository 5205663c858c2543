/* serve: `cuda-agent serve`, the evaluation service (docs/service.md).
 *
 * HTTP (libmicrohttpd, a thread per connection) in front of the job queue (serve/queue.h) and
 * the worker processes (serve/workers.h): POST /v1/evaluate, GET /v1/health, GET /metrics,
 * GET /v1/openapi.json, and agent sessions (serve/sessions.h): POST /v1/sessions,
 * POST /v1/sessions/{id}/tools/{name}, POST /v1/sessions/{id}/finalize, DELETE
 * /v1/sessions/{id}, and OpenEnv's HTTP endpoints (openenv.c). The jobs run in worker processes
 * here, or, with a Redis URL, on the fleet's nodes (serve/fleet.h).
 *
 * serve_run blocks until SIGINT or SIGTERM: then it stops taking requests, lets the workers
 * finish every queued job (their requests are answered), and returns. */
#ifndef CA_SERVE_SERVE_H
#define CA_SERVE_SERVE_H

#include <stddef.h>

#include "util/diag.h"

struct serve_opts {
	const char *listen;    /* "ADDR:PORT" (IPv4), default 127.0.0.1:8040; port 0 picks one */
	const char *port_file; /* NULL, or a file the bound port is written to once listening */
	int workers;           /* worker processes without --gpus (0, the default: one per GPU
				  of /dev/nvidiaN, each given its own; 2 without a GPU) */
	const char *gpus;      /* "0,1,...": one worker per GPU, given only that GPU */
	int gpu_slots;         /* workers per GPU (default 1); more take turns on it for what runs
				  there, while their builds and starts overlap (eval/gpu_stage.h) */
	const char *state_dir; /* job directories and worker logs (default <cache>/serve) */
	const char *tasks;     /* the task store for task ids (default: tasks' default) */
	size_t max_queue;      /* jobs waiting at most (default 1024); more get 429 */
	size_t keep_done;      /* answers kept for repeated idempotency keys (default 4096) */
	size_t max_sessions;   /* open sessions at most (default 1024); more get 429 */
	double session_idle_s; /* a session idle this long is closed (default 1800) */
	const char *python;    /* the bridge's Python (NULL: $CUDA_AGENT_PYTHON, else python3) */
	const char *device;    /* the bridge's device (auto) */
	const char *redis;     /* NULL, or a Redis URL: jobs go to the fleet's nodes (fleet.h) */
};

void serve_opts_defaults(struct serve_opts *o);
int serve_run(const struct serve_opts *o, struct ca_diag *d);

/* GET /v1/openapi.json (openapi.c). */
extern const char serve_openapi_json[];

#endif
