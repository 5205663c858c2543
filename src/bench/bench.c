/* bench: a benchmark run (bench.h): the compile pool, evaluations in one warm session, progress,
 * resume and the summary; the task tree and fingerprints are in scan.c (shared: bench_int.h). */
#include "bench/bench.h"
#include "bench/bench_int.h"

#include <errno.h>
#include <signal.h>
#include <string.h>

#include "bench/kb_harness.h"
#include "bench/kb_runs.h"
#include "store/results_db.h"
#include "report/report.h"
#include "task/task.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"
#include "util/pool.h"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* The rules a candidate is compiled under: --rules, else kernelbench for a KernelBench file
 * (candidate_fingerprint has resolved K to K.py) and cuda-agent for the other formats. */
static enum torch_profile bench_rules(const struct bench_opts *o, const char *cand)
{
	size_t n = strlen(cand);
	if (!o->eval.rules_by_format)
		return o->eval.rules;
	return n > 3 && strcmp(cand + n - 3, ".py") == 0 ? TORCH_PROFILE_KERNELBENCH
							  : TORCH_PROFILE_CUDA_AGENT;
}

/* One item of the compile pool (util/pool.h): `cuda-agent compile` of its candidate, which warms
 * the build cache ahead of its evaluation. Items without work (resumed, no candidate) and items
 * reached after a stop are marked ready at once; the evaluation loop waits on r->ready. */
static void compile_item(void *ctx, size_t i)
{
	struct run *r = ctx;
	struct item *it = &r->items[i];
	const char *argv[16];
	int a = 0;
	struct ca_run_opts ro = {.timeout_s = COMPILE_TIMEOUT_S, .stdout_cap = 4096,
				 .stderr_cap = 4096};
	struct ca_run_result res;
	struct ca_diag d = {{0}};

	pthread_mutex_lock(&r->lock);
	if (it->resumed || !it->has_candidate || r->stop || interrupted) {
		it->state = ITEM_READY;
		pthread_cond_broadcast(&r->ready);
		pthread_mutex_unlock(&r->lock);
		return;
	}
	it->state = ITEM_COMPILING;
	pthread_mutex_unlock(&r->lock);

	argv[a++] = r->self_exe;
	argv[a++] = "compile";
	argv[a++] = "--json";
	argv[a++] = "-q";
	argv[a++] = "--task";
	argv[a++] = it->task_dir;
	if (r->o->eval.arch) {
		argv[a++] = "--arch";
		argv[a++] = r->o->eval.arch;
	}
	if (r->o->python) {
		argv[a++] = "--python";
		argv[a++] = r->o->python;
	}
	argv[a++] = "--rules";
	argv[a++] = torch_profile_name(bench_rules(r->o, it->cand_dir));
	argv[a++] = it->cand_dir;
	argv[a] = NULL;
	memset(&res, 0, sizeof res);
	/* The verdict does not matter here: the evaluation builds again (a cache hit) and
	 * reports it. */
	if (ca_run(argv, &ro, &res, &d) == 0)
		ca_run_result_free(&res);

	pthread_mutex_lock(&r->lock);
	it->state = ITEM_READY;
	r->compiled++;
	pthread_cond_broadcast(&r->ready);
	pthread_mutex_unlock(&r->lock);
}

