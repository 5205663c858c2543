/* Unit tests for the service's parts that need no HTTP: the request parser and its file-name
 * rule (src/serve/request.c), the job queue (src/serve/queue.c: capacity, priorities, one
 * answer per job, idempotency keys, closing), the metrics text (src/serve/metrics.c), the Redis
 * URL parser (src/serve/redis.c) and the fleet's file packing (src/serve/fleet_files.c). The
 * HTTP side and the worker processes are tested end to end in tests/integration/serve.sh. */
#define TEST_NAME "serve"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/fleet.h"
#include "serve/metrics.h"
#include "serve/redis.h"
#include "serve/websocket.h"
#include "serve/queue.h"
#include "serve/request.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/str.h"

static int parse(const char *body, struct serve_request *r, char *msg, size_t size)
{
	struct ca_diag d = {{0}};
	int rc = serve_request_parse(r, body, strlen(body), &d);
	ca_strlcpy(msg, d.msg, size);
	return rc;
}

static void expect_error(const char *body, int code, const char *needle)
{
	struct serve_request *r = malloc(sizeof *r);
	char msg[512];
	int rc = parse(body, r, msg, sizeof msg);
	free(r);
	if (rc != code || !strstr(msg, needle))
		fail_msg("%s\n  got %d '%s', want %d containing '%s'", body, rc, msg, code, needle);
}

static void test_path_rule(void **state)
{
	static const char *const good[] = {"kernels/k.cu", "a", "x/y/z.py", "n..", "a.b_c-d+e",
					   NULL};
	static const char *const bad[] = {"",          "/etc/passwd", "../x",    "a/../b",
					  "a/./b",     "./a",         "a//b",    "a/",
					  ".hidden",   "a/.git/x",    "a b",     "a\\b",
					  "k\xc3\xa9.cu", "a/b/c/d/e/f/g/h/i", NULL};
	(void)state;
	for (const char *const *p = good; *p; p++)
		if (!serve_path_ok(*p))
			fail_msg("'%s' should be accepted", *p);
	for (const char *const *p = bad; *p; p++)
		if (serve_path_ok(*p))
			fail_msg("'%s' should be refused", *p);
	char longp[SERVE_MAX_PATH + 2];
	memset(longp, 'a', sizeof longp - 1);
	longp[sizeof longp - 1] = '\0';
	assert_false(serve_path_ok(longp));
	longp[SERVE_MAX_PATH] = '\0';
	assert_true(serve_path_ok(longp));
}

static void test_request_ok(void **state)
{
	struct serve_request *r = malloc(sizeof *r);
	char msg[512];
	(void)state;
	assert_int_equal(parse("{\"task\": {\"id\": \"kernelbench/level1/19_ReLU\"}, \"candidate\": "
			       "{\"format\": \"native\", \"files\": {\"kernels/a.cu\": \"A\", "
			       "\"kernels/inc/b.h\": \"BB\"}}, \"mode\": \"verify\", \"rules\": "
			       "\"cuda-agent\", \"deadline_s\": 12.5, \"idempotency_key\": \"k\"}",
			       r, msg, sizeof msg),
			 0);
	assert_int_equal(r->task_by, SERVE_TASK_ID);
	assert_string_equal(r->task_ref, "kernelbench/level1/19_ReLU");
	assert_string_equal(r->format, "native");
	assert_int_equal(r->nfiles, 2);
	assert_string_equal(r->mode, "verify");
	assert_true(r->deadline_s == 12.5);
	assert_string_equal(r->key, "k");
	serve_request_free(r);

	assert_int_equal(parse("{\"task\": {\"files\": {\"model.py\": \"m\"}}, \"candidate\": "
			       "{\"format\": \"kernelbench\", \"files\": {\"sol.py\": \"s\"}}}",
			       r, msg, sizeof msg),
			 0);
	assert_int_equal(r->task_by, SERVE_TASK_INLINE);
	assert_string_equal(r->mode, "eval"); /* defaults */
	assert_true(r->deadline_s == SERVE_DEADLINE_DEFAULT_S);
	assert_string_equal(r->rules, "");
	assert_string_equal(r->key, "");
	{ /* written out: the task and the one file eval takes */
		char dir[] = "/tmp/ca-test-serve-XXXXXX", job[PATH_MAX], cand[PATH_MAX],
		     task[PATH_MAX];
		struct ca_diag d = {{0}};
		char *text = NULL;
		assert_non_null(mkdtemp(dir));
		snprintf(job, sizeof job, "%s/job", dir);
		assert_int_equal(serve_request_write(r, job, cand, sizeof cand, task, sizeof task,
						     &d),
				 0);
		assert_non_null(strstr(cand, "/candidate/sol.py"));
		assert_non_null(strstr(task, "/job/task"));
		assert_int_equal(ca_read_file(cand, 64, &text, NULL, &d), 0);
		assert_string_equal(text, "s");
		free(text);
		/* a job directory is never reused */
		assert_int_not_equal(serve_request_write(r, job, cand, sizeof cand, task,
							 sizeof task, &d),
				     0);
		ca_remove_tree(dir, NULL);
	}
	serve_request_free(r);
	free(r);
}

