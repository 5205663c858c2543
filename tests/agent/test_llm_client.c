/* The LLM client (src/agent/llm.c) against the scripted OpenAI-compatible server
 * (tests/agent/scripted_server.py): what it sends, retries, Retry-After, timeouts, caps, keys.
 * Needs python3 (stdlib only); run from the repository root, or set CA_SCRIPTED_SERVER. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/llm.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/proc.h"

#define TEST_NAME "llm-client"
#include "unit/helpers.h"

struct server {
	struct ca_child child;
	char url[64];
	char log[PATH_MAX];
};

/* The server of the running test (one at a time), stopped by the test's teardown even when an
 * assertion failed; --exit-on-eof ends it should this process die. */
static struct server the_server;
static struct server *running;

static const char *server_script(void)
{
	const char *p = getenv("CA_SCRIPTED_SERVER");
	return p && p[0] ? p : "tests/agent/scripted_server.py";
}

/* Starts the server on a script (JSONL text); expect_key may be NULL. */
static struct server *server_start(const char *script, const char *expect_key)
{
	struct server *s = &the_server;
	static int n;
	char script_path[PATH_MAX], err_path[PATH_MAX], name[32], *line = NULL;
	struct ca_run_opts ro = {0};
	struct ca_diag d;
	json_t *j;
	const char *py = getenv("PYTHON3");

	n++;
	snprintf(name, sizeof name, "script-%d.jsonl", n);
	tmp_path(script_path, sizeof script_path, name);
	assert_int_equal(ca_write_file_atomic(script_path, script, strlen(script), &d), 0);
	snprintf(name, sizeof name, "log-%d.jsonl", n);
	tmp_path(s->log, sizeof s->log, name);
	snprintf(name, sizeof name, "stderr-%d.txt", n);
	tmp_path(err_path, sizeof err_path, name);
	const char *argv[] = {py && py[0] ? py : "python3", server_script(), "--exit-on-eof",
			      "--script", script_path, "--log", s->log,
			      expect_key ? "--expect-key" : NULL, expect_key, NULL};
	if (access(server_script(), R_OK) != 0)
		fail_msg("cannot read %s (run from the repository root or set CA_SCRIPTED_SERVER)",
			 server_script());
	if (ca_child_spawn(&s->child, argv, &ro, err_path, &d) != 0)
		fail_msg("cannot start the scripted server: %s", d.msg);
	running = s;
	if (ca_child_read_line(&s->child, 256, 15.0, &line, &d) != 0)
		fail_msg("the scripted server did not say its port: %s", d.msg);
	j = json_loads(line, 0, NULL);
	assert_true(json_is_integer(json_object_get(j, "port")));
	snprintf(s->url, sizeof s->url, "http://127.0.0.1:%d/v1",
		 (int)json_integer_value(json_object_get(j, "port")));
	json_decref(j);
	free(line);
	return s;
}

static void server_stop(struct server *s)
{
	ca_child_close(&s->child, 0);
	running = NULL;
}

static int teardown_server(void **state)
{
	(void)state;
	if (running)
		server_stop(running);
	return 0;
}

/* The requests the server received, as an array of {"path", "authorization", "body", "line"}. */
static json_t *server_requests(const struct server *s)
{
	json_t *all = json_array();
	char buf[1 << 16];
	FILE *f = fopen(s->log, "r");
	if (!f)
		return all; /* no request yet */
	while (fgets(buf, sizeof buf, f)) {
		json_t *j = json_loads(buf, 0, NULL);
		assert_non_null(j);
		json_array_append_new(all, j);
	}
	fclose(f);
	return all;
}

static void opts_for(struct llm_opts *o, const struct server *s)
{
	llm_opts_defaults(o);
	o->url = s->url;
	o->model = "test-model";
	o->backoff_s = 0.05;
	o->timeout_s = 10;
}

static json_t *user_messages(void)
{
	return json_pack("[{s:s,s:s},{s:s,s:s}]", "role", "system", "content", "You write CUDA.",
			 "role", "user", "content", "Make it fast \xe2\x9a\xa1");
}

static json_t *tool_defs(void)
{
	return json_pack("[{s:s,s:{s:s,s:s,s:{s:s,s:{s:{s:s}},s:[s]}}}]", "type", "function",
			 "function", "name", "compile", "description", "Compile the kernel",
			 "parameters", "type", "object", "properties", "path", "type", "string",
			 "required", "path");
}

struct retries {
	int calls;
	double waits[8];
};

static void on_retry(void *arg, int attempt, double wait_s, const char *why)
{
	struct retries *r = arg;
	(void)why;
	assert_int_equal(attempt, r->calls + 1);
	if (r->calls < 8)
		r->waits[r->calls] = wait_s;
	r->calls++;
}

