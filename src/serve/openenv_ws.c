/* openenv_ws: OpenEnv's WebSocket protocol on GET /ws (docs/service.md, "OpenEnv"), the one its
 * EnvClient speaks, so that TRL's and SkyRL's OpenEnv clients run multi-turn episodes here.
 *
 * Messages (JSON text frames): {"type": "reset", "data": {...}}, {"type": "step", "data":
 * {...}}, {"type": "state"}, {"type": "close"}. Answers: {"type": "observation", "data":
 * {"observation", "reward", "done", "metadata"}}, {"type": "state", "data": {"episode_id",
 * "step_count"}}, {"type": "error", "data": {"message", "code"}} with OpenEnv's codes
 * (INVALID_JSON, UNKNOWN_TYPE, VALIDATION_ERROR, EXECUTION_ERROR, CAPACITY_REACHED,
 * SESSION_ERROR).
 *
 * An episode: reset with {"task": ..., "limits"?} opens an agent session (POST /v1/sessions: the
 * observation is {session_id, messages, prompt, tools}); each step {"tool": NAME, "arguments":
 * {...}} runs one tool call; a step {"tool": "finalize"} evaluates the workspace (observation
 * {result}, the result's reward, done). A step whose data is an evaluate request (it has
 * "candidate") is a one-step episode, as POST /step. Closing the connection closes its session. */
#include "serve/serve_int.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "serve/websocket.h"
#include "util/log.h"
#include "util/str.h"

#define WS_POLL_MS 1000

struct ws_conn {
	struct serve *S;
	MHD_socket sock;
	uint8_t *in;    /* bytes read, not yet used */
	size_t in_len, in_cap;
	char *msg;      /* the message being assembled */
	size_t msg_len;
	bool closing;
	char session[SESSION_ID_LEN + 1]; /* "" when no session is open */
	int steps;
};

static bool stopping(struct serve *S)
{
	pthread_mutex_lock(&S->mu);
	bool s = S->stopping;
	pthread_mutex_unlock(&S->mu);
	return s;
}