static void test_request_errors(void **state)
{
	(void)state;
	expect_error("{", CA_ERR_PARSE, "not JSON");
	expect_error("[1]", CA_ERR_INVALID, "JSON object");
	expect_error("{\"task\": {\"id\": \"a\"}}", CA_ERR_INVALID, "required");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"native\", \"files\": "
		     "{\"kernels/a.cu\": \"x\"}}, \"tsak\": 1}",
		     CA_ERR_INVALID, "unknown field \"tsak\"");
	expect_error("{\"task\": {\"id\": \"a\", \"hash\": \"b\"}, \"candidate\": {\"format\": "
		     "\"native\", \"files\": {\"kernels/a.cu\": \"x\"}}}",
		     CA_ERR_INVALID, "exactly one");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"native\", \"files\": "
		     "{\"../a.cu\": \"x\"}}}",
		     CA_ERR_INVALID, "not a relative path");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"native\", \"files\": "
		     "{\"a.cu\": \"x\"}}}",
		     CA_ERR_INVALID, "live in kernels/");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"kernelbench\", "
		     "\"files\": {\"a.py\": \"x\", \"b.py\": \"y\"}}}",
		     CA_ERR_INVALID, "one .py file");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"cuda\", \"files\": "
		     "{\"a.py\": \"x\"}}}",
		     CA_ERR_INVALID, "not one of");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"native\", \"files\": "
		     "{\"kernels/a.cu\": \"x\\u0000y\"}}}",
		     CA_ERR_PARSE, "not allowed"); /* jansson refuses NUL bytes in strings */
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"native\", \"files\": "
		     "{\"kernels/a.cu\": 3}}}",
		     CA_ERR_INVALID, "must be text");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"native\", \"files\": "
		     "{\"kernels/a.cu\": \"x\"}}, \"deadline_s\": 0}",
		     CA_ERR_INVALID, "deadline_s");
	expect_error("{\"task\": {\"id\": \"a\"}, \"candidate\": {\"format\": \"native\", \"files\": "
		     "{\"kernels/a.cu\": \"x\"}}, \"deadline_s\": 1e9}",
		     CA_ERR_INVALID, "deadline_s");
	expect_error("{\"task\": {\"id\": \"a\", \"id\": \"b\"}, \"candidate\": {}}", CA_ERR_PARSE,
		     "duplicate");
	expect_error("{\"task\": {\"id\": \"\\u0001\"}, \"candidate\": {\"format\": \"native\", "
		     "\"files\": {\"kernels/a.cu\": \"x\"}}}",
		     CA_ERR_INVALID, "control character");
	/* invalid UTF-8 (a lone continuation byte) */
	expect_error("{\"task\": {\"id\": \"\x80\"}}", CA_ERR_PARSE, "not JSON");
	{ /* too many files */
		char *body = malloc(64 * 1024);
		size_t n = (size_t)sprintf(body, "{\"task\": {\"id\": \"a\"}, \"candidate\": "
						 "{\"format\": \"workdir\", \"files\": {");
		for (int i = 0; i <= SERVE_MAX_FILES; i++)
			n += (size_t)sprintf(body + n, "%s\"f%d\": \"x\"", i ? ", " : "", i);
		strcpy(body + n, "}}}");
		expect_error(body, CA_ERR_LIMIT, "at most");
		free(body);
	}
}

/* ---- the queue --------------------------------------------------------------------------------- */

static json_t *spec(int n)
{
	return json_pack("{s:i}", "n", n);
}

