/* workers: the service's evaluation worker processes (workers.h). */
#include "serve/workers.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/eval.h"
#include "workspace/workspace.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

json_t *serve_env_result(const char *code, const char *message)
{
	return json_pack("{s:s, s:n, s:n, s:n, s:{s:s, s:s}, s:s}", "schema", CA_RESULT_SCHEMA,
			 "reward", "reward_continuous", "correct", "reason", "code", code,
			 "message", message, "summary", message);
}

/* ---- the server's side ------------------------------------------------------------------------- */

static int slot_spawn(struct serve_slot *s, struct ca_diag *d)
{
	struct serve_pool *p = s->pool;
	char log[4200], gpu_env[48], lock_env[4240], cpus_env[CPU_LIST_MAX + 32];
	const char *argv[8];
	const char *env[4] = {NULL, NULL, NULL, NULL};
	struct ca_run_opts ro = {0};
	int n = 0;

	argv[n++] = p->exe;
	argv[n++] = "serve-worker";
	argv[n++] = "--device";
	argv[n++] = p->device;
	if (p->python[0]) {
		argv[n++] = "--python";
		argv[n++] = p->python;
	}
	argv[n] = NULL;
	if (s->gpu[0]) {
		snprintf(gpu_env, sizeof gpu_env, "CUDA_VISIBLE_DEVICES=%s", s->gpu);
		env[0] = gpu_env;
		ro.env_add = env;
	}
	if (s->gpu[0]) { /* the GPU's turns (eval/gpu_stage.h), with every process of the host */
		snprintf(lock_env, sizeof lock_env, "CUDA_AGENT_GPU_LOCK=%s/gpu-%s.lock", p->lock_dir,
			 s->gpu);
		env[1] = lock_env;
	}
	if (s->gpu[0] && p->timing_cpus[0]) {
		snprintf(cpus_env, sizeof cpus_env, "%s=%s", CPU_CLAIM_TIMING_ENV, p->timing_cpus);
		env[2] = cpus_env;
	}
	snprintf(log, sizeof log, "%s/worker-%d.log", p->log_dir, s->index);
	if (ca_child_spawn(&s->child, argv, &ro, log, d))
		return -1;
	s->running = true;
	return 0;
}

static void slot_kill(struct serve_slot *s)
{
	if (!s->running)
		return;
	ca_child_close(&s->child, 0.0);
	s->running = false;
}

/* One attempt: 0 with *res, CA_ERR_TIMEOUT (the deadline and the grace passed), or another
 * negative code when the child failed (died, garbled its answer). */
static int attempt(struct serve_slot *s, const struct job *j, json_t **res, struct ca_diag *d)
{
	json_t *spec = json_deep_copy(j->spec);
	char *text, *line = NULL;
	double left = j->deadline - ca_now();
	int rc;

	*res = NULL;
	json_object_set_new(spec, "timeout_s", json_real(left > 0 ? left : 0));
	text = json_dumps(spec, JSON_COMPACT);
	json_decref(spec);
	if (!text)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	rc = ca_child_write(&s->child, text, strlen(text), d);
	if (!rc)
		rc = ca_child_write(&s->child, "\n", 1, d);
	free(text);
	if (!rc)
		rc = ca_child_read_line(&s->child, SERVE_RESULT_MAX, left + SERVE_GRACE_S, &line, d);
	if (!rc) {
		json_error_t je;
		*res = json_loads(line, 0, &je);
		if (!json_is_object(*res)) {
			json_decref(*res);
			*res = NULL;
			rc = ca_fail(d, CA_ERR_PARSE, "the worker's answer is not a result: %s",
				     je.text);
		}
	}
	free(line);
	return rc;
}