static void format_duration(double s, char *out, size_t size)
{
	long t = s < 0 ? 0 : (long)(s + 0.5);
	if (t >= 3600)
		snprintf(out, size, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
	else if (t >= 60)
		snprintf(out, size, "%ldm%02lds", t / 60, t % 60);
	else
		snprintf(out, size, "%lds", t);
}

struct progress {
	bool tty, quiet;
	double t0;
	double eval_seconds; /* sum over this run's evaluations */
	size_t done, evaluated, passed;
};

static void progress_show(struct progress *p, struct run *r, const char *key, const char *what)
{
	char elapsed[32], eta[32] = "?", line[512], shown[96];
	size_t remaining = r->n - p->done;
	if (p->quiet)
		return;
	format_duration(ca_now() - p->t0, elapsed, sizeof elapsed);
	if (p->evaluated > 0)
		format_duration(p->eval_seconds / (double)p->evaluated * (double)remaining, eta,
				sizeof eta);
	else if (remaining == 0)
		ca_strlcpy(eta, "0s", sizeof eta);
	ca_printable(shown, key ? key : "", sizeof shown);
	snprintf(line, sizeof line, "[%zu/%zu] %.0f%% passed %zu, compiled %zu | %s, ETA %s%s%s%s%s",
		 p->done, r->n, r->n ? 100.0 * (double)p->done / (double)r->n : 100.0, p->passed,
		 r->compiled, elapsed, eta, key ? " | " : "", shown, what ? ": " : "",
		 what ? what : "");
	if (p->tty)
		fprintf(stderr, "\r\033[K%s", line);
	else
		fprintf(stderr, "%s\n", line);
	fflush(stderr);
}

static bool result_passed(const json_t *result)
{
	return json_is_true(json_object_get(result, "correct"));
}

static const char *result_reason(const json_t *result)
{
	const char *c = json_string_value(json_object_get(json_object_get(result, "reason"), "code"));
	return c ? c : "";
}

struct collect {
	struct report *report;
	FILE *jsonl;
	struct bench_summary *s;
	const struct run *r;
};

static int collect_one(const char *key, json_t *result, void *ctx)
{
	struct collect *c = ctx;
	struct ca_diag d = {{0}};
	char *text;
	if (c->r->kb_results) {
		json_t *kb = kb_results_lookup(c->r->kb_results, key, c->r->o->sample);
		if (kb)
			json_object_set_new(result, "kernelbench_eval", kb);
	}
	if (result_passed(result))
		c->s->passed++;
	if (!results_reason_final(result_reason(result)))
		c->s->env_failed++;
	text = json_dumps(result, JSON_COMPACT | JSON_REAL_PRECISION(9));
	if (!text || fprintf(c->jsonl, "%s\n", text) < 0) {
		free(text);
		return CA_ERR_IO;
	}
	free(text);
	if (report_add(c->report, result, &d))
		ca_log_warn("report: %s: %s", key, d.msg);
	return 0;
}

/* results.jsonl from the store (all tasks, task order), then the report. */
static int finish(struct run *r, struct results_db *db, struct bench_summary *s,
		  struct ca_diag *d)
{
	char jsonl[PATH_MAX], tmp[PATH_MAX], html[PATH_MAX], title[PATH_MAX + 64];
	struct collect c = {.s = s, .r = r};
	char **keys = malloc((r->n ? r->n : 1) * sizeof *keys);
	int rc;

	if (!keys)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < r->n; i++)
		keys[i] = r->items[i].key;
	if (ca_path_join(jsonl, sizeof jsonl, r->o->out_dir, "results.jsonl") ||
	    ca_path_join(html, sizeof html, r->o->out_dir, "report.html") ||
	    snprintf(tmp, sizeof tmp, "%s.tmp", jsonl) >= (int)sizeof tmp) {
		free(keys);
		return ca_fail(d, CA_ERR_LIMIT, "--out path too long");
	}
	if ((rc = report_new(&c.report, d))) {
		free(keys);
		return rc;
	}
	c.jsonl = fopen(tmp, "w");
	if (!c.jsonl) {
		rc = ca_fail(d, CA_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	s->passed = s->env_failed = 0;
	rc = results_db_each(db, keys, r->n, collect_one, &c, d);
	if (fclose(c.jsonl) != 0 && !rc)
		rc = ca_fail(d, CA_ERR_IO, "cannot write %s", tmp);
	if (!rc && rename(tmp, jsonl) != 0)
		rc = ca_fail(d, CA_ERR_IO, "cannot rename %s: %s", tmp, strerror(errno));
	if (rc) {
		unlink(tmp);
		goto out;
	}
	snprintf(title, sizeof title, "cuda-agent bench: %s", r->o->tasks_dir);
	rc = report_write_html(c.report, html, r->o->title ? r->o->title : title, d);
	if (!rc) {
		report_print(c.report, stdout);
		printf("\nresults: %s (and bench.sqlite)\nreport: %s\n", jsonl, html);
		fflush(stdout);
	}
out:
	report_free(c.report);
	free(keys);
	return rc;
}

static void free_run(struct run *r)
{
	for (size_t i = 0; i < r->n; i++) {
		free(r->items[i].key);
		free(r->items[i].task_dir);
		free(r->items[i].cand_dir);
	}
	free(r->items);
	r->items = NULL;
	r->n = r->cap = 0;
}

/* Items from..n-1 moved down to kept.. (a failure keeps them, for free_run). */
static int keep_rest(struct run *r, size_t kept, size_t from, int rc)
{
	for (size_t j = from; j < r->n; j++)
		r->items[kept++] = r->items[j];
	r->n = kept;
	return rc;
}

/* Each item's candidate and fingerprint; with skip_missing, the items without a candidate are
 * dropped (r->n shrinks). */
static int find_candidates(struct run *r, struct ca_diag *d)
{
	size_t kept = 0;
	for (size_t i = 0; i < r->n; i++) {
		struct item *it = &r->items[i];
		char cand[PATH_MAX];
		int rc;
		if (strcmp(it->key, ".") == 0
			    ? ca_strlcpy(cand, r->o->candidates_dir, sizeof cand)
			    : ca_path_join(cand, sizeof cand, r->o->candidates_dir, it->key))
			return keep_rest(r, kept, i,
					 ca_fail(d, CA_ERR_LIMIT, "path too long: %s", it->key));
		if (!(it->cand_dir = strdup(cand)))
			return keep_rest(r, kept, i, ca_fail(d, CA_ERR_NOMEM, "out of memory"));
		if ((rc = bench_candidate_fingerprint(r, it, d)))
			return keep_rest(r, kept, i,
					 ca_fail_prefix(d, rc, "candidate for %s", it->key));
		if (r->o->skip_missing && !it->has_candidate) {
			free(it->key);
			free(it->task_dir);
			free(it->cand_dir);
			continue;
		}
		r->items[kept++] = *it;
	}
	r->n = kept;
	return 0;
}

static int prepare_items(struct run *r, struct results_db *db, struct bench_summary *s,
			 struct ca_diag *d)
{
	for (size_t i = 0; i < r->n; i++) {
		struct item *it = &r->items[i];
		struct task t;
		struct ca_diag td = {{0}};
		int rc;
		memset(&t, 0, sizeof t);
		if (task_load(&t, it->task_dir, &td) == 0)
			ca_strlcpy(it->task_hash, t.hash, sizeof it->task_hash);
		task_free(&t);
		if (!r->o->fresh && it->task_hash[0]) {
			struct results_key k = {it->key, it->task_hash, it->cand_fp, r->settings_fp};
			bool done = false;
			if ((rc = results_db_done(db, &k, &done, d)))
				return rc;
			it->resumed = done;
			if (done)
				s->resumed++;
		}
	}
	return 0;
}

/* KernelBench's eval_results.json: --kernelbench-results, else the one in the candidates'
 * directory (a KernelBench run directory) when there is one; a found file that does not parse is
 * skipped with a warning, a named one is an error. */
static int load_kb_results(struct run *r, const char *named, struct ca_diag *d)
{
	char found[PATH_MAX];
	const char *path = named;
	int rc;
	if (!path) {
		if (ca_path_join(found, sizeof found, r->o->candidates_dir, "eval_results.json") ||
		    !ca_is_file(found))
			return 0;
		path = found;
	}
	rc = kb_results_load(path, &r->kb_results, d);
	if (rc && !named) {
		ca_log_warn("ignoring %s: %s", path, d->msg);
		memset(d, 0, sizeof *d);
		return 0;
	}
	if (!rc && !r->o->quiet)
		fprintf(stderr, "bench: KernelBench's verdicts from %s are shown beside ours\n", path);
	return rc;
}

/* Everything before the first evaluation: the task tree scanned, KernelBench's results read,
 * the results database opened and the items prepared (resumed ones marked). */
static int bench_prepare(struct run *r, struct results_db *db, struct bench_summary *s,
			 char *jsonl_path, size_t jsonl_size, struct ca_diag *d)
{
	const struct bench_opts *o = r->o;
	char db_path[PATH_MAX], kb_path[PATH_MAX], kb_log[PATH_MAX];
	int rc;

	if (!ca_is_dir(o->tasks_dir))
		return ca_fail(d, CA_ERR_NOTFOUND, "task directory %s does not exist", o->tasks_dir);
	if (!ca_is_dir(o->candidates_dir))
		return ca_fail(d, CA_ERR_NOTFOUND, "candidate directory %s does not exist",
			       o->candidates_dir);
	if (o->self_exe) {
		ca_strlcpy(r->self_exe, o->self_exe, sizeof r->self_exe);
	} else {
		ssize_t n = readlink("/proc/self/exe", r->self_exe, sizeof r->self_exe - 1);
		if (n <= 0)
			return ca_fail(d, CA_ERR_IO, "cannot find the cuda-agent binary: %s",
				       strerror(errno));
		r->self_exe[n] = '\0';
	}
	if ((rc = bench_scan(r, o->tasks_dir, "", 0, d)))
		return rc;
	if (r->n == 0)
		return ca_fail(d, CA_ERR_NOTFOUND,
			       "no task under %s (a task is a directory holding model.py)",
			       o->tasks_dir);
	if ((rc = find_candidates(r, d)))
		return rc;
	if (r->n == 0)
		return ca_fail(d, CA_ERR_NOTFOUND, "no task under %s has a candidate under %s",
			       o->tasks_dir, o->candidates_dir);
	s->tasks = r->n;
	bench_settings_fingerprint(o, r->settings_fp);
	if ((rc = ca_mkdirs(o->out_dir, 0755, d)))
		return rc;
	if (ca_path_join(db_path, sizeof db_path, o->out_dir, "bench.sqlite") ||
	    ca_path_join(jsonl_path, jsonl_size, o->out_dir, "results.jsonl") ||
	    ca_path_join(kb_path, sizeof kb_path, o->out_dir, "kernelbench_eval.json") ||
	    ca_path_join(kb_log, sizeof kb_log, o->out_dir, "kernelbench_eval.log"))
		return ca_fail(d, CA_ERR_LIMIT, "--out path too long");
	if (o->kb_harness) {
		struct kb_harness_opts ko = {.python = o->python, .kernelbench = o->kb_harness,
					     .tasks_dir = o->tasks_dir,
					     .candidates_dir = o->candidates_dir,
					     .out_path = kb_path, .log_path = kb_log,
					     .device = o->device, .sample = o->sample,
					     .timeout_s = o->kb_timeout_s, .fresh = o->fresh,
					     .quiet = o->quiet, .stop = &interrupted};
		if ((rc = kb_harness_run(&ko, d)))
			return rc;
	}
	if ((rc = load_kb_results(r, o->kb_harness ? kb_path : o->kb_results, d)))
		return rc;
	if ((rc = results_db_open(db, db_path, d)))
		return rc;
	return prepare_items(r, db, s, d);
}

/* Waits for the item's compile (timed, to notice a signal: handlers cannot signal a cond). */
static void wait_compiled(struct run *r, const struct item *it)
{
	pthread_mutex_lock(&r->lock);
	while (it->state != ITEM_READY && !interrupted) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&r->ready, &r->lock, &ts);
	}
	pthread_mutex_unlock(&r->lock);
}

