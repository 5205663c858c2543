#include "agent/llm.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/str.h"

#define LLM_MAX_URL 4096
#define LLM_BODY_START (16u << 10)
#define LLM_BODY_HARD_MAX ((size_t)1 << 40) /* max_response_bytes is clamped to this */

struct llm_state {
	CURL *curl;
	struct curl_slist *headers;
	char *url;     /* <base>/chat/completions */
	char *model;
	json_t *extra; /* a copy without the keys llm_chat sets itself, or NULL */
	double temperature;
	int max_tokens;
	int max_retries;
	double backoff_s;
	size_t max_body;
	void (*on_retry)(void *arg, int attempt, double wait_s, const char *why);
	void *on_retry_arg;
	const volatile sig_atomic_t *stop;
	uint64_t rng;
	/* the attempt in progress */
	char *body;
	size_t len, cap;
	bool over_cap, nomem;
	double retry_after_s; /* < 0: the response had none */
	char errbuf[CURL_ERROR_SIZE];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

void llm_opts_defaults(struct llm_opts *o)
{
	memset(o, 0, sizeof *o);
	o->temperature = -1.0;
	o->max_tokens = 0;
	o->timeout_s = LLM_DEFAULT_TIMEOUT_S;
	o->connect_timeout_s = LLM_DEFAULT_CONNECT_TIMEOUT_S;
	o->max_retries = LLM_DEFAULT_MAX_RETRIES;
	o->backoff_s = LLM_DEFAULT_BACKOFF_S;
	o->max_response_bytes = LLM_DEFAULT_MAX_RESPONSE;
}

/* ---- untrusted text in one-line messages ------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid or cut short. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	size_t want, i;
	unsigned char lo = 0x80, hi = 0xbf;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		want = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		want = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		want = 4;
	else
		return 0;
	if (n < want)
		return 0;
	if (s[0] == 0xe0)
		lo = 0xa0; /* overlong */
	else if (s[0] == 0xed)
		hi = 0x9f; /* surrogates */
	else if (s[0] == 0xf0)
		lo = 0x90; /* overlong */
	else if (s[0] == 0xf4)
		hi = 0x8f; /* > U+10FFFF */
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < want; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return want;
}

/* Writes at most max_chars characters of text (len bytes) into out: whitespace runs become one
 * space, other control characters and invalid UTF-8 '?'; the result is valid UTF-8. */
static void quote_text(char *out, size_t size, const char *text, size_t len, size_t max_chars)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t i = 0, o = 0, chars = 0;
	bool space = false;
	if (size == 0)
		return;
	while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
		i++;
	while (i < len && chars < max_chars) {
		size_t k;
		if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			space = true;
			i++;
			continue;
		}
		if (space) {
			if (o + 1 >= size)
				break;
			out[o++] = ' ';
			chars++;
			space = false;
			if (chars >= max_chars)
				break;
		}
		k = utf8_seq(s + i, len - i);
		if (k == 0 || (k == 1 && (s[i] < 0x20 || s[i] == 0x7f))) {
			if (o + 1 >= size)
				break;
			out[o++] = '?';
			i++;
		} else {
			if (o + k >= size)
				break;
			memcpy(out + o, s + i, k);
			o += k;
			i += k;
		}
		chars++;
	}
	out[o] = '\0';
}

char *llm_error_summary(const char *body, size_t len, char *out, size_t size)
{
	json_t *root = NULL, *e = NULL, *err;
	char *dumped = NULL;
	const char *text = body;
	size_t tlen = len;

	if (size == 0)
		return out;
	out[0] = '\0';
	if (!body || len == 0)
		return out;
	root = json_loadb(body, len, 0, NULL);
	if (json_is_object(root)) {
		err = json_object_get(root, "error");
		if (json_is_object(err) && json_is_string(json_object_get(err, "message")))
			e = json_object_get(err, "message");
		else if (json_is_string(err))
			e = err;
		else if (json_is_string(json_object_get(root, "message")))
			e = json_object_get(root, "message");
		else if (json_object_get(root, "detail"))
			e = json_object_get(root, "detail");
		if (json_is_string(e)) {
			text = json_string_value(e);
			tlen = json_string_length(e);
		} else if (e && (dumped = json_dumps(e, JSON_COMPACT | JSON_ENCODE_ANY)) != NULL) {
			text = dumped;
			tlen = strlen(dumped);
		}
	}
	quote_text(out, size, text, tlen, LLM_ERROR_QUOTE);
	free(dumped);
	json_decref(root);
	return out;
}

