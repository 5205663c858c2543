/* Unit tests for the worker's parts that need no GPU: its plan parser (src/worker/plan.c) and
 * its events (src/worker/events.c), read back by the supervisor's own judge (eval/proc.c,
 * cand_proc_judge) as a scripted peer: what the worker writes is what the supervisor accepts,
 * and a code the worker may not report turns into hack.harness_tampering. */
#define TEST_NAME "worker"
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/proc.h"
#include "protocol/loop.h"
#include "protocol/wire.h"
#include "worker/events.h"
#include "worker/plan.h"

static const char *const good_plan =
	"{\"version\": 2, \"library\": \"/run/lib/candidate.so\", \"device\": 0,"
	" \"spec\": {\"args\": [{\"dtype\": \"float32\", \"shape\": [4, 8]}],"
	"          \"outputs\": [{\"dtype\": \"float32\", \"shape\": [4]}]},"
	" \"slots\": {\"kind\": \"cuda\", \"params\": {\"fd\": 3, \"bytes\": 64},"
	"           \"inputs\": [{\"fd\": 4, \"bytes\": 128}, {\"fd\": 5, \"bytes\": 128}],"
	"           \"outputs\": {\"fd\": 6, \"bytes\": 16}}}";

static int parse(const char *text, struct worker_plan *p, struct ca_diag *d)
{
	json_t *j = json_loads(text, 0, NULL);
	int rc;
	assert_non_null(j);
	rc = worker_plan_from_json(p, j, d);
	json_decref(j);
	return rc;
}

/* good_plan with one key's value replaced (key names the first occurrence's text). */
static void expect_bad(const char *from, const char *to, const char *want)
{
	char text[2048];
	const char *at = strstr(good_plan, from);
	struct worker_plan p;
	struct ca_diag d = {{0}};
	assert_non_null(at);
	snprintf(text, sizeof text, "%.*s%s%s", (int)(at - good_plan), good_plan, to,
		 at + strlen(from));
	if (parse(text, &p, &d) == 0 || !strstr(d.msg, want))
		fail_msg("plan with %s -> %s: got '%s', want '%s'", from, to, d.msg, want);
	assert_null(p.library); /* freed on failure */
}

static void test_plan(void **state)
{
	struct worker_plan p;
	struct ca_diag d = {{0}};
	(void)state;
	assert_int_equal(parse(good_plan, &p, &d), 0);
	assert_string_equal(p.library, "/run/lib/candidate.so");
	assert_int_equal(p.kind, DEVICE_CUDA);
	assert_int_equal(p.num_inputs, 2);
	assert_int_equal(p.inputs[1].fd, 5);
	assert_int_equal(p.outputs.bytes, 16);
	assert_int_equal(p.spec.num_args, 1);
	worker_plan_free(&p);

	expect_bad("\"version\": 2", "\"version\": 1", "'version' must be 2");
	expect_bad("\"/run/lib/candidate.so\"", "\"candidate.so\"", "must be a path");
	expect_bad("\"/run/lib/candidate.so\"", "7", "'library' must be a path");
	expect_bad("\"device\": 0", "\"device\": -1", "'device' must be an integer");
	expect_bad("\"kind\": \"cuda\"", "\"kind\": \"tpu\"", "slots.kind");
	expect_bad("{\"fd\": 3, \"bytes\": 64}", "{\"fd\": 2, \"bytes\": 64}",
		   "slots.params.fd must be in [3");
	expect_bad("{\"fd\": 6, \"bytes\": 16}", "{\"fd\": 6, \"bytes\": 0}",
		   "slots.outputs.bytes is out of range");
	expect_bad("[{\"fd\": 4, \"bytes\": 128}, {\"fd\": 5, \"bytes\": 128}]", "[]",
		   "slots.inputs must list 1 to");
	expect_bad("{\"fd\": 5, \"bytes\": 128}", "{\"fd\": \"5\"}", "slots.inputs[1] must be");
	expect_bad("\"spec\": {", "\"spock\": {", "needs 'spec'");
	expect_bad("\"float32\", \"shape\": [4, 8]", "\"float99\", \"shape\": [4, 8]", "plan: spec");
	expect_bad("\"device\": 0", "\"device\": 0, \"reference\": 1", "'reference' must be true");
	/* a reference process's plan names nothing a candidate gives */
	expect_bad("\"device\": 0", "\"device\": 0, \"reference\": true", "names no library");
}

