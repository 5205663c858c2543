/* Unit tests for src/agent/llm: reply parsing, error summaries, options, and the retry loop
 * against a closed port (no server; the scripted server tests are in tests/agent/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "agent/llm.h"
#include "util/clock.h"

static int parse(const char *body, struct llm_reply *r, struct ca_diag *d)
{
	return llm_parse_reply(body, strlen(body), r, d);
}

/* ---- llm_parse_reply -------------------------------------------------------------------------- */

static void test_parse_tool_calls(void **state)
{
	(void)state;
	static const char body[] =
		"{\"id\":\"x\",\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
		"{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\",\"type\":"
		"\"function\",\"function\":{\"name\":\"compile\",\"arguments\":\"{\\\"path\\\":\\\"k.cu\\\"}\"}}]},"
		"\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,"
		"\"total_tokens\":19}}";
	struct llm_reply r;
	struct ca_diag d;
	const json_t *call;

	assert_int_equal(parse(body, &r, &d), 0);
	assert_non_null(r.message);
	assert_string_equal(json_string_value(json_object_get(r.message, "role")), "assistant");
	assert_true(json_is_null(json_object_get(r.message, "content")));
	call = json_array_get(json_object_get(r.message, "tool_calls"), 0);
	assert_string_equal(json_string_value(json_object_get(call, "id")), "call_1");
	assert_string_equal(json_string_value(json_object_get(json_object_get(call, "function"), "name")),
			    "compile");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(call, "function"), "arguments")),
		"{\"path\":\"k.cu\"}");
	assert_string_equal(r.finish_reason, "tool_calls");
	assert_int_equal(r.prompt_tokens, 12);
	assert_int_equal(r.completion_tokens, 7);
	assert_int_equal(r.total_tokens, 19);
	assert_int_equal(r.attempts, 0);
	llm_reply_free(&r);
	assert_null(r.message);
	llm_reply_free(&r); /* twice is fine */
}

static void test_parse_missing_fields(void **state)
{
	(void)state;
	struct llm_reply r;
	struct ca_diag d;

	/* no usage, no finish_reason, no role: counts -1, "" and an assistant role added */
	assert_int_equal(parse("{\"choices\":[{\"message\":{\"content\":\"hi\"}}]}", &r, &d), 0);
	assert_string_equal(json_string_value(json_object_get(r.message, "content")), "hi");
	assert_string_equal(json_string_value(json_object_get(r.message, "role")), "assistant");
	assert_string_equal(r.finish_reason, "");
	assert_int_equal(r.prompt_tokens, -1);
	assert_int_equal(r.completion_tokens, -1);
	assert_int_equal(r.total_tokens, -1);
	llm_reply_free(&r);

	/* partial or bad usage: only the good counts kept */
	assert_int_equal(parse("{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"\"},"
			       "\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":5,"
			       "\"completion_tokens\":-3,\"total_tokens\":\"8\"}}",
			       &r, &d),
			 0);
	assert_string_equal(r.finish_reason, "length");
	assert_int_equal(r.prompt_tokens, 5);
	assert_int_equal(r.completion_tokens, -1);
	assert_int_equal(r.total_tokens, -1);
	llm_reply_free(&r);

	/* a long finish_reason with control characters is cut and made printable */
	assert_int_equal(parse("{\"choices\":[{\"message\":{},\"finish_reason\":"
			       "\"a\\nbcdefghijklmnopqrstuvwxyz0123456789\\u0001\"}]}",
			       &r, &d),
			 0);
	assert_int_equal(strlen(r.finish_reason), sizeof r.finish_reason - 1);
	assert_string_equal(r.finish_reason, "a bcdefghijklmnopqrstuvwxyz0123");
	llm_reply_free(&r);
}

static void assert_parse_fails(const char *body, const char *want_in_msg)
{
	struct llm_reply r;
	struct ca_diag d;
	memset(&r, 0x55, sizeof r);
	assert_int_equal(llm_parse_reply(body, strlen(body), &r, &d), CA_ERR_PARSE);
	assert_null(r.message);
	assert_null(strchr(d.msg, '\n'));
	if (!strstr(d.msg, want_in_msg))
		fail_msg("'%s' not in: %s", want_in_msg, d.msg);
	llm_reply_free(&r);
}