/* ---- reply parsing ---------------------------------------------------------------------------- */

static long usage_count(const json_t *usage, const char *key)
{
	const json_t *v = json_object_get(usage, key);
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	return (long)json_integer_value(v);
}

int llm_parse_reply(const char *body, size_t len, struct llm_reply *out, struct ca_diag *d)
{
	json_error_t je;
	json_t *root = NULL, *choices, *c0, *msg, *usage, *fr;
	char what[LLM_ERROR_QUOTE * 4 + 1], why[256];
	int rc = 0;

	memset(out, 0, sizeof *out);
	out->prompt_tokens = out->completion_tokens = out->total_tokens = -1;
	if (!body)
		body = "";
	root = json_loadb(body, len, 0, &je);
	if (!root) {
		quote_text(why, sizeof why, je.text, strlen(je.text), 120);
		rc = ca_fail(d, CA_ERR_PARSE, "the reply is not JSON (%s, byte %d): %s", why,
			     je.position, llm_error_summary(body, len, what, sizeof what));
		goto out;
	}
	choices = json_object_get(root, "choices");
	c0 = json_array_get(choices, 0);
	msg = json_object_get(c0, "message");
	if (!json_is_object(msg)) {
		llm_error_summary(body, len, what, sizeof what);
		rc = ca_fail(d, CA_ERR_PARSE, "the reply has no choices[0].message object%s%s",
			     json_object_get(root, "error") ? "; the server said: " : ": ", what);
		goto out;
	}
	if (!json_is_string(json_object_get(msg, "role")) &&
	    json_object_set_new(msg, "role", json_string("assistant")) != 0) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	fr = json_object_get(c0, "finish_reason");
	if (json_is_string(fr))
		quote_text(out->finish_reason, sizeof out->finish_reason, json_string_value(fr),
			   json_string_length(fr), sizeof out->finish_reason - 1);
	usage = json_object_get(root, "usage");
	if (json_is_object(usage)) {
		out->prompt_tokens = usage_count(usage, "prompt_tokens");
		out->completion_tokens = usage_count(usage, "completion_tokens");
		out->total_tokens = usage_count(usage, "total_tokens");
	}
	out->message = json_incref(msg);
out:
	json_decref(root);
	return rc;
}

void llm_reply_free(struct llm_reply *r)
{
	if (!r)
		return;
	json_decref(r->message);
	memset(r, 0, sizeof *r);
}

/* ---- libcurl callbacks ------------------------------------------------------------------------ */

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct llm_state *s = arg;
	size_t n = size * nmemb; /* libcurl: size is always 1 */
	if (n > s->max_body - s->len) {
		s->over_cap = true;
		return 0; /* aborts the transfer */
	}
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : LLM_BODY_START;
		char *p;
		while (cap < s->len + n + 1)
			cap *= 2;
		p = realloc(s->body, cap);
		if (!p) {
			s->nomem = true;
			return 0;
		}
		s->body = p;
		s->cap = cap;
	}
	memcpy(s->body + s->len, ptr, n);
	s->len += n;
	s->body[s->len] = '\0';
	return n;
}

