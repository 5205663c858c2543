/* fleet: the service's jobs through Redis, so that many GPU nodes serve one or more HTTP
 * servers (docs/service.md, "Scale-out").
 *
 * Both ends keep the embedded job queue (serve/queue.h) as their one queue interface; Redis
 * carries the jobs between them:
 *
 *   server (`serve --redis URL`): its HTTP handlers queue jobs as on one machine. Instead of
 *     worker processes, a forwarder takes each job, claims its key (SET ca:job:KEY NX: a job
 *     another replica already sent is not sent again), and adds it, with its files inline, to
 *     the stream ca:jobs. A listener finishes the local job when ca:result:KEY appears (it is
 *     woken by the stream ca:done, and looks for every job it waits on each time it wakes).
 *   node (`cuda-agent worker --redis URL`): one consumer per worker slot reads ca:jobs through
 *     the consumer group ca-workers (XREADGROUP), writes the job's files into a job directory,
 *     runs it on its own worker processes (serve/workers.h) through its own embedded queue,
 *     stores the answer (SET ca:result:KEY NX: the first answer is the only one), announces it
 *     on ca:done, and acknowledges the entry (XACK, XDEL). While a job runs, its consumer
 *     renews its claim on the entry every reclaim/4 seconds (XCLAIM ... JUSTID); an entry not
 *     renewed for `reclaim` seconds (its node died) is taken by another node (XAUTOCLAIM). An
 *     entry delivered more than twice is answered env.worker_died without running again.
 *   baselines: each node adds the baseline entries it measured to the stream ca:baselines
 *     and imports everyone's (the first entry of a key wins), so every node rewards against
 *     the same numbers.
 *
 * A job's key is its idempotency key, or its server's job id when it has none. Files are sent
 * as text (UTF-8): a job whose files are not is answered `internal` by the server. Keys of
 * results and claims expire after FLEET_TTL_S.
 *
 * Ownership: a fleet_server borrows the queue it forwards; a node owns its queue and pool. */
#ifndef CA_SERVE_FLEET_H
#define CA_SERVE_FLEET_H

#include <pthread.h>
#include <stdbool.h>

#include "serve/metrics.h"
#include "serve/queue.h"
#include "serve/redis.h"
#include "serve/workers.h"

#define FLEET_TTL_S        86400
#define FLEET_FILES_MAX    256         /* files of one packed directory */
#define FLEET_BYTES_MAX    (16u << 20) /* bytes of one packed directory */
#define FLEET_STREAM       "ca:jobs"
#define FLEET_GROUP        "ca-workers"
#define FLEET_DONE         "ca:done"
#define FLEET_BASELINES    "ca:baselines"
#define FLEET_INFLIGHT_MAX 65536

struct fleet_flight; /* a job the server waits on */

struct fleet_server {
	struct job_queue *q;
	struct serve_metrics *m;
	char url[REDIS_URL_MAX];
	char instance[48]; /* this server's name in its claims */
	pthread_t forwarder, listener;
	bool forwarder_started, listener_started;
	pthread_mutex_t mu;
	struct fleet_flight *flights; /* sent, not yet answered */
	size_t nflights;
	bool forwarding_done; /* the queue closed and the forwarder ended */
};

/* Checks that Redis answers, then starts the forwarder and the listener. */
int fleet_server_start(struct fleet_server *f, struct job_queue *q, struct serve_metrics *m,
		       const char *url, struct ca_diag *d);
/* After job_queue_close: waits until every sent job is answered (or its deadline passed). */
void fleet_server_stop(struct fleet_server *f);

struct fleet_node_opts {
	const char *redis_url;
	int workers;          /* worker processes (0: one per GPU, 2 without one) */
	const char *gpus;     /* as serve's --gpus */
	int gpu_slots;        /* as serve's --gpu-slots */
	const char *state_dir;
	const char *python, *device;
	double reclaim_s;     /* an entry unrenewed this long is taken over (default 60) */
	const char *consumer; /* this node's name in the group (default host-pid) */
};

void fleet_node_opts_defaults(struct fleet_node_opts *o);
/* `cuda-agent worker --redis`: runs until SIGINT or SIGTERM, then finishes its jobs. */
int fleet_node_run(const struct fleet_node_opts *o, struct ca_diag *d);

/* Seconds on the wall clock (CLOCK_REALTIME): deadlines travel as such between machines. */
double fleet_wall_now(void);

/* Packing a job's files (fleet_files.c): a directory as {"files": {REL: TEXT}}, a file as
 * {"file": NAME, "text": TEXT}; regular files only, no dot-files, at most FLEET_FILES_MAX
 * files and FLEET_BYTES_MAX bytes. CA_ERR_INVALID when one is not UTF-8. */
int fleet_pack_path(const char *path, json_t **out, struct ca_diag *d);
/* Writes a packed path under dir: *written is the directory, or dir/NAME for a file. Paths
 * are checked as request paths are (serve_path_ok). */
int fleet_unpack_path(const json_t *packed, const char *dir, char *written, size_t size,
		      struct ca_diag *d);

#endif