/* ---- what is sent, what comes back ------------------------------------------------------------ */

static void test_tools_round_trip(void **state)
{
	(void)state;
	static const char script[] =
		"{\"message\": {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": "
		"\"call_1\", \"type\": \"function\", \"function\": {\"name\": \"compile\", "
		"\"arguments\": \"{\\\"path\\\": \\\"k.cu\\\"}\"}}]}, \"usage\": {\"prompt_tokens\": 40, "
		"\"completion_tokens\": 9, \"total_tokens\": 49}, \"finish_reason\": \"tool_calls\"}\n"
		"{\"message\": {\"role\": \"assistant\", \"content\": \"done\"}, \"finish_reason\": \"stop\"}\n";
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages(), *tools = tool_defs(), *empty = json_array(), *reqs, *body;
	json_t *extra = json_pack("{s:f,s:s,s:b}", "top_p", 0.9, "model", "evil", "stream", 1);
	const json_t *call;

	s = server_start(script, NULL);
	opts_for(&o, s);
	o.temperature = 0.5;
	o.max_tokens = 123;
	o.extra = extra;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	json_decref(extra); /* copied by init */

	if (llm_chat(&c, msgs, tools, &r, &d) != 0)
		fail_msg("%s", d.msg);
	assert_int_equal(r.attempts, 1);
	assert_int_equal(r.http_status, 200);
	assert_string_equal(r.finish_reason, "tool_calls");
	assert_int_equal(r.prompt_tokens, 40);
	assert_int_equal(r.completion_tokens, 9);
	assert_int_equal(r.total_tokens, 49);
	call = json_array_get(json_object_get(r.message, "tool_calls"), 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(call, "function"), "name")),
			    "compile");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
		"{\"path\": \"k.cu\"}");
	/* the loop appends the assistant message and a tool result, then asks again without tools */
	json_array_append(msgs, r.message);
	json_array_append_new(msgs, json_pack("{s:s,s:s,s:s}", "role", "tool", "tool_call_id", "call_1",
					      "content", "ok"));
	llm_reply_free(&r);
	if (llm_chat(&c, msgs, empty, &r, &d) != 0)
		fail_msg("%s", d.msg);
	assert_string_equal(json_string_value(json_object_get(r.message, "content")), "done");
	assert_string_equal(r.finish_reason, "stop");
	assert_int_equal(r.prompt_tokens, -1);
	llm_reply_free(&r);

	reqs = server_requests(s);
	assert_int_equal(json_array_size(reqs), 2);
	body = json_object_get(json_array_get(reqs, 0), "body");
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 0), "path")),
			    "/v1/chat/completions");
	assert_true(json_is_null(json_object_get(json_array_get(reqs, 0), "authorization")));
	assert_string_equal(json_string_value(json_object_get(body, "model")), "test-model");
	assert_int_equal(json_array_size(json_object_get(body, "messages")), 2);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(body, "messages"), 1), "content")),
			    "Make it fast \xe2\x9a\xa1");
	assert_true(json_equal(json_object_get(body, "tools"), tools));
	assert_true(json_real_value(json_object_get(body, "temperature")) == 0.5);
	assert_int_equal(json_integer_value(json_object_get(body, "max_tokens")), 123);
	assert_true(json_real_value(json_object_get(body, "top_p")) == 0.9);
	assert_null(json_object_get(body, "stream"));
	body = json_object_get(json_array_get(reqs, 1), "body");
	assert_null(json_object_get(body, "tools")); /* an empty tools array is not sent */
	assert_true(json_equal(json_object_get(body, "messages"), msgs));
	json_decref(reqs);
	assert_int_equal(c.requests_total, 2);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
	json_decref(tools);
	json_decref(empty);
}

static void test_options_not_sent(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages(), *reqs, *body;

	s = server_start("{\"message\": {\"role\": \"assistant\", \"content\": \"x\"}}\n", NULL);
	opts_for(&o, s); /* temperature -1 and max_tokens 0: neither sent */
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), 0);
	llm_reply_free(&r);
	reqs = server_requests(s);
	body = json_object_get(json_array_get(reqs, 0), "body");
	assert_non_null(json_object_get(body, "model"));
	assert_null(json_object_get(body, "temperature"));
	assert_null(json_object_get(body, "max_tokens"));
	assert_null(json_object_get(body, "tools"));
	json_decref(reqs);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

/* ---- retries ---------------------------------------------------------------------------------- */