/* Retry-After: <seconds> (an HTTP date is ignored) and retry-after-ms: <milliseconds>. */
static size_t on_header(char *buf, size_t size, size_t nitems, void *arg)
{
	static const char ra[] = "retry-after:", ra_ms[] = "retry-after-ms:";
	struct llm_state *s = arg;
	size_t n = size * nitems, i, k = 0;
	double scale;
	char v[32], *end;

	if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		s->retry_after_s = -1.0; /* a new response (after a 100 Continue, say) */
		return n;
	}
	if (n > sizeof ra - 1 && strncasecmp(buf, ra, sizeof ra - 1) == 0) {
		i = sizeof ra - 1;
		scale = 1.0;
	} else if (n > sizeof ra_ms - 1 && strncasecmp(buf, ra_ms, sizeof ra_ms - 1) == 0) {
		i = sizeof ra_ms - 1;
		scale = 1e-3;
	} else {
		return n;
	}
	while (i < n && (buf[i] == ' ' || buf[i] == '\t'))
		i++;
	while (i < n && k + 1 < sizeof v && ((buf[i] >= '0' && buf[i] <= '9') || buf[i] == '.'))
		v[k++] = buf[i++];
	v[k] = '\0';
	if (k > 0) {
		double x = strtod(v, &end);
		if (*end == '\0' && isfinite(x) && x >= 0)
			s->retry_after_s = x * scale;
	}
	return n;
}