static void test_parse_bad(void **state)
{
	(void)state;
	struct llm_reply r;
	struct ca_diag d;

	assert_parse_fails("", "not JSON");
	assert_parse_fails("not json", "not JSON");
	assert_parse_fails("<html>\n<body>502 Bad Gateway</body>\n</html>", "<html> <body>502 Bad Gateway");
	assert_parse_fails("{\"choices\":[{\"message\":{}}", "not JSON");
	assert_parse_fails("[1,2]", "no choices[0].message");
	assert_parse_fails("{}", "no choices[0].message");
	assert_parse_fails("{\"choices\":[]}", "no choices[0].message");
	assert_parse_fails("{\"choices\":{}}", "no choices[0].message");
	assert_parse_fails("{\"choices\":[{\"message\":\"hi\"}]}", "no choices[0].message");
	assert_parse_fails("{\"choices\":[{\"text\":\"hi\"}]}", "no choices[0].message");
	/* an error object in a 200 body is quoted */
	assert_parse_fails("{\"error\":{\"message\":\"model overloaded\"}}",
			   "the server said: model overloaded");
	/* a body with a NUL byte in the middle is not JSON, whatever follows */
	assert_int_equal(llm_parse_reply("{\"choices\":[]}\0junk", 19, &r, &d), CA_ERR_PARSE);
	/* the length is honoured: a valid prefix of a longer buffer parses */
	assert_int_equal(llm_parse_reply("{\"choices\":[{\"message\":{}}]}garbage",
					 strlen("{\"choices\":[{\"message\":{}}]}"), &r, &d),
			 0);
	llm_reply_free(&r);
}

/* ---- llm_error_summary ------------------------------------------------------------------------ */

static const char *summary(const char *body, size_t len)
{
	static char out[1024];
	return llm_error_summary(body, len, out, sizeof out);
}
#define SUMMARY(s) summary(s, strlen(s))

static void test_error_summary(void **state)
{
	(void)state;
	char big[4096], small[16];
	const char *s;

	assert_string_equal(SUMMARY("{\"error\":{\"message\":\"Invalid 'messages[1]': bad\",\"type\":"
				    "\"invalid_request_error\"}}"),
			    "Invalid 'messages[1]': bad");
	assert_string_equal(SUMMARY("{\"error\":\"rate limited\"}"), "rate limited");
	assert_string_equal(SUMMARY("{\"message\":\"no healthy upstream\"}"), "no healthy upstream");
	assert_string_equal(SUMMARY("{\"detail\":\"Not Found\"}"), "Not Found");
	assert_string_equal(SUMMARY("{\"detail\":[{\"loc\":[\"body\"],\"msg\":\"field required\"}]}"),
			    "[{\"loc\":[\"body\"],\"msg\":\"field required\"}]");
	assert_string_equal(SUMMARY("  <html>\r\n  <h1>Bad\tGateway</h1>\n"), "<html> <h1>Bad Gateway</h1>");
	assert_string_equal(SUMMARY("a\x01" "b\x7f" "c"), "a?b?c");
	assert_string_equal(summary("a\0b", 3), "a?b");
	assert_string_equal(SUMMARY("bad \xff\xfe utf8 \xe2\x82"), "bad ?? utf8 ??");
	assert_string_equal(SUMMARY("caf\xc3\xa9"), "caf\xc3\xa9");
	assert_string_equal(SUMMARY(""), "");
	assert_string_equal(summary(NULL, 0), "");
	/* at most LLM_ERROR_QUOTE characters */
	memset(big, 'x', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	assert_int_equal(strlen(SUMMARY(big)), LLM_ERROR_QUOTE);
	snprintf(big, sizeof big, "{\"error\":{\"message\":\"%0300d\"}}", 7);
	assert_int_equal(strlen(SUMMARY(big)), LLM_ERROR_QUOTE);
	/* a small buffer: never overflowed, never a cut UTF-8 sequence */
	s = llm_error_summary("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 18,
			      small, sizeof small);
	assert_int_equal(strlen(s), 14);
	assert_int_equal(llm_error_summary("abc", 3, small, 1)[0], '\0');
}

/* ---- client ----------------------------------------------------------------------------------- */

static void test_init_invalid(void **state)
{
	(void)state;
	struct llm_opts o;
	struct llm_client c;
	struct ca_diag d;
	json_t *arr = json_array();

	llm_opts_defaults(&o);
	assert_true(o.temperature < 0);
	assert_int_equal(o.max_tokens, 0);
	assert_int_equal(o.max_retries, 5);
	assert_true(o.backoff_s == 1.0);
	assert_true(o.timeout_s == 600.0 && o.connect_timeout_s == 10.0);
	assert_int_equal(o.max_response_bytes, 16u << 20);

	o.model = "m";
	assert_int_equal(llm_client_init(&c, &o, &d), CA_ERR_INVALID); /* no URL */
	o.url = "file:///etc/passwd";
	assert_int_equal(llm_client_init(&c, &o, &d), CA_ERR_INVALID);
	assert_non_null(strstr(d.msg, "http://"));
	o.url = "http://127.0.0.1:1/v1 x";
	assert_int_equal(llm_client_init(&c, &o, &d), CA_ERR_INVALID);
	o.url = "http://127.0.0.1:1/v1";
	o.model = "";
	assert_int_equal(llm_client_init(&c, &o, &d), CA_ERR_INVALID);
	o.model = "m";
	o.api_key = "sk-abc\r\nX-Injected: 1";
	assert_int_equal(llm_client_init(&c, &o, &d), CA_ERR_INVALID);
	assert_null(strstr(d.msg, "sk-abc"));
	o.api_key = NULL;
	o.extra = arr;
	assert_int_equal(llm_client_init(&c, &o, &d), CA_ERR_INVALID);
	o.extra = NULL;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	llm_client_free(&c);
	llm_client_free(&c);
	json_decref(arr);
}

/* A port on 127.0.0.1 where nothing listens. */
static int closed_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t len = sizeof a;
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;
	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	port = ntohs(a.sin_port);
	close(fd);
	return port;
}