static void test_queue_capacity_and_order(void **state)
{
	struct job_queue q;
	struct ca_diag d = {{0}};
	struct job *a, *b, *c, *x, *t;
	bool dup;
	(void)state;
	assert_int_equal(job_queue_init(&q, 2, 8, &d), 0);
	assert_int_equal(job_queue_submit(&q, "", JOB_PRIO_NORMAL, spec(1), 1e9, &a, &dup, &d), 0);
	assert_int_equal(job_queue_submit(&q, "", JOB_PRIO_HIGH, spec(2), 1e9, &b, &dup, &d), 0);
	assert_int_equal(job_queue_submit(&q, "", JOB_PRIO_NORMAL, spec(3), 1e9, &x, &dup, &d),
			 CA_ERR_LIMIT); /* full: the caller answers 429 */
	assert_null(x);
	assert_non_null(strstr(d.msg, "full"));
	t = job_queue_take(&q); /* high priority first */
	assert_ptr_equal(t, b);
	assert_int_equal(t->state, JOB_RUNNING);
	assert_int_equal(t->attempts, 1);
	assert_int_equal(job_queue_submit(&q, "", JOB_PRIO_NORMAL, spec(3), 1e9, &c, &dup, &d), 0);
	job_queue_finish(&q, t, json_string("two"));
	job_queue_finish(&q, t, json_string("again")); /* answered once */
	json_t *res = job_queue_wait(&q, b, ca_now() + 1);
	assert_string_equal(json_string_value(res), "two");
	json_decref(res);
	job_queue_release(&q, t);
	t = job_queue_take(&q);
	assert_ptr_equal(t, a); /* then in order */
	assert_null(job_queue_wait(&q, a, ca_now() + 0.05)); /* not done: times out */
	job_queue_finish(&q, t, json_null());
	job_queue_release(&q, t);
	size_t queued, running, done;
	job_queue_counts(&q, &queued, &running, &done);
	assert_int_equal(queued, 1);
	assert_int_equal(running, 0);
	job_queue_close(&q); /* queued jobs are still handed out, then NULL */
	assert_int_equal(job_queue_submit(&q, "", JOB_PRIO_NORMAL, spec(4), 1e9, &x, &dup, &d),
			 CA_ERR_INTERRUPTED);
	t = job_queue_take(&q);
	assert_ptr_equal(t, c);
	job_queue_finish(&q, t, json_null());
	job_queue_release(&q, t);
	assert_null(job_queue_take(&q));
	job_queue_release(&q, a);
	job_queue_release(&q, b);
	job_queue_release(&q, c);
	job_queue_destroy(&q);
}

static void test_queue_idempotency(void **state)
{
	struct job_queue q;
	struct ca_diag d = {{0}};
	struct job *a, *a2, *b, *t;
	bool dup;
	(void)state;
	assert_int_equal(job_queue_init(&q, 4, 1, &d), 0);
	assert_int_equal(job_queue_submit(&q, "k1", JOB_PRIO_NORMAL, spec(1), 1e9, &a, &dup, &d), 0);
	assert_false(dup);
	/* queued: the same job */
	assert_int_equal(job_queue_submit(&q, "k1", JOB_PRIO_NORMAL, spec(9), 1e9, &a2, &dup, &d),
			 0);
	assert_true(dup);
	assert_ptr_equal(a, a2);
	t = job_queue_take(&q);
	job_queue_finish(&q, t, json_string("r1"));
	job_queue_release(&q, t);
	job_queue_release(&q, a2);
	/* done: still the same answer, not a second evaluation */
	assert_int_equal(job_queue_submit(&q, "k1", JOB_PRIO_NORMAL, spec(9), 1e9, &a2, &dup, &d),
			 0);
	assert_true(dup);
	json_t *res = job_queue_wait(&q, a2, ca_now());
	assert_string_equal(json_string_value(res), "r1");
	json_decref(res);
	job_queue_release(&q, a2);
	/* keep_done 1: a second finished key pushes the first out */
	assert_int_equal(job_queue_submit(&q, "k2", JOB_PRIO_NORMAL, spec(2), 1e9, &b, &dup, &d), 0);
	t = job_queue_take(&q);
	job_queue_finish(&q, t, json_string("r2"));
	job_queue_release(&q, t);
	assert_int_equal(job_queue_submit(&q, "k1", JOB_PRIO_NORMAL, spec(3), 1e9, &a2, &dup, &d),
			 0);
	assert_false(dup);
	assert_ptr_not_equal(a2, a);
	job_queue_release(&q, a);
	job_queue_release(&q, a2);
	job_queue_release(&q, b);
	job_queue_destroy(&q);
}