static bool stopped(const struct llm_state *s)
{
	return s->stop && *s->stop;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	(void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
	return stopped(arg) ? 1 : 0;
}

/* ---- client ----------------------------------------------------------------------------------- */

static long to_ms(double s, double dflt)
{
	if (!(s > 0) || !isfinite(s))
		s = dflt;
	if (s > 1e7)
		s = 1e7;
	return s * 1000.0 < 1.0 ? 1 : (long)(s * 1000.0 + 0.5);
}

#define SETOPT(opt, val)                                                                          \
	do {                                                                                      \
		if (e == CURLE_OK)                                                                \
			e = curl_easy_setopt(s->curl, opt, val);                                  \
	} while (0)

static int setup_curl(struct llm_state *s, const struct llm_opts *o, struct ca_diag *d)
{
	CURLcode e = CURLE_OK;
	s->curl = curl_easy_init();
	if (!s->curl)
		return ca_fail(d, CA_ERR_NOMEM, "LLM client: curl_easy_init failed");
	SETOPT(CURLOPT_URL, s->url);
	SETOPT(CURLOPT_HTTPHEADER, s->headers);
	SETOPT(CURLOPT_POST, 1L);
	SETOPT(CURLOPT_WRITEFUNCTION, on_body);
	SETOPT(CURLOPT_WRITEDATA, (void *)s);
	SETOPT(CURLOPT_HEADERFUNCTION, on_header);
	SETOPT(CURLOPT_HEADERDATA, (void *)s);
	SETOPT(CURLOPT_ERRORBUFFER, s->errbuf);
	SETOPT(CURLOPT_TIMEOUT_MS, to_ms(o->timeout_s, LLM_DEFAULT_TIMEOUT_S));
	SETOPT(CURLOPT_CONNECTTIMEOUT_MS, to_ms(o->connect_timeout_s, LLM_DEFAULT_CONNECT_TIMEOUT_S));
	SETOPT(CURLOPT_NOSIGNAL, 1L);
	SETOPT(CURLOPT_TCP_KEEPALIVE, 1L);
	SETOPT(CURLOPT_USERAGENT, "cuda-agent");
	SETOPT(CURLOPT_ACCEPT_ENCODING, ""); /* the cap applies to the decoded body */
#if LIBCURL_VERSION_NUM >= 0x075500
	SETOPT(CURLOPT_PROTOCOLS_STR, "http,https");
#else
	SETOPT(CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
	if (s->stop) {
		SETOPT(CURLOPT_XFERINFOFUNCTION, on_progress);
		SETOPT(CURLOPT_XFERINFODATA, (void *)s);
		SETOPT(CURLOPT_NOPROGRESS, 0L);
	}
	if (e != CURLE_OK)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "LLM client: libcurl option rejected: %s",
			       curl_easy_strerror(e));
	return 0;
}

static int add_header(struct llm_state *s, const char *h, struct ca_diag *d)
{
	struct curl_slist *l = curl_slist_append(s->headers, h);
	if (!l)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	s->headers = l;
	return 0;
}

static void state_free(struct llm_state *s)
{
	if (!s)
		return;
	if (s->curl)
		curl_easy_cleanup(s->curl);
	curl_slist_free_all(s->headers);
	free(s->url);
	free(s->model);
	json_decref(s->extra);
	free(s->body);
	free(s);
}

int llm_client_init(struct llm_client *c, const struct llm_opts *o, struct ca_diag *d)
{
	static const char *const own_keys[] = {"model", "messages", "tools", "temperature",
					       "max_tokens", "stream"};
	struct llm_state *s = NULL;
	char *auth = NULL;
	size_t ulen;
	int rc = 0;

	memset(c, 0, sizeof *c);
	if (!o || !o->url || (strncmp(o->url, "http://", 7) != 0 && strncmp(o->url, "https://", 8) != 0))
		return ca_fail(d, CA_ERR_INVALID, "LLM client: the URL must start with http:// or https://");
	ulen = strlen(o->url);
	while (ulen && o->url[ulen - 1] == '/')
		ulen--;
	if (ulen > LLM_MAX_URL)
		return ca_fail(d, CA_ERR_INVALID, "LLM client: the URL is longer than %d bytes", LLM_MAX_URL);
	for (size_t i = 0; i < ulen; i++)
		if ((unsigned char)o->url[i] <= 0x20 || o->url[i] == 0x7f)
			return ca_fail(d, CA_ERR_INVALID, "LLM client: the URL contains a space or control character");
	if (!o->model || !o->model[0])
		return ca_fail(d, CA_ERR_INVALID, "LLM client: no model name");
	if (o->api_key)
		for (const char *p = o->api_key; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				return ca_fail(d, CA_ERR_INVALID, "LLM client: the API key contains a control character");
	if (o->extra && !json_is_object(o->extra))
		return ca_fail(d, CA_ERR_INVALID, "LLM client: extra request fields must be a JSON object");
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "libcurl initialisation failed: %s",
			       curl_easy_strerror(curl_init_rc));

	s = calloc(1, sizeof *s);
	if (!s)
		return ca_fail(d, CA_ERR_NOMEM, "out of memory");
	if (asprintf(&s->url, "%.*s/chat/completions", (int)ulen, o->url) < 0) {
		s->url = NULL;
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	s->model = strdup(o->model);
	s->extra = o->extra ? json_deep_copy(o->extra) : NULL;
	if (!s->model || (o->extra && !s->extra)) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; s->extra && i < sizeof own_keys / sizeof own_keys[0]; i++)
		json_object_del(s->extra, own_keys[i]);
	s->temperature = isfinite(o->temperature) ? o->temperature : -1.0;
	s->max_tokens = o->max_tokens;
	s->max_retries = o->max_retries < 0 ? 0 : o->max_retries;
	s->backoff_s = o->backoff_s > 0 && isfinite(o->backoff_s) ? o->backoff_s : 0.0;
	s->max_body = o->max_response_bytes ? o->max_response_bytes : LLM_DEFAULT_MAX_RESPONSE;
	if (s->max_body > LLM_BODY_HARD_MAX)
		s->max_body = LLM_BODY_HARD_MAX;
	s->on_retry = o->on_retry;
	s->on_retry_arg = o->on_retry_arg;
	s->stop = o->stop;
	s->rng = ((uint64_t)(ca_wall_now() * 1e6) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)s) |
		 1u;
	rc = add_header(s, "Content-Type: application/json", d);
	if (!rc)
		rc = add_header(s, "Accept: application/json", d);
	if (!rc)
		rc = add_header(s, "Expect:", d); /* no 100-continue round trip for large bodies */
	if (!rc && o->api_key && o->api_key[0]) {
		if (asprintf(&auth, "Authorization: Bearer %s", o->api_key) < 0) {
			auth = NULL;
			rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		} else {
			rc = add_header(s, auth, d);
			explicit_bzero(auth, strlen(auth));
			free(auth);
		}
	}
	if (!rc)
		rc = setup_curl(s, o, d);
out:
	if (rc)
		state_free(s);
	else
		c->st = s;
	return rc;
}

