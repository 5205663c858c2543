/* cuda-agent serve: the evaluation service (src/serve/serve.h, docs/service.md); `cuda-agent
 * worker --redis URL`, a GPU node of a fleet (src/serve/fleet.h); and `cuda-agent serve-worker`,
 * the worker process both start (not by hand).
 *
 * Exit codes (docs/cli.md): 0 stopped by SIGINT/SIGTERM after the queued jobs; 2 usage; 4 the
 * address cannot be bound or the state directory cannot be made. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "serve/fleet.h"
#include "serve/serve.h"
#include "serve/workers.h"
#include "util/log.h"

static const char usage[] = "usage: cuda-agent serve [options]\n";

static const char help[] =
	"\n"
	"Runs the evaluation service on one machine (docs/service.md): POST /v1/evaluate takes a\n"
	"task (a store id or hash, or its files) and a candidate's files and answers the result\n"
	"JSON; POST /v1/sessions opens an agent session (a workspace, the tools, finalize);\n"
	"GET /v1/health, GET /metrics (Prometheus), GET /v1/openapi.json. Jobs wait in a\n"
	"bounded queue (full: 429 with Retry-After) and run in worker processes, one evaluation at\n"
	"a time each; a worker that dies is replaced and its job retried once. A request sent again\n"
	"with the same idempotency key gets the same answer. SIGINT or SIGTERM stops taking\n"
	"requests, finishes the queued jobs, and exits. With $CUDA_AGENT_SERVE_TOKEN set, every\n"
	"endpoint but /v1/health wants `Authorization: Bearer <token>`.\n"
	"\n"
	"options:\n"
	"  --listen ADDR:PORT  where to listen (default 127.0.0.1:8040; port 0 picks a free one)\n"
	"  --port-file FILE    write the bound port to FILE once listening\n"
	"  --workers N         worker processes, each running one evaluation at a time (default:\n"
	"                      --gpu-slots per GPU, given only its GPU; 2 on a machine without one)\n"
	"  --gpus LIST         --gpu-slots workers per GPU index in LIST (e.g. 0,1,2,3), each given\n"
	"                      only its GPU (CUDA_VISIBLE_DEVICES); replaces --workers\n"
	"  --gpu-slots K       K workers per GPU (default 3): they take turns on the GPU for what\n"
	"                      runs or is timed there, while their builds and starts overlap\n"
	"  --max-queue N       jobs waiting at most (default 1024)\n"
	"  --max-sessions N    open agent sessions at most (default 1024)\n"
	"  --session-idle S    close a session idle for S seconds (default 1800)\n"
	"  --state DIR         job directories and worker logs (default <cache>/serve)\n"
	"  --tasks DIR         the task store that task ids and hashes name (see 'tasks --help')\n"
	"  --redis URL         run no workers here: send the jobs to the fleet's nodes through\n"
	"                      Redis (redis://HOST[:PORT][/DB] or unix:///PATH; each node runs\n"
	"                      `cuda-agent worker --redis URL`); several servers may share one\n"
	"  --python PATH       the torch bridge's Python ($CUDA_AGENT_PYTHON, else python3)\n"
	"  --device D          where the bridge runs the reference: auto (default), cuda, cpu\n"
	"  -q, --quiet         no log lines\n"
	"  -h, --help          this help\n";

static int positive(const char *cmd, const char *opt, const char *v, long max, long *out)
{
	char *end;
	long n = strtol(v, &end, 10);
	if (*end || n < 1 || n > max) {
		fprintf(stderr, "cuda-agent %s: %s wants a number from 1 to %ld\n", cmd, opt, max);
		return -1;
	}
	*out = n;
	return 0;
}

static int device_ok(const char *cmd, const char *v)
{
	if (strcmp(v, "auto") && strcmp(v, "cuda") && strcmp(v, "cpu")) {
		fprintf(stderr, "cuda-agent %s: --device is auto, cuda or cpu\n", cmd);
		return -1;
	}
	return 0;
}

static int redis_ok(const char *cmd, const char *v)
{
	struct redis_url u;
	struct ca_diag d = {{0}};
	if (redis_url_parse(v, &u, &d)) {
		fprintf(stderr, "cuda-agent %s: --redis: %s\n", cmd, d.msg);
		return -1;
	}
	return 0;
}

/* The options serve and worker share: where and how the jobs run. */
enum { O_WORKERS = 256, O_GPUS, O_GPU_SLOTS, O_STATE, O_PYTHON, O_DEVICE, O_REDIS, O_POOL_END };
#define POOL_LONGOPTS                                                 \
	{"workers", required_argument, NULL, O_WORKERS},              \
	{"gpus", required_argument, NULL, O_GPUS},                    \
	{"gpu-slots", required_argument, NULL, O_GPU_SLOTS},          \
	{"state", required_argument, NULL, O_STATE},                  \
	{"python", required_argument, NULL, O_PYTHON},                \
	{"device", required_argument, NULL, O_DEVICE},                \
	{"redis", required_argument, NULL, O_REDIS},                  \
	{"quiet", no_argument, NULL, 'q'}