/* One result into the database and results.jsonl, and onto the progress line. */
static int store_result(struct run *r, struct results_db *db, FILE *jsonl, const struct item *it,
			const json_t *result, struct progress *pg, struct ca_diag *d)
{
	struct results_key k = {it->key, it->task_hash[0] ? it->task_hash : "unloadable",
				it->cand_fp, r->settings_fp};
	char *text = json_dumps(result, JSON_COMPACT | JSON_REAL_PRECISION(9));
	char what[160];
	int rc = results_db_put(db, &k, result, d);
	if (text) {
		fprintf(jsonl, "%s\n", text);
		fflush(jsonl);
	}
	free(text);
	snprintf(what, sizeof what, "%s%s", result_reason(result),
		 result_passed(result) ? " (correct)" : "");
	progress_show(pg, r, it->key, what);
	return rc;
}

/* Evaluates every item in order as its compile finishes, in one warm session, until done, a
 * failure to evaluate, or a signal. */
static int evaluate_all(struct run *r, struct results_db *db, FILE *jsonl, struct progress *pg,
			struct bench_summary *s, struct ca_diag *d)
{
	const struct bench_opts *o = r->o;
	struct eval_session session;
	int rc = 0;

	eval_session_init(&session, o->python, o->device);
	for (size_t i = 0; i < r->n && !interrupted; i++) {
		struct item *it = &r->items[i];
		struct eval_opts eo = o->eval;
		json_t *result = NULL;
		double t0;

		if (it->resumed) {
			pg->done++;
			continue;
		}
		wait_compiled(r, it);
		if (interrupted)
			break;
		progress_show(pg, r, it->key, "evaluating");
		eo.mode = EVAL_FULL;
		eo.task_dir = it->task_dir;
		eo.candidate_dir = it->cand_dir;
		t0 = ca_now();
		if ((rc = eval_run(&session, &eo, &result, d))) {
			ca_fail_prefix(d, rc, "%s", it->key);
			break;
		}
		if (interrupted) { /* cut short: not stored, evaluated again next time */
			json_decref(result);
			break;
		}
		pg->eval_seconds += ca_now() - t0;
		pg->evaluated++;
		pg->done++;
		s->evaluated++;
		if (result_passed(result))
			pg->passed++;
		rc = store_result(r, db, jsonl, it, result, pg, d);
		json_decref(result);
		if (rc)
			break;
	}
	eval_session_close(&session);
	return rc;
}