static void test_retry_500_503(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	struct retries rt = {0};
	json_t *msgs = user_messages(), *reqs;
	double t0;

	s = server_start(
			 "{\"status\": 500}\n{\"status\": 503, \"body\": \"upstream busy\"}\n"
			 "{\"message\": {\"role\": \"assistant\", \"content\": \"third time\"}}\n",
			 NULL);
	opts_for(&o, s);
	o.backoff_s = 0.2;
	o.on_retry = on_retry;
	o.on_retry_arg = &rt;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	t0 = ca_now();
	if (llm_chat(&c, msgs, NULL, &r, &d) != 0)
		fail_msg("%s", d.msg);
	assert_int_equal(r.attempts, 3);
	assert_int_equal(r.http_status, 200);
	assert_string_equal(json_string_value(json_object_get(r.message, "content")), "third time");
	assert_int_equal(rt.calls, 2);
	assert_true(rt.waits[0] >= 0.16 && rt.waits[0] <= 0.24); /* 0.2 +-20% */
	assert_true(rt.waits[1] >= 0.32 && rt.waits[1] <= 0.48); /* doubled */
	assert_true(r.seconds >= rt.waits[0] + rt.waits[1]);       /* the waits were honoured */
	assert_true(ca_now() - t0 < 5.0);
	assert_int_equal(c.retries_total, 2);
	llm_reply_free(&r);
	reqs = server_requests(s);
	assert_int_equal(json_array_size(reqs), 3);
	assert_true(json_equal(json_object_get(json_array_get(reqs, 0), "body"),
			       json_object_get(json_array_get(reqs, 2), "body")));
	json_decref(reqs);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

static void test_429_retry_after(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	struct retries rt = {0};
	json_t *msgs = user_messages();

	s = server_start(
			 "{\"status\": 429, \"retry_after\": 1}\n"
			 "{\"message\": {\"role\": \"assistant\", \"content\": \"ok\"}}\n",
			 NULL);
	opts_for(&o, s); /* backoff 0.05 s: Retry-After is larger and wins */
	o.on_retry = on_retry;
	o.on_retry_arg = &rt;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	if (llm_chat(&c, msgs, NULL, &r, &d) != 0)
		fail_msg("%s", d.msg);
	assert_int_equal(r.attempts, 2);
	assert_int_equal(rt.calls, 1);
	assert_true(rt.waits[0] >= 1.0 && rt.waits[0] < 1.2);
	assert_true(r.seconds >= 1.0);
	assert_true(r.seconds < 4.0);
	llm_reply_free(&r);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

static void test_exhausted_after_retries(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages(), *reqs;

	s = server_start("", NULL); /* every request: 500 "script exhausted" */
	opts_for(&o, s);
	o.max_retries = 2;
	o.backoff_s = 0.01;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_CHILD);
	assert_null(r.message);
	assert_int_equal(r.attempts, 3);
	assert_int_equal(r.http_status, 500);
	assert_non_null(strstr(d.msg, s->url));
	assert_non_null(strstr(d.msg, "HTTP 500: script exhausted"));
	assert_non_null(strstr(d.msg, "after 3 attempts"));
	reqs = server_requests(s);
	assert_int_equal(json_array_size(reqs), 3);
	json_decref(reqs);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

static void test_400_not_retried(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages(), *reqs;

	s = server_start(
			 "{\"status\": 400, \"body\": \"{\\\"error\\\": {\\\"message\\\": \\\"Invalid 'tools[0]': "
			 "missing name\\\\nsee docs\\\", \\\"type\\\": \\\"invalid_request_error\\\"}}\"}\n"
			 "{\"message\": {\"role\": \"assistant\", \"content\": \"never\"}}\n",
			 NULL);
	opts_for(&o, s);
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_REJECTED);
	assert_int_equal(r.attempts, 1);
	assert_int_equal(r.http_status, 400);
	assert_null(r.message);
	if (!strstr(d.msg, "HTTP 400: Invalid 'tools[0]': missing name see docs"))
		fail_msg("unexpected message: %s", d.msg);
	assert_null(strchr(d.msg, '\n'));
	reqs = server_requests(s);
	assert_int_equal(json_array_size(reqs), 1);
	json_decref(reqs);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

/* ---- time limits, caps, bad bodies ------------------------------------------------------------ */

static void test_timeout(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages();
	double t0, took;

	/* only sleeps: requests are answered concurrently, each sleeping line goes to one of them */
	s = server_start("{\"sleep\": 4}\n{\"sleep\": 4}\n{\"sleep\": 4}\n{\"sleep\": 4}\n", NULL);
	opts_for(&o, s);
	o.timeout_s = 1.0;
	o.max_retries = 0;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	t0 = ca_now();
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_TIMEOUT);
	took = ca_now() - t0;
	assert_true(took >= 0.9 && took < 2.0);
	assert_int_equal(r.attempts, 1);
	assert_non_null(strstr(d.msg, "timed out"));
	llm_client_free(&c);

	/* timeouts are retried; the last one decides */
	o.max_retries = 1;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	t0 = ca_now();
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_TIMEOUT);
	took = ca_now() - t0;
	assert_int_equal(r.attempts, 2);
	assert_true(took >= 1.9 && took < 3.5);
	assert_non_null(strstr(d.msg, "after 2 attempts"));
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

static void test_raw_not_json(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages();

	s = server_start(
			 "{\"raw\": \"not json\"}\n"
			 "{\"message\": {\"role\": \"assistant\", \"content\": \"never\"}}\n",
			 NULL);
	opts_for(&o, s);
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_PARSE);
	assert_int_equal(r.attempts, 1);
	assert_int_equal(r.http_status, 200);
	assert_null(r.message);
	if (!strstr(d.msg, "HTTP 200") || !strstr(d.msg, "not json"))
		fail_msg("unexpected message: %s", d.msg);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

static void test_body_over_cap(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages();

	s = server_start(
			 "{\"raw\": \"xxxxxxxxxxxxxxxx\", \"repeat\": 262144}\n" /* 4 MiB */
			 "{\"message\": {\"role\": \"assistant\", \"content\": \"small\"}}\n",
			 NULL);
	opts_for(&o, s);
	o.max_response_bytes = 64 << 10;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_LIMIT);
	assert_int_equal(r.attempts, 1);
	assert_non_null(strstr(d.msg, "65536-byte cap"));
	/* the client still works (a new connection) and a body under the cap is fine */
	if (llm_chat(&c, msgs, NULL, &r, &d) != 0)
		fail_msg("%s", d.msg);
	assert_string_equal(json_string_value(json_object_get(r.message, "content")), "small");
	llm_reply_free(&r);
	llm_client_free(&c);
	server_stop(s);
	json_decref(msgs);
}

