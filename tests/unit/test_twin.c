/* Unit tests for the session's reference process (src/eval/twin.c) against a scripted worker: a
 * shell script in place of cuda-agent-worker that speaks the reference process's side of
 * docs/protocol.md (the `device` event, `called` for `empty`, `done` for `quit`) and records
 * the plan it was given. The real worker's reference mode needs a GPU (tests/gpu); its plan
 * parser is tested in test_worker.c. What is tested here is the keeping: a healthy twin serves
 * the next evaluation, pinned where it is asked to be, and every kind of failure ends it so that
 * the next evaluation starts a fresh one. */
#define TEST_NAME "twin"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "eval/twin.h"
#include "protocol/wire.h"
#include "util/str.h"
#include "helpers.h"

/* $1 is the plan: copied beside the script. FAKE_TWIN=mute: it dies before its hello;
 * FAKE_TWIN=refuse: it answers `empty` with `failed`. */
static const char fake_worker[] =
	"#!/bin/sh\n"
	"cp \"$1\" \"$(dirname \"$0\")/plan-seen.json\"\n"
	"[ \"$FAKE_TWIN\" = mute ] && exit 3\n"
	"echo '{\"event\": \"device\", \"name\": \"scripted\"}'\n"
	"while read -r line; do\n"
	"  case \"$line\" in\n"
	"    *'\"quit\"'*) echo '{\"event\": \"done\"}'; exit 0 ;;\n"
	"    *'\"empty\"'*) if [ \"$FAKE_TWIN\" = refuse ]; then\n"
	"        echo '{\"event\": \"failed\", \"code\": \"abi.forward_failed\", \"message\": \"no\"}'\n"
	"      else echo '{\"event\": \"called\", \"ev_ms\": 0.002}'; fi ;;\n"
	"    *) echo '{\"event\": \"error\", \"code\": \"worker.bad_plan\", \"message\": \"no\"}';"
	" exit 1 ;;\n"
	"  esac\n"
	"done\n";

static char worker[PATH_MAX], worker2[PATH_MAX], base[PATH_MAX];

static int setup(void **state)
{
	struct ca_diag d = {{0}};
	if (setup_dir(state) || ca_path_join(worker, sizeof worker, tmpdir, "worker") ||
	    ca_path_join(worker2, sizeof worker2, tmpdir, "worker2") ||
	    ca_path_join(base, sizeof base, tmpdir, "runs") || ca_mkdirs(base, 0700, &d))
		return -1;
	if (ca_write_file_atomic(worker, fake_worker, strlen(fake_worker), &d) ||
	    ca_write_file_atomic(worker2, fake_worker, strlen(fake_worker), &d) ||
	    chmod(worker, 0755) || chmod(worker2, 0755))
		return -1;
	return 0;
}