/* The reference process's plan (eval/twin.c writes it): the device only. */
static void test_plan_reference(void **state)
{
	struct worker_plan p;
	struct ca_diag d = {{0}};
	(void)state;
	assert_int_equal(parse("{\"version\": 2, \"device\": 1, \"reference\": true}", &p, &d), 0);
	assert_true(p.reference);
	assert_null(p.library);
	assert_int_equal(p.device, 1);
	assert_int_equal(p.num_inputs, 0);
	worker_plan_free(&p);
	assert_int_not_equal(parse("{\"version\": 2, \"reference\": true, \"slots\": {}}", &p, &d), 0);
	assert_non_null(strstr(d.msg, "names no library, spec or slots"));
	assert_int_not_equal(parse("{\"version\": 2, \"reference\": true, \"device\": -3}", &p, &d),
			     0);
	assert_non_null(strstr(d.msg, "'device' must be an integer"));
	/* false is the candidate's plan, which needs its library */
	assert_int_not_equal(parse("{\"version\": 2, \"reference\": false}", &p, &d), 0);
	assert_non_null(strstr(d.msg, "'library' must be a path"));
}

/* The worker's events on a pipe (events_open takes stdout), judged by the supervisor. */
static void test_events_judged(void **state)
{
	int pipefd[2], saved = dup(STDOUT_FILENO);
	char buf[4096];
	ssize_t n;
	struct ca_diag d = {{0}};
	struct loop_fail f = {0};
	json_t *ev = NULL;
	char *line, *next;
	(void)state;
	assert_true(saved >= 0);
	assert_int_equal(pipe(pipefd), 0);
	assert_true(dup2(pipefd[1], STDOUT_FILENO) >= 0);
	close(pipefd[1]);
	assert_int_equal(events_open(&d), 0);
	assert_int_equal(events_emit(WIRE_EV_CALLED, json_pack("{s:o}", "ev_ms", json_num(0.25))),
			 0);
	assert_int_equal(events_emit(WIRE_EV_CALLED, json_pack("{s:o}", "ev_ms", json_num(NAN))),
			 0);
	events_error("fault.illegal_address", "an illegal memory access");
	events_error("env.gpu", "blame the environment");
	fflush(stdout);
	assert_true(dup2(saved, STDOUT_FILENO) >= 0); /* the events keep their own copy of the pipe */
	close(saved);
	n = read(pipefd[0], buf, sizeof buf - 1);
	assert_true(n > 0);
	buf[n] = '\0';
	close(pipefd[0]);

	line = buf;
	next = strchr(line, '\n');
	assert_non_null(next);
	*next = '\0';
	assert_int_equal(cand_proc_judge(WIRE_CMD_CALL, line, &ev, &f), 0);
	assert_true(fabs(json_number_value(json_object_get(ev, "ev_ms")) - 0.25) < 1e-12);
	json_decref(ev);

	line = next + 1;
	next = strchr(line, '\n');
	assert_non_null(next);
	*next = '\0';
	assert_int_equal(cand_proc_judge(WIRE_CMD_CALL, line, &ev, &f), 0);
	assert_true(json_is_null(json_object_get(ev, "ev_ms"))); /* not a number: null */
	json_decref(ev);

	line = next + 1;
	next = strchr(line, '\n');
	assert_non_null(next);
	*next = '\0';
	assert_int_equal(cand_proc_judge(WIRE_CMD_CALL, line, &ev, &f), CA_ERR_REJECTED);
	assert_string_equal(f.code, "fault.illegal_address");
	json_decref(ev);

	line = next + 1;
	next = strchr(line, '\n');
	assert_non_null(next);
	*next = '\0';
	memset(&f, 0, sizeof f);
	assert_int_equal(cand_proc_judge(WIRE_CMD_CALL, line, &ev, &f), CA_ERR_REJECTED);
	assert_string_equal(f.code, "hack.harness_tampering"); /* it may not blame the env */
	json_decref(ev);

	/* an answer to a command that expects another event */
	memset(&f, 0, sizeof f);
	assert_int_equal(cand_proc_judge(WIRE_CMD_LOAD, "{\"event\": \"called\", \"ev_ms\": 1}",
					 &ev, &f),
			 CA_ERR_REJECTED);
	assert_string_equal(f.code, "hack.harness_tampering");
	json_decref(ev);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan),
		cmocka_unit_test(test_plan_reference),
		cmocka_unit_test(test_events_judged),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
