/* llm: client of an OpenAI-compatible chat completions endpoint (libcurl).
 *
 * One request per llm_chat(): POST <url>/chat/completions with the conversation, the tool
 * definitions and the sampling options; the reply's choices[0].message is handed back as JSON.
 * 429, 408, 409, 5xx, timeouts and connection failures are retried with exponential backoff
 * (Retry-After honoured); other 4xx are not. Response bodies are untrusted: capped in size, parsed
 * by llm_parse_reply() (fuzzed), and quoted in messages only as printable text.
 *
 * The API key comes from the caller (the agent loop reads it from the environment); this module
 * never reads the environment itself (libcurl may, for its proxy variables) and never writes the
 * key into a message or a log. */
#ifndef CA_AGENT_LLM_H
#define CA_AGENT_LLM_H

#include <jansson.h>
#include <signal.h>
#include <stddef.h>

#include "util/diag.h"

#define LLM_DEFAULT_TIMEOUT_S 600.0
#define LLM_DEFAULT_CONNECT_TIMEOUT_S 10.0
#define LLM_DEFAULT_MAX_RETRIES 5
#define LLM_DEFAULT_BACKOFF_S 1.0
#define LLM_MAX_BACKOFF_S 60.0        /* cap of the doubling backoff */
#define LLM_MAX_RETRY_AFTER_S 300.0   /* a larger Retry-After is cut to this */
#define LLM_DEFAULT_MAX_RESPONSE (16u << 20)
#define LLM_ERROR_QUOTE 200           /* printable characters of a server's error message quoted */

struct llm_opts {
	const char *url;           /* base URL, e.g. "http://127.0.0.1:8000/v1"; requests go to <url>/chat/completions */
	const char *model;
	const char *api_key;       /* NULL or "": no Authorization header; else "Authorization: Bearer <key>" */
	double temperature;        /* < 0: not sent */
	int max_tokens;            /* <= 0: not sent */
	double timeout_s;          /* whole request; 0: 600 */
	double connect_timeout_s;  /* 0: 10 */
	int max_retries;           /* retries after the first attempt; < 0: 0; default via llm_opts_defaults: 5 */
	double backoff_s;          /* first wait, doubling, capped at 60 s, +-20% jitter; Retry-After (seconds) honoured when larger; default 1 */
	size_t max_response_bytes; /* 0: 16 MiB; a larger body is an error, not truncated */
	const json_t *extra;       /* optional object merged into each request body (e.g. {"top_p": 0.9}); borrowed
				    * during llm_client_init only (copied); it cannot replace model, messages,
				    * tools, temperature or max_tokens, and "stream" is never sent */

	/* Optional hook called before each retry wait (may be NULL): attempt is the 1-based number
	 * of the attempt that failed, wait_s the wait about to start, why the one-line reason. */
	void (*on_retry)(void *arg, int attempt, double wait_s, const char *why);
	void *on_retry_arg;
	/* Optional stop flag (e.g. set by a SIGINT handler): when it becomes nonzero, a transfer in
	 * progress is aborted, a retry wait ends, and llm_chat returns CA_ERR_INTERRUPTED. */
	const volatile sig_atomic_t *stop;
};

/* Zeroes o and sets the defaults: temperature -1 (not sent), max_tokens 0 (not sent), timeouts
 * 600 s and 10 s, 5 retries, 1 s backoff, 16 MiB cap. */
void llm_opts_defaults(struct llm_opts *o);

struct llm_reply {
	json_t *message;        /* choices[0].message (role, content, tool_calls...), owned; never NULL on success */
	char finish_reason[32]; /* "" when absent */
	long prompt_tokens, completion_tokens, total_tokens; /* -1 when the server sent no usage */
	int attempts;           /* requests sent (1 + retries) */
	double seconds;         /* wall time including retries and waits */
	long http_status;       /* of the last attempt (0: no HTTP response) */
};

struct llm_state; /* the CURL handle (reused across calls: keep-alive), headers, buffers */

struct llm_client {
	struct llm_state *st; /* owned; the struct itself may be moved after init */
	long requests_total;  /* requests sent over the client's life */
	long retries_total;   /* of which retries */
};

/* Copies the options (strings and extra); checks that url and model are non-empty. */
int llm_client_init(struct llm_client *c, const struct llm_opts *o, struct ca_diag *d);
/* Safe on a zeroed client and after a failed init. */
void llm_client_free(struct llm_client *c);

/* POSTs {"model", "messages", "tools" (when tools is a non-empty array), "temperature", "max_tokens", ...extra}.
 * Returns 0 with *out filled, or: CA_ERR_TIMEOUT (timed out on the last attempt), CA_ERR_IO (connection failure after retries),
 * CA_ERR_REJECTED (a 4xx other than 408/409/429: not retried; message says the status and the start of the body's error.message),
 * CA_ERR_CHILD (5xx/429 after all retries), CA_ERR_PARSE (body not JSON, or no choices[0].message), CA_ERR_LIMIT (body over the cap),
 * CA_ERR_INVALID (messages not an array, tools neither NULL nor an array), CA_ERR_INTERRUPTED (the stop flag).
 * The diag message is one line naming the URL, the status and what the server said.
 * On failure out->message is NULL and attempts, seconds and http_status are still filled. */
int llm_chat(struct llm_client *c, const json_t *messages, const json_t *tools, struct llm_reply *out, struct ca_diag *d);
/* Safe on a zeroed reply and after a failed llm_chat; leaves it zeroed. */
void llm_reply_free(struct llm_reply *r);

/* The body -> llm_reply step of llm_chat (exposed for tests and the fuzzer): a chat.completion
 * JSON body of len bytes (need not be NUL-terminated). Fills message (an assistant "role" is
 * added when the server left it out), finish_reason and the usage counts; leaves attempts,
 * seconds and http_status at 0. CA_ERR_PARSE when the body is not JSON or has no
 * choices[0].message object. */
int llm_parse_reply(const char *body, size_t len, struct llm_reply *out, struct ca_diag *d);

/* What a server said in an error body, for a one-line message: error.message (OpenAI style),
 * error as a string, or a top-level "message"/"detail" string, else the start of the raw body;
 * at most LLM_ERROR_QUOTE printable characters ('?' for control characters). "" for an empty
 * body. Returns out. */
char *llm_error_summary(const char *body, size_t len, char *out, size_t size);

#endif