static int send_all(struct ws_conn *w, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n > 0) {
		ssize_t k = send(w->sock, b, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

static int send_frame(struct ws_conn *w, int opcode, const void *p, size_t n)
{
	uint8_t hdr[WS_HEADER_MAX];
	size_t h = ws_frame_header(hdr, opcode, n);
	return send_all(w, hdr, h) || send_all(w, p, n) ? -1 : 0;
}

/* Sends {"type": type, "data": data (stolen)}. */
static int send_msg(struct ws_conn *w, const char *type, json_t *data)
{
	json_t *m = json_pack("{s:s, s:o}", "type", type, "data", data ? data : json_object());
	char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
	int rc = text ? send_frame(w, WS_OP_TEXT, text, strlen(text)) : -1;
	free(text);
	json_decref(m);
	return rc;
}

static int send_error(struct ws_conn *w, const char *code, const char *message)
{
	char text[CA_DIAG_MAX + 64];
	ca_strlcpy(text, message, sizeof text);
	ca_utf8_sanitize(text);
	return send_msg(w, "error", json_pack("{s:s, s:s}", "message", text, "code", code));
}

static void close_with(struct ws_conn *w, unsigned code)
{
	uint8_t payload[2] = {(uint8_t)(code >> 8), (uint8_t)code};
	if (!w->closing)
		(void)send_frame(w, WS_OP_CLOSE, payload, sizeof payload);
	w->closing = true;
}

/* More bytes from the socket: 1 read, 0 nothing within WS_POLL_MS, -1 closed or failed. */
static int fill(struct ws_conn *w)
{
	struct pollfd pfd = {.fd = w->sock, .events = POLLIN};
	int pr = poll(&pfd, 1, WS_POLL_MS);
	if (pr == 0 || (pr < 0 && errno == EINTR))
		return 0;
	if (pr < 0)
		return -1;
	if (w->in_cap - w->in_len < 65536) {
		size_t cap = w->in_cap ? w->in_cap * 2 : 131072;
		uint8_t *p;
		if (cap > 2 * (size_t)WS_MAX_MESSAGE + 65536 || !(p = realloc(w->in, cap)))
			return -1;
		w->in = p;
		w->in_cap = cap;
	}
	ssize_t k = recv(w->sock, w->in + w->in_len, w->in_cap - w->in_len, 0);
	if (k < 0 && errno == EINTR)
		return 0;
	if (k <= 0)
		return -1;
	w->in_len += (size_t)k;
	return 1;
}

/* The next whole text message (w->msg, w->msg_len, NUL-terminated): 1; 0 the connection ends
 * (closed by the peer, a protocol error, the server stopping). Answers pings, refuses binary. */
static int next_message(struct ws_conn *w)
{
	struct ca_diag d = {{0}};
	bool in_msg = false;
	free(w->msg);
	w->msg = NULL;
	w->msg_len = 0;
	for (;;) {
		struct ws_frame f;
		int rc = ws_frame_parse(w->in, w->in_len, &f, &d);
		if (rc < 0) {
			close_with(w, rc == CA_ERR_LIMIT ? 1009 : 1002);
			return 0;
		}
		if (rc == 0 || w->in_len - f.header_len < f.len) {
			int got = fill(w);
			if (got < 0)
				return 0;
			if (got == 0 && stopping(w->S) && !in_msg) {
				close_with(w, 1001);
				return 0;
			}
			continue;
		}
		uint8_t *payload = w->in + f.header_len;
		ws_unmask(payload, (size_t)f.len, f.mask, 0);
		if (f.opcode == WS_OP_PING) {
			(void)send_frame(w, WS_OP_PONG, payload, (size_t)f.len);
		} else if (f.opcode == WS_OP_CLOSE) {
			close_with(w, 1000);
			return 0;
		} else if (f.opcode == WS_OP_BINARY || (f.opcode == WS_OP_TEXT && in_msg) ||
			   (f.opcode == WS_OP_CONT && !in_msg)) {
			close_with(w, f.opcode == WS_OP_BINARY ? 1003 : 1002);
			return 0;
		} else if (f.opcode == WS_OP_TEXT || f.opcode == WS_OP_CONT) {
			char *m;
			if (w->msg_len + f.len > WS_MAX_MESSAGE ||
			    !(m = realloc(w->msg, w->msg_len + (size_t)f.len + 1))) {
				close_with(w, 1009);
				return 0;
			}
			w->msg = m;
			memcpy(w->msg + w->msg_len, payload, (size_t)f.len);
			w->msg_len += (size_t)f.len;
			w->msg[w->msg_len] = '\0';
			in_msg = !f.fin;
		}
		size_t used = f.header_len + (size_t)f.len;
		memmove(w->in, w->in + used, w->in_len - used);
		w->in_len -= used;
		if (w->msg && !in_msg)
			return 1;
	}
}

static void end_session(struct ws_conn *w)
{
	if (w->session[0])
		(void)session_close(&w->S->sessions, w->session);
	w->session[0] = '\0';
}

static const char *error_code_of(unsigned status)
{
	return status == 429 ? "CAPACITY_REACHED" : status >= 500 ? "EXECUTION_ERROR"
								  : "VALIDATION_ERROR";
}

static void on_reset(struct ws_conn *w, json_t *data)
{
	struct ca_diag d = {{0}};
	struct serve_session *s = NULL;
	unsigned status;
	const char *code;
	json_t *answer;
	char *body;
	end_session(w);
	w->steps = 0;
	if (!json_object_get(data, "task")) {
		(void)send_msg(w, "observation",
			       json_pack("{s:{s:s}, s:n, s:b}", "observation", "prompt",
					 "Reset with {\"task\": {\"id\" | \"hash\" | \"files\"}} to "
					 "open an agent session (steps: {\"tool\": NAME, "
					 "\"arguments\": {...}}, then {\"tool\": \"finalize\"}), or "
					 "step an evaluate request (a one-step episode).",
					 "reward", "done", 0));
		return;
	}
	body = json_dumps(data, JSON_COMPACT);
	answer = body ? run_session_open(w->S, body, strlen(body), false, &s, &status, &code, &d)
		      : NULL;
	free(body);
	if (!answer) {
		(void)send_error(w, error_code_of(status), d.msg[0] ? d.msg : "out of memory");
		return;
	}
	ca_strlcpy(w->session, s->id, sizeof w->session);
	session_put(&w->S->sessions, s);
	(void)send_msg(w, "observation",
		       json_pack("{s:o, s:n, s:b, s:{s:s}}", "observation", answer, "reward", "done",
				 0, "metadata", "episode_id", w->session));
}

/* A one-step episode: an evaluate request. */
static void on_evaluate(struct ws_conn *w, const json_t *data)
{
	struct ca_diag d = {{0}};
	unsigned status = 500;
	const char *code = "internal";
	char *body = json_dumps(data, JSON_COMPACT);
	json_t *res = body ? run_evaluate(w->S, body, strlen(body), NULL, &status, &code, &d) : NULL;
	free(body);
	if (!res) {
		(void)send_error(w, error_code_of(status), d.msg[0] ? d.msg : "out of memory");
		return;
	}
	json_t *job = json_incref(json_object_get(res, "job"));
	json_object_del(res, "job");
	(void)send_msg(w, "observation",
		       json_pack("{s:{s:O}, s:O?, s:b, s:{s:o?}}", "observation", "result", res,
				 "reward", json_object_get(res, "reward"), "done", 1, "metadata",
				 "job", job));
	json_decref(res);
}

static void on_step(struct ws_conn *w, json_t *data)
{
	struct ca_diag d = {{0}};
	const char *tool = json_string_value(json_object_get(data, "tool"));
	json_t *args = json_object_get(data, "arguments");
	struct serve_session *s;
	unsigned status = 500;
	json_t *ans;

	if (!json_is_object(data)) {
		(void)send_error(w, "VALIDATION_ERROR", "a step's data must be an object");
		return;
	}
	w->steps++;
	if (json_object_get(data, "candidate")) {
		on_evaluate(w, data);
		return;
	}
	if (!tool || (args && !json_is_object(args))) {
		(void)send_error(w, "VALIDATION_ERROR",
				 "a step is {\"tool\": NAME, \"arguments\": {...}} (or an evaluate "
				 "request with \"task\" and \"candidate\")");
		return;
	}
	if (!w->session[0] || !(s = session_get(&w->S->sessions, w->session))) {
		(void)send_error(w, "SESSION_ERROR",
				 w->session[0] ? "the session is gone (idle too long): reset again"
					       : "no session: reset with a task first");
		w->session[0] = '\0';
		return;
	}
	if (strcmp(tool, "finalize") == 0) {
		ans = session_finalize(&w->S->sessions, s);
		session_put(&w->S->sessions, s);
		end_session(w);
		(void)send_msg(w, "observation",
			       json_pack("{s:{s:O}, s:O?, s:b}", "observation", "result", ans,
					 "reward", json_object_get(ans, "reward"), "done", 1));
		json_decref(ans);
		return;
	}
	json_t *a = args ? json_incref(args) : json_object();
	ans = session_tool(&w->S->sessions, s, tool, a, &status, &d);
	json_decref(a);
	session_put(&w->S->sessions, s);
	if (!ans) {
		(void)send_error(w, status == 404 ? "VALIDATION_ERROR" : error_code_of(status),
				 d.msg);
		return;
	}
	(void)send_msg(w, "observation",
		       json_pack("{s:o, s:n, s:b}", "observation", ans, "reward", "done", 0));
}

static void on_message(struct ws_conn *w)
{
	json_error_t je;
	json_t *m = json_loadb(w->msg, w->msg_len, JSON_REJECT_DUPLICATES, &je);
	const char *type = json_string_value(json_object_get(m, "type"));
	json_t *data = json_object_get(m, "data");
	if (!json_is_object(m)) {
		(void)send_error(w, "INVALID_JSON", "a message is a JSON object {\"type\", \"data\"}");
	} else if (!type) {
		(void)send_error(w, "UNKNOWN_TYPE", "a message needs a \"type\"");
	} else if (strcmp(type, "reset") == 0) {
		on_reset(w, json_is_object(data) ? data : NULL);
	} else if (strcmp(type, "step") == 0) {
		on_step(w, data);
	} else if (strcmp(type, "state") == 0) {
		(void)send_msg(w, "state",
			       json_pack("{s:s?, s:i}", "episode_id", w->session[0] ? w->session : NULL,
					 "step_count", w->steps));
	} else if (strcmp(type, "close") == 0) {
		end_session(w);
		close_with(w, 1000);
	} else {
		(void)send_error(w, "UNKNOWN_TYPE", "the types are reset, step, state and close");
	}
	json_decref(m);
}

static void on_upgrade(void *cls, struct MHD_Connection *c, void *req_cls, const char *extra_in,
		       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
	struct ws_conn w = {.S = cls, .sock = sock};
	(void)c;
	(void)req_cls;
	/* Blocking I/O on this connection's own thread (MHD_USE_THREAD_PER_CONNECTION). */
	int fl = fcntl(sock, F_GETFL);
	if (fl >= 0)
		(void)fcntl(sock, F_SETFL, fl & ~O_NONBLOCK);
	if (extra_in_size > 0 && (w.in = malloc(extra_in_size + 65536))) {
		memcpy(w.in, extra_in, extra_in_size);
		w.in_len = extra_in_size;
		w.in_cap = extra_in_size + 65536;
	}
	pthread_mutex_lock(&w.S->mu);
	w.S->ws_open++;
	pthread_mutex_unlock(&w.S->mu);
	while (!w.closing && next_message(&w) == 1)
		on_message(&w);
	end_session(&w);
	free(w.in);
	free(w.msg);
	MHD_upgrade_action(urh, MHD_UPGRADE_ACTION_CLOSE);
	pthread_mutex_lock(&w.S->mu);
	w.S->ws_open--;
	pthread_mutex_unlock(&w.S->mu);
}

static bool header_has(struct MHD_Connection *c, const char *name, const char *token)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
	size_t n = strlen(token);
	for (const char *p = v; p && *p;) {
		p += strspn(p, " \t,");
		size_t k = strcspn(p, ",");
		size_t e = k;
		while (e > 0 && (p[e - 1] == ' ' || p[e - 1] == '\t'))
			e--;
		if (e == n && strncasecmp(p, token, n) == 0)
			return true;
		p += k;
	}
	return false;
}

enum MHD_Result openenv_ws_upgrade(struct serve *S, struct MHD_Connection *c, unsigned *status)
{
	struct ca_diag d = {{0}};
	char accept[WS_ACCEPT_CHARS + 1];
	const char *version = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							  "Sec-WebSocket-Version");
	struct MHD_Response *r;
	enum MHD_Result ret;
	if (!header_has(c, "Upgrade", "websocket") || !header_has(c, "Connection", "upgrade"))
		return *status = 426, respond_error(c, 426, "upgrade_required",
						    "/ws is OpenEnv's WebSocket endpoint: connect "
						    "with a WebSocket client",
						    NULL);
	if (!version || strcmp(version, "13") != 0)
		return *status = 400, respond_error(c, 400, "bad_request",
						    "Sec-WebSocket-Version must be 13", NULL);
	if (ws_accept_key(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key"),
			  accept, &d))
		return *status = 400, respond_error(c, 400, "bad_request", d.msg, NULL);
	if (stopping(S))
		return *status = 503, respond_error(c, 503, "unavailable", "the server is stopping",
						    SERVE_RETRY_AFTER_S);
	r = MHD_create_response_for_upgrade(on_upgrade, S);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_UPGRADE, "websocket");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "Upgrade");
	MHD_add_response_header(r, "Sec-WebSocket-Accept", accept);
	ret = MHD_queue_response(c, MHD_HTTP_SWITCHING_PROTOCOLS, r);
	MHD_destroy_response(r);
	*status = 101;
	return ret;
}