/* Runs j on this slot's child, on a fresh child once more when the first one dies. */
static json_t *run_job(struct serve_slot *s, struct job *j)
{
	struct serve_pool *p = s->pool;
	char msg[CA_DIAG_MAX + 64];
	for (int a = 0; a < 2; a++) {
		struct ca_diag d = {{0}};
		json_t *res;
		int rc;
		if (a > 0)
			j->attempts++; /* read by others only once the job is finished */
		if (!s->running && slot_spawn(s, &d)) {
			snprintf(msg, sizeof msg, "cannot start an evaluation worker: %s", d.msg);
			return serve_env_result("env.no_worker", msg);
		}
		rc = attempt(s, j, &res, &d);
		if (!rc)
			return res;
		slot_kill(s);
		serve_metrics_count(p->m, &p->m->worker_restarts);
		if (rc == CA_ERR_TIMEOUT)
			return serve_env_result("env.deadline",
						"the request's deadline passed while it was evaluated");
		ca_log_warn("serve: worker %d failed on job %s (%s)%s", s->index, j->id, d.msg,
			    a == 0 ? "; retrying it on a fresh worker" : "");
		if (a == 0)
			serve_metrics_count(p->m, &p->m->retries);
		else
			snprintf(msg, sizeof msg,
				 "the evaluation worker died twice on this job (last: %s)", d.msg);
	}
	return serve_env_result("env.worker_died", msg);
}

static void *slot_main(void *arg)
{
	struct serve_slot *s = arg;
	struct serve_pool *p = s->pool;
	struct job *j;
	while ((j = job_queue_take(p->q))) {
		double now = ca_now();
		const char *dir = json_string_value(json_object_get(j->spec, "job_dir"));
		json_t *res;
		atomic_store(&s->busy, true);
		res = now >= j->deadline ? serve_env_result("env.deadline",
							    "the request's deadline passed before a "
							    "worker took it")
					 : run_job(s, j);
		atomic_store(&s->busy, false);
		atomic_fetch_add(&s->jobs, 1);
		serve_metrics_result(p->m, res, now - j->submitted);
		if (dir)
			ca_remove_tree(dir, NULL);
		job_queue_finish(p->q, j, res);
		job_queue_release(p->q, j);
	}
	slot_kill(s);
	return NULL;
}

/* Timing CPUs (eval/cpu_claim.h): one per slot, from this thread's CPUs, unless the operator
 * named them ($CUDA_AGENT_TIMING_CPUS) or turned pinning off. This thread, and so the slots'
 * threads and children started after it and every build and bridge they start, runs on the
 * others; the children get the list and claim from it. */