/* Stops the compile pool (items not yet taken are never compiled) and joins it. */
static void pool_stop(struct run *r, struct ca_pool *pool)
{
	pthread_mutex_lock(&r->lock);
	r->stop = true;
	pthread_cond_broadcast(&r->ready);
	pthread_mutex_unlock(&r->lock);
	ca_pool_stop(pool);
	ca_pool_join(pool);
}

int bench_run(const struct bench_opts *o, struct bench_summary *s, struct ca_diag *d)
{
	struct run r;
	struct results_db db = {0};
	struct progress pg = {0};
	struct sigaction sa, old_int, old_term;
	struct ca_pool pool;
	char jsonl_path[PATH_MAX];
	FILE *jsonl = NULL;
	int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
	int rc;

	memset(s, 0, sizeof *s);
	memset(&r, 0, sizeof r);
	r.o = o;
	pthread_mutex_init(&r.lock, NULL);
	pthread_cond_init(&r.ready, NULL);
	pg.t0 = ca_now();
	pg.tty = isatty(STDERR_FILENO) == 1;
	pg.quiet = o->quiet;
	if (jobs < 1)
		jobs = 1;
	if (jobs > BENCH_MAX_JOBS)
		jobs = BENCH_MAX_JOBS;

	/* From here: KernelBench's harness (in bench_prepare) stops on them too. */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	interrupted = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	if ((rc = bench_prepare(&r, &db, s, jsonl_path, sizeof jsonl_path, d)))
		goto restore;
	jsonl = fopen(jsonl_path, "a");
	if (!jsonl) {
		rc = ca_fail(d, CA_ERR_IO, "cannot write %s: %s", jsonl_path, strerror(errno));
		goto restore;
	}
	if (!o->quiet)
		fprintf(stderr,
			"bench: %zu tasks under %s, %zu already done (resumed), %d compile job%s; "
			"results in %s\n",
			r.n, o->tasks_dir, s->resumed, jobs, jobs == 1 ? "" : "s", o->out_dir);

	if (ca_pool_start(&pool, r.n, jobs, compile_item, &r) == 0)
		rc = ca_fail(d, CA_ERR_NOMEM, "cannot start a compile thread");
	else
		rc = evaluate_all(&r, &db, jsonl, &pg, s, d);
	if (pg.tty && !o->quiet)
		fputc('\n', stderr);
	pool_stop(&r, &pool);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	fclose(jsonl);
	jsonl = NULL;
	s->interrupted = interrupted != 0;
	if (!rc) {
		rc = finish(&r, &db, s, d);
		if (!rc && s->interrupted)
			rc = ca_fail(d, CA_ERR_INTERRUPTED,
				     "interrupted: %zu of %zu tasks have results; run the same command "
				     "again to resume",
				     s->evaluated + s->resumed, r.n);
	}
	goto out;
restore:
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
out:
	if (jsonl)
		fclose(jsonl);
	results_db_close(&db);
	s->seconds = ca_now() - pg.t0;
	free_run(&r);
	json_decref(r.kb_results);
	pthread_mutex_destroy(&r.lock);
	pthread_cond_destroy(&r.ready);
	return rc;
}