struct hook_log {
	int calls;
	int attempts[8];
	double waits[8];
};

static void on_retry(void *arg, int attempt, double wait_s, const char *why)
{
	struct hook_log *h = arg;
	assert_non_null(strstr(why, "/v1/chat/completions"));
	if (h->calls < 8) {
		h->attempts[h->calls] = attempt;
		h->waits[h->calls] = wait_s;
	}
	h->calls++;
}

static void test_connection_refused_retries(void **state)
{
	(void)state;
	char url[64];
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	struct hook_log h = {0};
	json_t *msgs = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
	double t0;

	snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/", closed_port());
	llm_opts_defaults(&o);
	o.url = url;
	o.model = "m";
	o.api_key = "sk-secret-123";
	o.max_retries = 2;
	o.backoff_s = 0.1;
	o.on_retry = on_retry;
	o.on_retry_arg = &h;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	t0 = ca_now();
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_IO);
	assert_null(r.message);
	assert_int_equal(r.attempts, 3);
	assert_int_equal(r.http_status, 0);
	assert_true(r.seconds >= 0.1 * 0.8 + 0.2 * 0.8);
	assert_true(ca_now() - t0 < 5.0);
	assert_int_equal(h.calls, 2);
	assert_int_equal(h.attempts[0], 1);
	assert_int_equal(h.attempts[1], 2);
	assert_true(h.waits[0] >= 0.08 && h.waits[0] <= 0.12);
	assert_true(h.waits[1] >= 0.16 && h.waits[1] <= 0.24);
	assert_int_equal(c.requests_total, 3);
	assert_int_equal(c.retries_total, 2);
	/* one line naming the URL (no doubled slash), no key */
	assert_non_null(strstr(d.msg, "/v1/chat/completions"));
	assert_null(strstr(d.msg, "/v1//chat"));
	assert_non_null(strstr(d.msg, "after 3 attempts"));
	assert_null(strstr(d.msg, "sk-secret"));
	assert_null(strchr(d.msg, '\n'));
	llm_reply_free(&r);

	/* bad arguments */
	assert_int_equal(llm_chat(&c, json_object_get(json_array_get(msgs, 0), "role"), NULL, &r, &d),
			 CA_ERR_INVALID);
	assert_int_equal(llm_chat(&c, msgs, msgs, &r, &d), CA_ERR_IO); /* a tools array is fine */
	assert_int_equal(llm_chat(&c, msgs, json_array_get(msgs, 0), &r, &d), CA_ERR_INVALID);
	llm_client_free(&c);
	json_decref(msgs);
}

static void stop_on_retry(void *arg, int attempt, double wait_s, const char *why)
{
	(void)attempt, (void)wait_s, (void)why;
	*(volatile sig_atomic_t *)arg = 1;
}

static void test_stop_flag(void **state)
{
	(void)state;
	double t0;
	char url[64];
	volatile sig_atomic_t stop = 1;
	struct llm_opts o;
	struct llm_client c;
	struct llm_reply r;
	struct ca_diag d;
	json_t *msgs = json_array();

	snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", closed_port());
	llm_opts_defaults(&o);
	o.url = url;
	o.model = "m";
	o.stop = &stop;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_INTERRUPTED);
	assert_int_equal(r.attempts, 0);
	assert_int_equal(c.requests_total, 0);
	llm_client_free(&c);

	/* set during a retry wait (a 30 s backoff): the wait ends at once */
	stop = 0;
	o.backoff_s = 30;
	o.on_retry = stop_on_retry;
	o.on_retry_arg = (void *)&stop;
	assert_int_equal(llm_client_init(&c, &o, &d), 0);
	t0 = ca_now();
	assert_int_equal(llm_chat(&c, msgs, NULL, &r, &d), CA_ERR_INTERRUPTED);
	assert_true(ca_now() - t0 < 2.0);
	assert_int_equal(r.attempts, 1);
	assert_non_null(strstr(d.msg, "interrupted"));
	llm_client_free(&c);
	json_decref(msgs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_tool_calls),
		cmocka_unit_test(test_parse_missing_fields),
		cmocka_unit_test(test_parse_bad),
		cmocka_unit_test(test_error_summary),
		cmocka_unit_test(test_init_invalid),
		cmocka_unit_test(test_connection_refused_retries),
		cmocka_unit_test(test_stop_flag),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