static void reserve_timing_cpus(struct serve_pool *p)
{
	cpu_set_t allowed, timing, rest;
	if (cpu_claim_wanted() == CPU_PIN_OFF || sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		return;
	if (cpu_claim_timing_cpus(&timing) == 0) {
		cpu_set_minus(&rest, &allowed, &timing);
	} else if (cpu_claim_reserve(&allowed, p->nslots, NULL, &timing, &rest) != 0) {
		return;
	}
	if (CPU_COUNT(&rest) == 0 || cpu_list_format(&timing, p->timing_cpus,
						     sizeof p->timing_cpus) != 0) {
		p->timing_cpus[0] = '\0';
		return;
	}
	(void)sched_setaffinity(0, sizeof rest, &rest);
	ca_log_info("timing CPUs %s (the timed processes'); builds and bridges run on the others",
		    p->timing_cpus);
}

int serve_pool_start(struct serve_pool *p, struct job_queue *q, struct serve_metrics *m, int n,
		     const char *gpus, int per_gpu, const char *python, const char *device,
		     const char *log_dir, struct ca_diag *d)
{
	ssize_t len;
	memset(p, 0, sizeof *p);
	p->q = q;
	p->m = m;
	len = readlink("/proc/self/exe", p->exe, sizeof p->exe - 1);
	if (len <= 0)
		return ca_fail(d, CA_ERR_IO, "cannot find this program (/proc/self/exe)");
	p->exe[len] = '\0';
	if (per_gpu < 1 || per_gpu > 16)
		return ca_fail(d, CA_ERR_INVALID, "--gpu-slots must be 1 to 16");
	ca_strlcpy(p->python, python ? python : "", sizeof p->python);
	ca_strlcpy(p->device, device ? device : "auto", sizeof p->device);
	ca_strlcpy(p->log_dir, log_dir, sizeof p->log_dir);
	if (gpus && gpus[0]) {
		/* One lock file per GPU for the whole host (this user's cache): two services, or two
		 * `worker --redis` nodes, on one GPU take turns as one pool's slots do. */
		char cache[4096];
		int rc = ca_cache_dir(cache, sizeof cache, d);
		if (!rc && ca_format(p->lock_dir, sizeof p->lock_dir, "%s/gpu-locks", cache))
			rc = ca_fail(d, CA_ERR_LIMIT, "the cache directory's path is too long");
		if (!rc)
			rc = ca_mkdirs(p->lock_dir, 0700, d);
		if (rc)
			return rc;
		for (const char *g = gpus; *g && p->nslots < SERVE_MAX_WORKERS;) {
			size_t k = strcspn(g, ",");
			if (k == 0 || k >= sizeof p->slots[0].gpu || strspn(g, "0123456789") != k)
				return ca_fail(d, CA_ERR_INVALID, "--gpus: \"%s\" is not a list of GPU "
								  "indices (e.g. 0,1,2)",
					       gpus);
			for (int i = 0; i < per_gpu && p->nslots < SERVE_MAX_WORKERS; i++) {
				struct serve_slot *s = &p->slots[p->nslots++];
				snprintf(s->gpu, sizeof s->gpu, "%.*s", (int)k, g);
			}
			g += k + (g[k] == ',');
		}
	} else {
		if (n < 1 || n > SERVE_MAX_WORKERS)
			return ca_fail(d, CA_ERR_INVALID, "--workers must be 1 to %d",
				       SERVE_MAX_WORKERS);
		p->nslots = n;
	}
	if (gpus && gpus[0])
		reserve_timing_cpus(p);
	for (int i = 0; i < p->nslots; i++) {
		struct serve_slot *s = &p->slots[i];
		s->pool = p;
		s->index = i;
		if (pthread_create(&s->thread, NULL, slot_main, s) != 0)
			return ca_fail(d, CA_ERR_NOMEM, "cannot start worker thread %d", i);
		s->thread_started = true;
	}
	return 0;
}

int serve_pool_start_auto(struct serve_pool *p, struct job_queue *q, struct serve_metrics *m,
			  int workers, const char *gpus, int per_gpu, const char *python,
			  const char *device, const char *log_dir, struct ca_diag *d)
{
	char auto_gpus[SERVE_MAX_WORKERS * 4] = "";
	int ngpu = 0;
	for (int i = 0; i < SERVE_MAX_WORKERS; i++) {
		char node[32];
		snprintf(node, sizeof node, "/dev/nvidia%d", i);
		if (access(node, F_OK) != 0)
			break;
		ngpu++;
		snprintf(auto_gpus + strlen(auto_gpus), sizeof auto_gpus - strlen(auto_gpus), "%s%d",
			 i ? "," : "", i);
	}
	if (!gpus && workers > 0 && ngpu > 0)
		ca_log_warn("%d workers share %d GPU%s: evaluations on one GPU at once disturb each "
			    "other's timings; --gpus gives each its own",
			    workers, ngpu, ngpu == 1 ? "" : "s");
	return serve_pool_start(p, q, m, workers > 0 ? workers : 2,
				gpus ? gpus : workers <= 0 && ngpu ? auto_gpus : NULL, per_gpu, python,
				device, log_dir, d);
}

size_t serve_pool_gpus(struct serve_pool *p, struct serve_gpu_load *out, size_t max)
{
	size_t n = 0;
	for (int i = 0; i < p->nslots; i++) {
		struct serve_slot *s = &p->slots[i];
		size_t k = 0;
		if (!s->gpu[0])
			continue;
		while (k < n && strcmp(out[k].gpu, s->gpu) != 0)
			k++;
		if (k == n) {
			if (n == max)
				continue;
			memset(&out[n], 0, sizeof out[n]);
			ca_strlcpy(out[n].gpu, s->gpu, sizeof out[n].gpu);
			n++;
		}
		out[k].workers++;
		out[k].running += atomic_load(&s->busy) ? 1u : 0u;
		out[k].jobs += atomic_load(&s->jobs);
	}
	return n;
}

void serve_pool_stop(struct serve_pool *p)
{
	for (int i = 0; i < p->nslots; i++)
		if (p->slots[i].thread_started) {
			pthread_join(p->slots[i].thread, NULL);
			p->slots[i].thread_started = false;
		}
}

/* ---- the child's side: cuda-agent serve-worker ------------------------------------------------ */

/* A session's workspace (sessions.h), described with this process's warm bridge. */
static json_t *make_workspace(struct eval_session *s, const json_t *job)
{
	struct workspace_opts wo = {0};
	struct workspace_report rep = {0};
	struct ca_diag d = {{0}};
	wo.task_dir = json_string_value(json_object_get(job, "task_dir"));
	wo.dir = json_string_value(json_object_get(job, "dir"));
	wo.python = s->python[0] ? s->python : NULL;
	wo.device = s->device;
	if (!wo.task_dir || !wo.dir)
		return serve_env_result("internal", "a workspace job needs task_dir and dir");
	if (eval_session_warm(s, &d) == 0 && bridge_wait_ready(&s->bridge, 180.0, &d) == 0)
		wo.bridge = &s->bridge;
	if (workspace_create(&wo, &rep, &d) != 0)
		return json_pack("{s:{s:s, s:s}}", "reason", "code",
				 rep.code[0] && strcmp(rep.code, "usage") != 0 ? rep.code
										 : "internal",
				 "message", d.msg);
	return json_pack("{s:{s:s, s:s}, s:s}", "reason", "code", "ok", "message",
			 "the workspace is ready", "dir", rep.dir);
}

static int job_opts(const json_t *job, struct eval_opts *o, struct ca_diag *d)
{
	const char *mode = json_string_value(json_object_get(job, "mode"));
	const char *fmt = json_string_value(json_object_get(job, "format"));
	const char *rules = json_string_value(json_object_get(job, "rules"));
	int rc;
	eval_opts_defaults(o);
	o->task_dir = json_string_value(json_object_get(job, "task_dir"));
	o->candidate_dir = json_string_value(json_object_get(job, "candidate"));
	if (!o->task_dir || !o->candidate_dir || !fmt || !mode)
		return ca_fail(d, CA_ERR_INVALID, "a job needs task_dir, candidate, format, mode");
	if (eval_mode_parse(mode, &o->mode))
		return ca_fail(d, CA_ERR_INVALID, "a job's mode is compile, verify, profile or eval");
	if ((rc = candidate_format_parse(fmt, &o->format, d)))
		return rc;
	if (rules && rules[0])
		return torch_profile_parse(rules, &o->rules, d);
	o->rules_by_format = true; /* kernelbench files under kernelbench, the rest cuda-agent */
	return 0;
}

int serve_worker_main(const char *python, const char *device)
{
	struct eval_session s;
	struct ca_diag d = {{0}};
	FILE *answers;
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int out = fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3); /* not inherited by its children */

	/* Answers go to our own copy of stdout; anything else that prints lands in the log. */
	if (out < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0 || !(answers = fdopen(out, "w"))) {
		fprintf(stderr, "serve-worker: cannot set up its output\n");
		return 5;
	}
	signal(SIGPIPE, SIG_IGN);
	eval_session_init(&s, python, device);
	if (eval_session_warm(&s, &d))
		ca_log_warn("serve-worker: torch bridge: %s", d.msg);
	while ((n = getline(&line, &cap, stdin)) > 0) {
		json_t *job = (size_t)n <= SERVE_RESULT_MAX ? json_loads(line, 0, NULL) : NULL;
		json_t *result = NULL;
		struct eval_opts o;
		char *text;
		memset(&d, 0, sizeof d);
		const char *kind = json_string_value(json_object_get(job, "kind"));
		if (json_is_object(job) && kind && strcmp(kind, "workspace") == 0)
			result = make_workspace(&s, job);
		else if (!json_is_object(job) || job_opts(job, &o, &d))
			result = serve_env_result("internal", d.msg[0] ? d.msg : "a malformed job");
		else if (eval_run(&s, &o, &result, &d) != 0)
			result = serve_env_result("internal", d.msg);
		text = json_dumps(result, JSON_COMPACT);
		json_decref(result);
		json_decref(job);
		if (!text || fprintf(answers, "%s\n", text) < 0 || fflush(answers) != 0) {
			free(text);
			break;
		}
		free(text);
	}
	free(line);
	eval_session_close(&s);
	fclose(answers);
	return 0;
}