struct racer {
	struct job_queue *q;
	int submitted, answered;
};

static void *racer_main(void *arg)
{
	struct racer *r = arg;
	struct ca_diag d = {{0}};
	for (int i = 0; i < 200; i++) {
		char key[32];
		struct job *j;
		bool dup;
		snprintf(key, sizeof key, "k%d", i % 50); /* many repeats of 50 keys */
		if (job_queue_submit(r->q, key, JOB_PRIO_NORMAL, spec(i), 1e9, &j, &dup, &d))
			continue;
		r->submitted++;
		json_t *res = job_queue_wait(r->q, j, ca_now() + 10);
		if (res && json_integer_value(json_object_get(res, "key")) == i % 50)
			r->answered++;
		json_decref(res);
		job_queue_release(r->q, j);
	}
	return NULL;
}

static void *worker_main(void *arg)
{
	struct job_queue *q = arg;
	struct job *j;
	while ((j = job_queue_take(q))) {
		int k = atoi(j->key + 1);
		job_queue_finish(q, j, json_pack("{s:i}", "key", k));
		job_queue_release(q, j);
	}
	return NULL;
}

/* Eight clients and four workers: every request answered, with its own key's answer. */
static void test_queue_threads(void **state)
{
	struct job_queue q;
	struct ca_diag d = {{0}};
	pthread_t c[8], w[4];
	struct racer r[8];
	(void)state;
	assert_int_equal(job_queue_init(&q, 4096, 4096, &d), 0);
	for (int i = 0; i < 4; i++)
		pthread_create(&w[i], NULL, worker_main, &q);
	for (int i = 0; i < 8; i++) {
		r[i] = (struct racer){.q = &q};
		pthread_create(&c[i], NULL, racer_main, &r[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(c[i], NULL);
		assert_int_equal(r[i].submitted, 200);
		assert_int_equal(r[i].answered, 200);
	}
	job_queue_close(&q);
	for (int i = 0; i < 4; i++)
		pthread_join(w[i], NULL);
	job_queue_destroy(&q);
}

/* Jobs with a key outlive the queue (jobstore.h): the unanswered come back queued, the answered
 * with their answers; jobs without a key are not kept. */
static void test_queue_restore(void **state)
{
	char dir[] = "/tmp/ca-test-jobstore-XXXXXX", db[64];
	struct job_queue q;
	struct job_store st;
	struct ca_diag d = {{0}};
	struct job *a, *b, *c, *t;
	size_t requeued = 0;
	bool dup;
	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(db, sizeof db, "%s/jobs.sqlite", dir);
	assert_int_equal(job_store_open(&st, db, &d), 0);
	assert_int_equal(job_queue_init(&q, 8, 8, &d), 0);
	assert_int_equal(job_queue_restore(&q, &st, &requeued, &d), 0);
	assert_int_equal(requeued, 0);
	assert_int_equal(job_queue_submit(&q, "done", JOB_PRIO_NORMAL, spec(1), ca_now() + 60, &a,
					  &dup, &d), 0);
	assert_int_equal(job_queue_submit(&q, "pending", JOB_PRIO_HIGH, spec(2), ca_now() + 60, &b,
					  &dup, &d), 0);
	assert_int_equal(job_queue_submit(&q, "", JOB_PRIO_NORMAL, spec(3), ca_now() + 60, &c, &dup,
					  &d), 0);
	t = job_queue_take(&q); /* "pending" (high) starts, and the server dies */
	assert_ptr_equal(t, b);
	job_queue_release(&q, t);
	t = job_queue_take(&q);
	assert_ptr_equal(t, a);
	job_queue_finish(&q, t, json_string("answer"));
	job_queue_release(&q, t);
	char a_id[24];
	snprintf(a_id, sizeof a_id, "%s", a->id);
	job_queue_release(&q, a);
	job_queue_release(&q, b);
	job_queue_release(&q, c);
	job_queue_destroy(&q);
	job_store_close(&st);

	/* the next run */
	assert_int_equal(job_store_open(&st, db, &d), 0);
	assert_int_equal(job_queue_init(&q, 8, 8, &d), 0);
	assert_int_equal(job_queue_restore(&q, &st, &requeued, &d), 0);
	assert_int_equal(requeued, 1); /* "pending"; the keyless one is gone */
	t = job_queue_take(&q);
	assert_non_null(t);
	assert_string_equal(t->key, "pending");
	assert_int_equal(json_integer_value(json_object_get(t->spec, "n")), 2);
	assert_int_equal(t->attempts, 1); /* counted from the last run's start, not kept as 0 */
	assert_true(t->deadline > ca_now() + 50 && t->deadline < ca_now() + 61);
	job_queue_finish(&q, t, json_string("late"));
	job_queue_release(&q, t);
	assert_int_equal(job_queue_submit(&q, "done", JOB_PRIO_NORMAL, spec(9), ca_now() + 60, &a,
					  &dup, &d), 0);
	assert_true(dup);
	assert_string_equal(a->id, a_id);
	json_t *res = job_queue_wait(&q, a, ca_now());
	assert_string_equal(json_string_value(res), "answer");
	json_decref(res);
	job_queue_release(&q, a);
	job_queue_destroy(&q);
	job_store_close(&st);
	ca_remove_tree(dir, NULL);
}

static void test_metrics_text(void **state)
{
	struct serve_metrics m;
	char *text;
	json_t *res = json_pack("{s:{s:s}, s:{s:f, s:f}}", "reason", "code", "verify.mismatch",
				"seconds", "build", 1.2, "total", 2.5);
	(void)state;
	serve_metrics_init(&m);
	serve_metrics_request(&m, EP_EVALUATE, 200, 0.3);
	serve_metrics_request(&m, EP_EVALUATE, 429, 0.001);
	serve_metrics_result(&m, res, 0.7);
	serve_metrics_count(&m, &m.retries);
	text = serve_metrics_render(&m, 3, 1, 2, NULL, 0);
	assert_null(strstr(text, "cuda_agent_gpu_")); /* no GPU of their own: no per-GPU family */
	free(text);
	{
		const struct serve_gpu_load gpus[2] = {{"0", 2, 1, 7}, {"3", 2, 0, 5}};
		text = serve_metrics_render(&m, 3, 1, 4, gpus, 2);
	}
	assert_non_null(strstr(text, "cuda_agent_gpu_workers{gpu=\"3\"} 2\n"));
	assert_non_null(strstr(text, "cuda_agent_gpu_jobs_running{gpu=\"0\"} 1\n"));
	assert_non_null(strstr(text, "cuda_agent_gpu_jobs_running{gpu=\"3\"} 0\n"));
	assert_non_null(strstr(text, "cuda_agent_gpu_jobs_total{gpu=\"0\"} 7\n"));
	assert_non_null(strstr(text, "# TYPE cuda_agent_gpu_jobs_total counter\n"));
	assert_non_null(strstr(text, "cuda_agent_queue_depth 3\n"));
	assert_non_null(strstr(text, "cuda_agent_jobs_running 1\n"));
	assert_non_null(strstr(text, "cuda_agent_requests_total{endpoint=\"evaluate\",code=\"2xx\"} 1\n"));
	assert_non_null(strstr(text, "cuda_agent_requests_total{endpoint=\"evaluate\",code=\"4xx\"} 1\n"));
	assert_non_null(strstr(text, "cuda_agent_results_total{reason=\"verify.mismatch\"} 1\n"));
	assert_non_null(strstr(text, "cuda_agent_step_seconds_bucket{step=\"build\",le=\"2.5\"} 1\n"));
	assert_non_null(strstr(text, "cuda_agent_step_seconds_bucket{step=\"build\",le=\"1\"} 0\n"));
	assert_non_null(strstr(text, "cuda_agent_step_seconds_count{step=\"queue\"} 1\n"));
	assert_non_null(strstr(text, "cuda_agent_request_seconds_count{endpoint=\"evaluate\"} 2\n"));
	assert_non_null(strstr(text, "cuda_agent_retries_total 1\n"));
	free(text);
	json_decref(res);
	serve_metrics_destroy(&m);
}


static void test_redis_url(void **state)
{
	(void)state;
	struct redis_url u;
	struct ca_diag d = {{0}};
	unsetenv("CUDA_AGENT_REDIS_PASSWORD");
	assert_int_equal(redis_url_parse("redis://127.0.0.1", &u, &d), 0);
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 6379);
	assert_int_equal(u.db, 0);
	assert_false(u.unix_socket);
	assert_string_equal(u.password, "");
	assert_int_equal(redis_url_parse("redis://user:pw@cache.local:7000/3", &u, &d), 0);
	assert_string_equal(u.host, "cache.local");
	assert_string_equal(u.user, "user");
	assert_string_equal(u.password, "pw");
	assert_int_equal(u.port, 7000);
	assert_int_equal(u.db, 3);
	assert_int_equal(redis_url_parse("redis://:only@h", &u, &d), 0);
	assert_string_equal(u.user, "");
	assert_string_equal(u.password, "only");
	assert_int_equal(redis_url_parse("unix:///run/redis.sock?db=2", &u, &d), 0);
	assert_true(u.unix_socket);
	assert_string_equal(u.host, "/run/redis.sock");
	assert_int_equal(u.db, 2);
	setenv("CUDA_AGENT_REDIS_PASSWORD", "fromenv", 1);
	assert_int_equal(redis_url_parse("redis://h:1", &u, &d), 0);
	assert_string_equal(u.password, "fromenv");
	unsetenv("CUDA_AGENT_REDIS_PASSWORD");
	static const char *const bad[] = {"http://h", "redis://", "redis://h:0", "redis://h:70000",
					  "redis://h:12x", "redis://h/db", "unix://rel", "unix:///s?x=1",
					  "redis://h:", NULL};
	for (int i = 0; bad[i]; i++) {
		memset(&d, 0, sizeof d);
		assert_int_equal(redis_url_parse(bad[i], &u, &d), CA_ERR_INVALID);
		assert_true(d.msg[0] != '\0');
	}
}

static void test_fleet_pack(void **state)
{
	(void)state;
	char src[] = "/tmp/ca-test-fleet-XXXXXX", dst[64], written[PATH_MAX], path[PATH_MAX];
	struct ca_diag d = {{0}};
	json_t *packed = NULL;
	char *text = NULL;
	assert_non_null(mkdtemp(src));
	snprintf(path, sizeof path, "%s/kernels", src);
	assert_int_equal(ca_mkdirs(path, 0755, &d), 0);
	snprintf(path, sizeof path, "%s/kernels/k.cu", src);
	assert_int_equal(ca_write_file_atomic(path, "__global__ void k() {}\n", 23, &d), 0);
	snprintf(path, sizeof path, "%s/model.py", src);
	assert_int_equal(ca_write_file_atomic(path, "class Model: pass\n", 18, &d), 0);
	snprintf(path, sizeof path, "%s/.hidden", src);
	assert_int_equal(ca_write_file_atomic(path, "x", 1, &d), 0);
	snprintf(path, sizeof path, "%s/a.out", src); /* not UTF-8: left out */
	assert_int_equal(ca_write_file_atomic(path, "\x7f" "ELF\xff\xfe", 6, &d), 0);
	assert_int_equal(fleet_pack_path(src, &packed, &d), 0);
	json_t *files = json_object_get(packed, "files");
	assert_int_equal(json_object_size(files), 2);
	assert_string_equal(json_string_value(json_object_get(files, "kernels/k.cu")),
			    "__global__ void k() {}\n");
	assert_int_equal(json_array_size(json_object_get(packed, "skipped")), 1);
	snprintf(dst, sizeof dst, "%s-out", src);
	assert_int_equal(fleet_unpack_path(packed, dst, written, sizeof written, &d), 0);
	assert_string_equal(written, dst);
	snprintf(path, sizeof path, "%s/kernels/k.cu", dst);
	assert_int_equal(ca_read_file(path, 1024, &text, NULL, &d), 0);
	assert_string_equal(text, "__global__ void k() {}\n");
	free(text);
	json_decref(packed);
	/* one file */
	snprintf(path, sizeof path, "%s/model.py", src);
	assert_int_equal(fleet_pack_path(path, &packed, &d), 0);
	assert_string_equal(json_string_value(json_object_get(packed, "file")), "model.py");
	assert_int_equal(fleet_unpack_path(packed, dst, written, sizeof written, &d), 0);
	snprintf(path, sizeof path, "%s/model.py", dst);
	assert_string_equal(written, path);
	json_decref(packed);
	/* a packed path that would leave the directory is refused */
	packed = json_pack("{s:{s:s}}", "files", "../escape", "x");
	assert_int_equal(fleet_unpack_path(packed, dst, written, sizeof written, &d), CA_ERR_INVALID);
	json_decref(packed);
	packed = json_pack("{s:s, s:s}", "file", "/etc/passwd", "text", "x");
	assert_int_equal(fleet_unpack_path(packed, dst, written, sizeof written, &d), CA_ERR_INVALID);
	json_decref(packed);
	ca_remove_tree(src, NULL);
	ca_remove_tree(dst, NULL);
}

static void test_websocket(void **state)
{
	(void)state;
	char accept[WS_ACCEPT_CHARS + 1];
	struct ca_diag d = {{0}};
	struct ws_frame f;
	uint8_t hdr[WS_HEADER_MAX];
	/* RFC 6455, section 1.3 */
	assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", accept, &d), 0);
	assert_string_equal(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	assert_int_equal(ws_accept_key("short", accept, &d), CA_ERR_INVALID);
	assert_int_equal(ws_accept_key(NULL, accept, &d), CA_ERR_INVALID);
	assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ=!", accept, &d), CA_ERR_INVALID);
	/* a masked "Hello" (RFC 6455, section 5.7) */
	uint8_t hello[] = {0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58};
	assert_int_equal(ws_frame_parse(hello, 1, &f, &d), 0);
	assert_int_equal(ws_frame_parse(hello, 5, &f, &d), 0);
	assert_int_equal(ws_frame_parse(hello, sizeof hello, &f, &d), 1);
	assert_true(f.fin);
	assert_int_equal(f.opcode, WS_OP_TEXT);
	assert_int_equal(f.len, 5);
	assert_int_equal(f.header_len, 6);
	ws_unmask(hello + 6, 5, f.mask, 0);
	assert_memory_equal(hello + 6, "Hello", 5);
	/* refused: unmasked, reserved bits, unknown opcode, long or fragmented control frames,
	 * lengths not in their shortest form, over the cap */
	static const uint8_t bad[][14] = {
		{0x81, 0x05},
		{0xC1, 0x80, 0, 0, 0, 0},
		{0x83, 0x80, 0, 0, 0, 0},
		{0x89, 0xFE, 0x00, 0x80, 0, 0, 0, 0},
		{0x09, 0x80, 0, 0, 0, 0},
		{0x81, 0xFE, 0x00, 0x05, 0, 0, 0, 0},
		{0x81, 0xFF, 0, 0, 0, 0, 0, 0, 0x01, 0x00, 0, 0, 0, 0},
		{0x81, 0xFF, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 0, 0},
		{0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		memset(&d, 0, sizeof d);
		assert_true(ws_frame_parse(bad[i], sizeof bad[i], &f, &d) < 0);
		assert_true(d.msg[0] != '\0');
	}
	/* server headers in the three length forms */
	assert_int_equal(ws_frame_header(hdr, WS_OP_TEXT, 5), 2);
	assert_int_equal(hdr[0], 0x81);
	assert_int_equal(hdr[1], 5);
	assert_int_equal(ws_frame_header(hdr, WS_OP_TEXT, 300), 4);
	assert_int_equal(hdr[1], 126);
	assert_int_equal(hdr[2] << 8 | hdr[3], 300);
	assert_int_equal(ws_frame_header(hdr, WS_OP_BINARY, 70000), 10);
	assert_int_equal(hdr[1], 127);
	assert_int_equal(hdr[7] << 16 | hdr[8] << 8 | hdr[9], 70000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path_rule),
		cmocka_unit_test(test_request_ok),
		cmocka_unit_test(test_request_errors),
		cmocka_unit_test(test_queue_capacity_and_order),
		cmocka_unit_test(test_queue_idempotency),
		cmocka_unit_test(test_queue_threads),
		cmocka_unit_test(test_queue_restore),
		cmocka_unit_test(test_metrics_text),
		cmocka_unit_test(test_redis_url),
		cmocka_unit_test(test_fleet_pack),
		cmocka_unit_test(test_websocket),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