void llm_client_free(struct llm_client *c)
{
	if (!c)
		return;
	state_free(c->st);
	memset(c, 0, sizeof *c);
}

/* ---- one request ------------------------------------------------------------------------------ */

static bool transient_curl_error(CURLcode e)
{
	switch (e) {
	case CURLE_COULDNT_RESOLVE_PROXY:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
	case CURLE_PARTIAL_FILE:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return true;
	default:
		return false;
	}
}

static int build_request(const struct llm_state *s, const json_t *messages, const json_t *tools,
			 char **text, struct ca_diag *d)
{
	json_t *req = s->extra ? json_deep_copy(s->extra) : json_object();
	int bad = !req;
	/* messages and tools are borrowed: json_object_set only takes a reference, dropped below */
	if (!bad)
		bad |= json_object_set_new(req, "model", json_string(s->model));
	if (!bad)
		bad |= json_object_set(req, "messages", (json_t *)messages);
	if (!bad && tools && json_array_size(tools) > 0)
		bad |= json_object_set(req, "tools", (json_t *)tools);
	if (!bad && s->temperature >= 0)
		bad |= json_object_set_new(req, "temperature", json_real(s->temperature));
	if (!bad && s->max_tokens > 0)
		bad |= json_object_set_new(req, "max_tokens", json_integer(s->max_tokens));
	*text = bad ? NULL : json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!*text)
		return ca_fail(d, CA_ERR_INVALID,
			       "cannot encode the chat request (out of memory, or invalid JSON values)");
	return 0;
}

/* One POST. *retryable says whether another attempt may succeed. */
static int attempt_once(struct llm_state *s, const char *text, struct llm_reply *out, bool *retryable,
			struct ca_diag *d)
{
	char said[LLM_ERROR_QUOTE * 4 + 1], why[CURL_ERROR_SIZE];
	long status = 0;
	CURLcode e;
	int rc;

	*retryable = false;
	s->len = 0;
	s->over_cap = s->nomem = false;
	s->retry_after_s = -1.0;
	s->errbuf[0] = '\0';
	if (curl_easy_setopt(s->curl, CURLOPT_POSTFIELDS, text) != CURLE_OK ||
	    curl_easy_setopt(s->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(text)) != CURLE_OK)
		return ca_fail(d, CA_ERR_UNSUPPORTED, "POST %s: libcurl rejected the request body", s->url);
	e = curl_easy_perform(s->curl);
	if (curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK)
		status = 0;
	out->http_status = status;
	if (s->over_cap)
		return ca_fail(d, CA_ERR_LIMIT, "POST %s: HTTP %ld: the response body is over the %zu-byte cap",
			       s->url, status, s->max_body);
	if (s->nomem)
		return ca_fail(d, CA_ERR_NOMEM, "POST %s: out of memory for the response body", s->url);
	if (e == CURLE_ABORTED_BY_CALLBACK)
		return ca_fail(d, CA_ERR_INTERRUPTED, "POST %s: interrupted", s->url);
	if (e != CURLE_OK) {
		const char *m = s->errbuf[0] ? s->errbuf : curl_easy_strerror(e);
		quote_text(why, sizeof why, m, strlen(m), sizeof why - 1);
		*retryable = transient_curl_error(e);
		if (e == CURLE_OPERATION_TIMEDOUT)
			return ca_fail(d, CA_ERR_TIMEOUT, "POST %s: timed out: %s", s->url, why);
		return ca_fail(d, CA_ERR_IO, "POST %s: %s", s->url, why);
	}
	if (status >= 200 && status < 300) {
		rc = llm_parse_reply(s->body, s->len, out, d);
		out->http_status = status;
		if (rc)
			return ca_fail_prefix(d, rc, "POST %s: HTTP %ld", s->url, status);
		return 0;
	}
	llm_error_summary(s->body, s->len, said, sizeof said);
	if (!said[0])
		ca_strlcpy(said, "(empty body)", sizeof said);
	if (status == 429 || status == 408 || status == 409 || status >= 500) {
		*retryable = true;
		return ca_fail(d, CA_ERR_CHILD, "POST %s: HTTP %ld: %s", s->url, status, said);
	}
	return ca_fail(d, CA_ERR_REJECTED, "POST %s: HTTP %ld: %s", s->url, status, said);
}