/* Until the killed pid has exited (a zombie, not yet reaped). */
static void wait_zombie(pid_t pid)
{
	char path[64], line[512];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	for (int i = 0; i < 500; i++) {
		FILE *fp = fopen(path, "r");
		const char *close_paren = NULL;
		assert_non_null(fp);
		if (fgets(line, sizeof line, fp))
			close_paren = strrchr(line, ')');
		fclose(fp);
		if (close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z')
			return;
		usleep(10000);
	}
	fail_msg("pid %d did not exit after SIGKILL", (int)pid);
}

/* One empty call as the timed loop makes it. */
static int empty_call(struct eval_twin *t)
{
	struct loop_fail f = {0};
	int rc = eval_twin_send(t, json_pack("{s:i}", "input", 0), &f);
	return rc ? rc : eval_twin_wait(t, &f);
}

static void take_fresh(struct eval_twin *t, const char *prog)
{
	struct ca_diag d = {{0}};
	bool fresh = false;
	assert_int_equal(eval_twin_take(t, prog, base, 30.0, &fresh, &d), 0);
	assert_true(fresh);
	assert_int_equal(eval_twin_hello(t, &d), 0);
}

static void test_kept_across_evaluations(void **state)
{
	struct eval_twin t;
	struct ca_diag d = {{0}};
	char seen[PATH_MAX], *plan = NULL, dir[PATH_MAX];
	size_t len = 0;
	bool fresh = true;
	pid_t pid;
	(void)state;
	eval_twin_init(&t);
	take_fresh(&t, worker);
	pid = t.child.pid;
	ca_strlcpy(dir, t.dir, sizeof dir);
	/* its plan names the device only */
	tmp_path(seen, sizeof seen, "plan-seen.json");
	assert_int_equal(ca_read_file(seen, 4096, &plan, &len, &d), 0);
	assert_non_null(strstr(plan, "\"reference\":true"));
	assert_null(strstr(plan, "library"));
	assert_null(strstr(plan, "slots"));
	free(plan);
	for (int i = 0; i < 3; i++)
		assert_int_equal(empty_call(&t), 0);
	eval_twin_give(&t);
	assert_true(t.started); /* healthy: kept, stopped */
	/* the next evaluation: the same process, its watchdog reset, its directory touched (the
	 * stale-run sweep removes run-* directories a day old) */
	t.proc.ran_s = 25.0;
	{
		time_t then = time(NULL) - 3 * 86400;
		struct timeval old[2] = {{.tv_sec = then}, {.tv_sec = then}};
		assert_int_equal(utimes(dir, old), 0);
	}
	assert_int_equal(eval_twin_take(&t, worker, base, 30.0, &fresh, &d), 0);
	{
		struct stat st;
		assert_int_equal(stat(dir, &st), 0);
		assert_true(st.st_mtime > time(NULL) - 60);
	}
	assert_false(fresh);
	assert_int_equal(t.child.pid, pid);
	assert_true(t.proc.ran_s == 0.0);
	assert_int_equal(t.served, 2);
	assert_int_equal(empty_call(&t), 0);
	eval_twin_give(&t);
	eval_twin_end(&t);
	assert_false(t.started);
	assert_false(ca_is_dir(dir)); /* its plan and stderr are gone */
	/* it quit: reaped, nothing left */
	assert_int_equal(kill(pid, 0), -1);
}

/* TWIN_KEEP_ENV=0: a healthy twin is ended after each evaluation, and the next one starts a
 * fresh process (the comparison with the reference process per evaluation). */
static void test_not_kept_when_asked(void **state)
{
	struct eval_twin t;
	struct ca_diag d = {{0}};
	bool fresh = false;
	pid_t pid;
	(void)state;
	setenv(TWIN_KEEP_ENV, "0", 1);
	eval_twin_init(&t);
	take_fresh(&t, worker);
	pid = t.child.pid;
	assert_int_equal(empty_call(&t), 0);
	eval_twin_give(&t);
	assert_false(t.started);
	assert_int_equal(kill(pid, 0), -1); /* quit and reaped */
	assert_int_equal(eval_twin_take(&t, worker, base, 30.0, &fresh, &d), 0);
	assert_true(fresh);
	assert_int_equal(eval_twin_hello(&t, &d), 0);
	assert_int_not_equal(t.child.pid, pid);
	eval_twin_end(&t);
	unsetenv(TWIN_KEEP_ENV);
}

static void test_pinned_where_asked(void **state)
{
	struct eval_twin t;
	cpu_set_t mine, got;
	int cpu = -1;
	(void)state;
	assert_int_equal(sched_getaffinity(0, sizeof mine, &mine), 0);
	for (int c = CPU_SETSIZE - 1; c >= 0 && cpu < 0; c--)
		if (CPU_ISSET((size_t)c, &mine))
			cpu = c;
	eval_twin_init(&t);
	take_fresh(&t, worker);
	assert_int_equal(eval_twin_pin(&t, cpu), 0);
	assert_int_equal(sched_getaffinity(t.child.pid, sizeof got, &got), 0);
	assert_int_equal(CPU_COUNT(&got), 1);
	assert_true(CPU_ISSET((size_t)cpu, &got));
	assert_int_equal(eval_twin_pin(&t, -1), 0); /* back to this thread's CPUs */
	assert_int_equal(sched_getaffinity(t.child.pid, sizeof got, &got), 0);
	assert_true(CPU_EQUAL(&got, &mine));
	assert_int_equal(empty_call(&t), 0);
	eval_twin_end(&t);
	assert_int_equal(eval_twin_pin(&t, cpu), -1); /* none runs */
}

/* Each way a twin can fail ends it at give (or take), and the next take starts a fresh one. */
static void test_failures_start_fresh(void **state)
{
	struct eval_twin t;
	struct ca_diag d = {{0}};
	struct loop_fail f = {0};
	bool fresh = false;
	pid_t pid;
	(void)state;
	eval_twin_init(&t);

	/* killed between evaluations */
	take_fresh(&t, worker);
	pid = t.child.pid;
	eval_twin_give(&t);
	assert_int_equal(kill(pid, SIGKILL), 0);
	wait_zombie(pid);
	assert_int_equal(eval_twin_take(&t, worker, base, 30.0, &fresh, &d), 0);
	assert_true(fresh);
	assert_int_equal(eval_twin_hello(&t, &d), 0);
	assert_int_not_equal(t.child.pid, pid);

	/* left with a command unanswered (the evaluation ended mid-window) */
	pid = t.child.pid;
	assert_int_equal(eval_twin_send(&t, json_pack("{s:i}", "input", 0), &f), 0);
	assert_true(eval_twin_waiting(&t));
	eval_twin_give(&t);
	assert_false(t.started);
	assert_int_equal(kill(pid, 0), -1);

	/* a call it answers with `failed`: ended */
	setenv("FAKE_TWIN", "refuse", 1);
	take_fresh(&t, worker);
	unsetenv("FAKE_TWIN");
	assert_int_not_equal(empty_call(&t), 0);
	assert_true(t.failed);
	eval_twin_give(&t);
	assert_false(t.started);

	/* another program asked for: the kept one is ended */
	take_fresh(&t, worker);
	pid = t.child.pid;
	eval_twin_give(&t);
	assert_int_equal(eval_twin_take(&t, worker2, base, 30.0, &fresh, &d), 0);
	assert_true(fresh);
	assert_int_equal(eval_twin_hello(&t, &d), 0);
	assert_int_not_equal(t.child.pid, pid);
	eval_twin_end(&t);

	/* one that dies before its hello */
	setenv("FAKE_TWIN", "mute", 1);
	assert_int_equal(eval_twin_take(&t, worker, base, 30.0, &fresh, &d), 0);
	assert_int_equal(eval_twin_hello(&t, &d), -1);
	unsetenv("FAKE_TWIN");
	eval_twin_end(&t);
	assert_false(t.started);
	eval_twin_end(&t); /* twice: nothing to do */
}

static void *take_in_thread(void *arg)
{
	take_fresh(arg, worker);
	return NULL;
}

/* A twin dies with the thread that spawned it (it may sit stopped, deaf to its pipe); the next
 * take notices and starts a fresh one. */
static void test_dies_with_its_thread(void **state)
{
	struct eval_twin t;
	struct ca_diag d = {{0}};
	pthread_t th;
	bool fresh = false;
	pid_t pid;
	(void)state;
	eval_twin_init(&t);
	assert_int_equal(pthread_create(&th, NULL, take_in_thread, &t), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	pid = t.child.pid;
	assert_true(t.started);
	wait_zombie(pid);
	eval_twin_give(&t); /* dead: ended */
	assert_false(t.started);
	assert_int_equal(eval_twin_take(&t, worker, base, 30.0, &fresh, &d), 0);
	assert_true(fresh);
	assert_int_equal(eval_twin_hello(&t, &d), 0);
	assert_int_not_equal(t.child.pid, pid);
	eval_twin_end(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kept_across_evaluations),
		cmocka_unit_test(test_not_kept_when_asked),
		cmocka_unit_test(test_pinned_where_asked),
		cmocka_unit_test(test_failures_start_fresh),
		cmocka_unit_test(test_dies_with_its_thread),
	};
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, setup, teardown_dir);
}