/* ---- API key ---------------------------------------------------------------------------------- */

static void test_api_key(void **state)
{
	(void)state;
	struct server *s;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = user_messages(), *reqs;

	s = server_start(
			 "{\"message\": {\"role\": \"assistant\", \"content\": \"welcome\"}}\n"
			 "{\"message\": {\"role\": \"assistant\", \"content\": \"never\"}}\n",
			 "sk-test-42");
	opts_for(&o, s);
	o.api_key = "sk-test-42";
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	if (llm_chat(&c, msgs, NULL, &r, &d) != 0)
		fail_msg("%s", d.msg);
	assert_string_equal(json_string_value(json_object_get(r.message, "content")), "welcome");
	llm_reply_free(&r);
	llm_client_free(&c);

	o.api_key = ""; /* no header */
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_REJECTED);
	assert_int_equal(r.attempts, 1);
	assert_int_equal(r.http_status, 401);
	assert_non_null(strstr(d.msg, "Incorrect API key"));
	llm_client_free(&c);

	o.api_key = "sk-wrong";
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_REJECTED);
	assert_null(strstr(d.msg, "sk-wrong"));
	llm_client_free(&c);

	reqs = server_requests(s);
	assert_int_equal(json_array_size(reqs), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 0), "authorization")),
			    "Bearer sk-test-42");
	assert_true(json_is_null(json_object_get(json_array_get(reqs, 1), "authorization")));
	assert_string_equal(json_string_value(json_object_get(json_array_get(reqs, 2), "authorization")),
			    "Bearer sk-wrong");
	json_decref(reqs);
	server_stop(s);
	json_decref(msgs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_tools_round_trip, teardown_server),
		cmocka_unit_test_teardown(test_options_not_sent, teardown_server),
		cmocka_unit_test_teardown(test_retry_500_503, teardown_server),
		cmocka_unit_test_teardown(test_429_retry_after, teardown_server),
		cmocka_unit_test_teardown(test_exhausted_after_retries, teardown_server),
		cmocka_unit_test_teardown(test_400_not_retried, teardown_server),
		cmocka_unit_test_teardown(test_timeout, teardown_server),
		cmocka_unit_test_teardown(test_raw_not_json, teardown_server),
		cmocka_unit_test_teardown(test_body_over_cap, teardown_server),
		cmocka_unit_test_teardown(test_api_key, teardown_server),
	};
	/* the server is on 127.0.0.1: never through a proxy of the environment */
	setenv("NO_PROXY", "127.0.0.1,localhost", 1);
	setenv("no_proxy", "127.0.0.1,localhost", 1);
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