/* backoff_s * 2^(attempt-1), capped, +-20% jitter; a larger Retry-After wins (capped). */
static double retry_wait(struct llm_state *s, int attempt)
{
	double w = s->backoff_s, u;
	for (int i = 1; i < attempt && w < LLM_MAX_BACKOFF_S; i++)
		w *= 2;
	if (w > LLM_MAX_BACKOFF_S)
		w = LLM_MAX_BACKOFF_S;
	s->rng ^= s->rng >> 12; /* xorshift64* */
	s->rng ^= s->rng << 25;
	s->rng ^= s->rng >> 27;
	u = (double)((s->rng * 2685821657736338717ull) >> 11) * 0x1p-53;
	w *= 0.8 + 0.4 * u;
	if (s->retry_after_s > w)
		w = s->retry_after_s < LLM_MAX_RETRY_AFTER_S ? s->retry_after_s : LLM_MAX_RETRY_AFTER_S;
	return w;
}

/* Sleeps wait_s seconds in short slices; false if the stop flag ended it. */
static bool wait_for(const struct llm_state *s, double wait_s)
{
	double end = ca_now() + wait_s;
	for (;;) {
		double left = end - ca_now();
		struct timespec ts;
		if (stopped(s))
			return false;
		if (left <= 0)
			return true;
		if (left > 0.05)
			left = 0.05;
		ts.tv_sec = 0;
		ts.tv_nsec = (long)(left * 1e9);
		nanosleep(&ts, NULL);
	}
}

int llm_chat(struct llm_client *c, const json_t *messages, const json_t *tools, struct llm_reply *out,
	     struct ca_diag *d)
{
	struct llm_state *s = c ? c->st : NULL;
	struct ca_diag ad;
	char *text = NULL;
	double t0 = ca_now(), wait;
	long status = 0;
	int rc, attempt = 0;
	bool retryable = false;

	memset(out, 0, sizeof *out);
	out->prompt_tokens = out->completion_tokens = out->total_tokens = -1;
	ca_diag_clear(&ad);
	if (!s)
		return ca_fail(d, CA_ERR_INVALID, "LLM client used before llm_client_init");
	if (!json_is_array(messages))
		return ca_fail(d, CA_ERR_INVALID, "LLM request: messages must be a JSON array");
	if (tools && !json_is_array(tools))
		return ca_fail(d, CA_ERR_INVALID, "LLM request: tools must be a JSON array");
	rc = build_request(s, messages, tools, &text, d);
	if (rc)
		return rc;
	for (;;) {
		if (stopped(s)) {
			rc = ca_fail(&ad, CA_ERR_INTERRUPTED, "POST %s: interrupted", s->url);
			break;
		}
		attempt++;
		c->requests_total++;
		rc = attempt_once(s, text, out, &retryable, &ad);
		status = out->http_status;
		if (rc == 0 || !retryable || attempt > s->max_retries)
			break;
		wait = retry_wait(s, attempt);
		ca_log_info("%s; retry %d of %d in %.1f s", ad.msg, attempt, s->max_retries, wait);
		if (s->on_retry)
			s->on_retry(s->on_retry_arg, attempt, wait, ad.msg);
		c->retries_total++;
		if (!wait_for(s, wait)) {
			rc = ca_fail(&ad, CA_ERR_INTERRUPTED, "POST %s: interrupted while waiting to retry",
				     s->url);
			break;
		}
	}
	free(text);
	if (rc) {
		llm_reply_free(out);
		out->prompt_tokens = out->completion_tokens = out->total_tokens = -1;
		if (attempt > 1)
			ca_fail(d, rc, "%s (after %d attempts)", ad.msg, attempt);
		else
			ca_fail(d, rc, "%s", ad.msg);
	}
	out->attempts = attempt;
	out->http_status = status;
	out->seconds = ca_now() - t0;
	return rc;
}