struct pool_flags {
	int workers, gpu_slots;
	const char *gpus, *state, *python, *device, *redis;
};

/* One shared option into p: 1 taken, 0 not one of them, -1 a usage error (said). */
static int pool_option(const char *cmd, int ch, const char *arg, struct pool_flags *p)
{
	long n;
	switch (ch) {
	case O_WORKERS:
		if (positive(cmd, "--workers", arg, SERVE_MAX_WORKERS, &n))
			return -1;
		p->workers = (int)n;
		return 1;
	case O_GPU_SLOTS:
		if (positive(cmd, "--gpu-slots", arg, 16, &n))
			return -1;
		p->gpu_slots = (int)n;
		return 1;
	case O_GPUS: p->gpus = arg; return 1;
	case O_STATE: p->state = arg; return 1;
	case O_PYTHON: p->python = arg; return 1;
	case O_DEVICE:
		if (device_ok(cmd, arg))
			return -1;
		p->device = arg;
		return 1;
	case O_REDIS:
		if (redis_ok(cmd, arg))
			return -1;
		p->redis = arg;
		return 1;
	case 'q': ca_log_set_level(CA_LOG_QUIET); return 1;
	default: return 0;
	}
}

int cmd_serve(int argc, char **argv)
{
	enum { O_LISTEN = O_POOL_END, O_PORT_FILE, O_MAX_QUEUE, O_TASKS, O_MAX_SESSIONS, O_IDLE };
	static const struct option longopts[] = {
		{"listen", required_argument, NULL, O_LISTEN},
		{"port-file", required_argument, NULL, O_PORT_FILE},
		{"max-queue", required_argument, NULL, O_MAX_QUEUE},
		{"max-sessions", required_argument, NULL, O_MAX_SESSIONS},
		{"session-idle", required_argument, NULL, O_IDLE},
		{"tasks", required_argument, NULL, O_TASKS},
		POOL_LONGOPTS,
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct serve_opts o;
	struct pool_flags pf = {0};
	struct ca_diag d = {{0}};
	long n;
	int ch, rc;

	serve_opts_defaults(&o);
	pf.device = o.device;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
		int taken = pool_option("serve", ch, optarg, &pf);
		if (taken < 0)
			return EXIT_USAGE;
		if (taken)
			continue;
		switch (ch) {
		case O_LISTEN: o.listen = optarg; break;
		case O_PORT_FILE: o.port_file = optarg; break;
		case O_MAX_QUEUE:
			if (positive("serve", "--max-queue", optarg, 1000000, &n))
				return EXIT_USAGE;
			o.max_queue = (size_t)n;
			break;
		case O_MAX_SESSIONS:
			if (positive("serve", "--max-sessions", optarg, 1000000, &n))
				return EXIT_USAGE;
			o.max_sessions = (size_t)n;
			break;
		case O_IDLE:
			if (positive("serve", "--session-idle", optarg, 7 * 86400, &n))
				return EXIT_USAGE;
			o.session_idle_s = (double)n;
			break;
		case O_TASKS: o.tasks = optarg; break;
		case 'h': printf("%s%s", usage, help); return EXIT_OK;
		default: fprintf(stderr, "%sTry 'cuda-agent serve --help'.\n", usage); return EXIT_USAGE;
		}
	}
	o.workers = pf.workers;
	o.gpus = pf.gpus;
	o.gpu_slots = pf.gpu_slots;
	o.state_dir = pf.state;
	o.python = pf.python;
	o.device = pf.device;
	o.redis = pf.redis;
	if (optind < argc) {
		fprintf(stderr, "%sunexpected argument '%s'\n", usage, argv[optind]);
		return EXIT_USAGE;
	}
	if ((rc = serve_run(&o, &d)) != 0) {
		fprintf(stderr, "cuda-agent serve: %s\n", d.msg);
		return rc == CA_ERR_INVALID ? EXIT_USAGE : EXIT_ENV;
	}
	return EXIT_OK;
}

