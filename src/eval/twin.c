/* twin: the reference process a session keeps (eval/twin.h). */
#include "eval/twin.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <jansson.h>

#include "protocol/wire.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"

void eval_twin_init(struct eval_twin *t)
{
	memset(t, 0, sizeof *t);
	t->child.pid = -1;
	t->child.to_child = t->child.from_child = -1;
}

/* Greeted, idle, and nothing it did failed: it can be sent a command. */
static bool answers(const struct eval_twin *t)
{
	return t->started && t->greeted && !t->failed && !t->proc.cmd && !t->proc.dead &&
	       !t->proc.timed_out && !t->proc.flooded && !t->proc.fatal;
}

/* It answers and its process still lives: it may serve the next evaluation. */
static bool healthy(struct eval_twin *t)
{
	return answers(t) && ca_child_alive(&t->child);
}

void eval_twin_end(struct eval_twin *t)
{
	struct ca_run_result fate;
	json_t *ans = NULL;
	struct loop_fail f = {0};
	bool clean = false;
	if (t->started) {
		if (answers(t))
			clean = cand_proc_command(&t->proc, WIRE_CMD_QUIT, NULL, &ans, &f) == 0;
		cand_proc_resume(&t->proc); /* a stopped process must run to exit */
		memset(&fate, 0, sizeof fate);
		ca_child_finish(&t->child, clean ? 10.0 : 0.5, &fate);
		cand_proc_free(&t->proc);
		ca_log_debug("the reference process ended after %d evaluations", t->served);
	}
	if (t->dir[0])
		ca_remove_tree(t->dir, NULL);
	eval_twin_init(t);
}

static int spawn(struct eval_twin *t, const char *worker, const char *runs_base,
		 struct ca_diag *d)
{
	const char *env[] = {"CUDA_CACHE_DISABLE=1", NULL};
	/* killed with the thread that keeps it: stopped between evaluations, it would not see
	 * its command pipe close */
	struct ca_run_opts ro = {.env_add = env, .kill_with_parent = true};
	char plan_path[PATH_MAX];
	const char *argv[] = {worker, plan_path, NULL};
	json_t *plan;
	int rc;

	if ((rc = ca_strlcpy(t->worker, worker, sizeof t->worker) ? CA_ERR_LIMIT : 0) ||
	    (rc = ca_make_temp_dir(runs_base, "run-twin-", t->dir, sizeof t->dir, d)) ||
	    (rc = ca_format(plan_path, sizeof plan_path, "%s/plan.json", t->dir)) ||
	    (rc = ca_format(t->err_path, sizeof t->err_path, "%s/stderr", t->dir)))
		return rc == CA_ERR_LIMIT ? ca_fail(d, rc, "path too long") : rc;
	plan = json_pack("{s:i, s:i, s:b}", "version", WIRE_PLAN_VERSION, "device", 0,
			 "reference", 1);
	rc = json_dump_file(plan, plan_path, JSON_COMPACT);
	json_decref(plan);
	if (rc != 0)
		return ca_fail(d, CA_ERR_IO, "cannot write %s", plan_path);
	if ((rc = ca_child_spawn(&t->child, argv, &ro, t->err_path, d)))
		return rc;
	t->started = true;
	return 0;
}

int eval_twin_take(struct eval_twin *t, const char *worker, const char *runs_base, double limit_s,
		   bool *fresh, struct ca_diag *d)
{
	int rc;
	*fresh = false;
	if (t->started && (!healthy(t) || strcmp(t->worker, worker) != 0))
		eval_twin_end(t);
	if (!t->started) {
		eval_twin_init(t);
		if ((rc = spawn(t, worker, runs_base, d))) {
			eval_twin_end(t);
			return rc;
		}
		cand_proc_init(&t->proc, &t->child, true, limit_s, t->err_path);
		*fresh = true;
	}
	/* Its directory is a run-* directory: touched so that the stale-run sweep of a later
	 * evaluation (a day old) leaves a twin that is still in use alone */
	(void)utimes(t->dir, NULL);
	/* The watchdog counts this evaluation's running time only */
	t->proc.limit_s = limit_s;
	t->proc.total_limit_s = PROC_TOTAL_FACTOR * limit_s;
	t->proc.ran_s = 0;
	t->proc.cmd_from_s = 0;
	t->served++;
	return 0;
}

int eval_twin_hello(struct eval_twin *t, struct ca_diag *d)
{
	struct loop_fail f = {0};
	if (cand_proc_hello(&t->proc, &f) == 0) {
		t->greeted = true;
		return 0;
	}
	ca_fail(d, CA_ERR_CHILD, "%s", f.message);
	return -1;
}

int eval_twin_pin(struct eval_twin *t, int cpu)
{
	char path[64];
	cpu_set_t set;
	struct dirent *ent;
	DIR *dp;
	int rc = 0, n = 0;

	CPU_ZERO(&set);
	if (cpu >= 0)
		CPU_SET((size_t)cpu, &set);
	else if (sched_getaffinity(0, sizeof set, &set) != 0)
		return -1;
	snprintf(path, sizeof path, "/proc/%d/task", (int)t->child.pid);
	if (!t->started || !(dp = opendir(path)))
		return -1;
	while ((ent = readdir(dp)) != NULL) {
		char *end;
		long tid = strtol(ent->d_name, &end, 10);
		if (ent->d_name[0] == '.' || *end || tid <= 0)
			continue;
		if (sched_setaffinity((pid_t)tid, sizeof set, &set) != 0 && errno != ESRCH)
			rc = -1;
		n++;
	}
	closedir(dp);
	return n > 0 ? rc : -1;
}

/* CUDA_AGENT_KEEP_REFERENCE=0 (eval/twin.h) */
static bool keeping(void)
{
	const char *keep = getenv(TWIN_KEEP_ENV);
	return !keep || strcmp(keep, "0") != 0;
}

void eval_twin_give(struct eval_twin *t)
{
	if (t->started && (!healthy(t) || !keeping()))
		eval_twin_end(t);
}

int eval_twin_send(struct eval_twin *t, json_t *fields, struct loop_fail *f)
{
	int rc = cand_proc_send(&t->proc, WIRE_CMD_EMPTY, fields, f);
	if (rc)
		t->failed = true;
	return rc;
}

int eval_twin_wait(struct eval_twin *t, struct loop_fail *f)
{
	json_t *ans = NULL;
	int rc = cand_proc_wait(&t->proc, &ans, f);
	if (rc)
		t->failed = true;
	return rc;
}

bool eval_twin_waiting(const struct eval_twin *t)
{
	return t->proc.cmd != NULL;
}