int cmd_serve_worker(int argc, char **argv)
{
	const char *python = NULL, *device = "auto";
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--python") == 0)
			python = argv[i + 1];
		else if (strcmp(argv[i], "--device") == 0)
			device = argv[i + 1];
	}
	return serve_worker_main(python, device);
}

static const char worker_usage[] = "usage: cuda-agent worker --redis URL [options]\n";

static const char worker_help[] =
	"\n"
	"A GPU node of a fleet (docs/service.md, \"Scale-out\"): takes the jobs that `cuda-agent\n"
	"serve --redis URL` queues in Redis (the stream ca:jobs, consumer group ca-workers), runs\n"
	"them on its worker processes, one evaluation at a time per GPU, and stores each answer\n"
	"under its key. A job a dead node held is taken over once it has not been renewed for\n"
	"--reclaim-after seconds. Baselines measured here go to the fleet's table, and the\n"
	"fleet's come here, so every node rewards against the same numbers. SIGINT or SIGTERM\n"
	"finishes the jobs it holds, then exits.\n"
	"\n"
	"options:\n"
	"  --redis URL          the fleet's Redis (redis://[:PASSWORD@]HOST[:PORT][/DB] or\n"
	"                       unix:///PATH; or the password in $CUDA_AGENT_REDIS_PASSWORD)\n"
	"  --workers N          worker processes (default: --gpu-slots per GPU, given only its GPU;\n"
	"                       2 on a machine without one)\n"
	"  --gpus LIST          --gpu-slots workers per GPU index in LIST, each given only its GPU\n"
	"  --gpu-slots K        K workers per GPU (default 3), taking turns on it (as serve's)\n"
	"  --reclaim-after S    take over a job another node has not renewed for S seconds\n"
	"                       (default 60; a node renews its jobs every S/4 seconds)\n"
	"  --name NAME          this node's name in the consumer group (default host-pid)\n"
	"  --state DIR          job directories and worker logs (default <cache>/worker)\n"
	"  --python PATH        the torch bridge's Python ($CUDA_AGENT_PYTHON, else python3)\n"
	"  --device D           where the bridge runs the reference: auto (default), cuda, cpu\n"
	"  -q, --quiet          no log lines\n"
	"  -h, --help           this help\n";

int cmd_worker(int argc, char **argv)
{
	enum { O_RECLAIM = O_POOL_END, O_NAME };
	static const struct option longopts[] = {
		{"reclaim-after", required_argument, NULL, O_RECLAIM},
		{"name", required_argument, NULL, O_NAME},
		POOL_LONGOPTS,
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct fleet_node_opts o;
	struct pool_flags pf = {0};
	struct ca_diag d = {{0}};
	long n;
	int ch, rc;

	fleet_node_opts_defaults(&o);
	pf.device = o.device;
	optind = 1;
	while ((ch = getopt_long(argc, argv, "qh", longopts, NULL)) != -1) {
		int taken = pool_option("worker", ch, optarg, &pf);
		if (taken < 0)
			return EXIT_USAGE;
		if (taken)
			continue;
		switch (ch) {
		case O_RECLAIM:
			if (positive("worker", "--reclaim-after", optarg, 86400, &n))
				return EXIT_USAGE;
			o.reclaim_s = (double)n;
			break;
		case O_NAME:
			if (!optarg[0] || strlen(optarg) > 64 ||
			    strspn(optarg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					   "0123456789._-") != strlen(optarg)) {
				fprintf(stderr, "cuda-agent worker: --name is 1 to 64 of "
						"[A-Za-z0-9._-]\n");
				return EXIT_USAGE;
			}
			o.consumer = optarg;
			break;
		case 'h': printf("%s%s", worker_usage, worker_help); return EXIT_OK;
		default:
			fprintf(stderr, "%sTry 'cuda-agent worker --help'.\n", worker_usage);
			return EXIT_USAGE;
		}
	}
	o.redis_url = pf.redis;
	o.workers = pf.workers;
	o.gpus = pf.gpus;
	o.gpu_slots = pf.gpu_slots;
	o.state_dir = pf.state;
	o.python = pf.python;
	o.device = pf.device;
	if (optind < argc || !o.redis_url) {
		fprintf(stderr, "%s%s\n", worker_usage,
			optind < argc ? "unexpected argument" : "--redis URL is required");
		return EXIT_USAGE;
	}
	if ((rc = fleet_node_run(&o, &d)) != 0) {
		fprintf(stderr, "cuda-agent worker: %s\n", d.msg);
		return rc == CA_ERR_INVALID ? EXIT_USAGE : EXIT_ENV;
	}
	return EXIT_OK;
}
