#include "bridge/bridge.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/fs.h"
#include "util/log.h"
#include "util/str.h"
#include "util/pylaunch.h"

const char *bridge_python(const char *configured)
{
	const char *env = getenv("CUDA_AGENT_PYTHON");
	return configured && configured[0] ? configured : env && env[0] ? env : "python3";
}

int bridge_start(struct bridge *b, const struct bridge_opts *opts, struct ca_diag *d)
{
	char pp_env[PYLAUNCH_ENV_MAX];
	const char *python = bridge_python(opts ? opts->python : NULL);
	const char *device = opts && opts->device ? opts->device : "auto";
	int rc, pair[2];

	memset(b, 0, sizeof *b);
	b->child.pid = -1;
	b->child.to_child = b->child.from_child = -1; /* bridge_stop after a failure closes nothing */
	b->next_id = 1;
	b->fd_channel = -1;
	rc = ca_pythonpath_env(pp_env, sizeof pp_env, NULL, PYTHONPATH_INHERIT, "the torch bridge",
			       d);
	if (rc)
		return rc;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
		return ca_fail(d, CA_ERR_IO, "socketpair: %s", strerror(errno));
	const char *env_add[] = {pp_env, "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1",
				 "CUDA_AGENT_FD_CHANNEL=3", NULL};
	const char *argv[] = {python, "-m", "cuda_agent_bridge", "--device", device, NULL};
	struct ca_run_opts ro = {.env_add = env_add, .pass_fds = &pair[1], .n_pass_fds = 1};
	if (opts && opts->stderr_path)
		ca_strlcpy(b->stderr_path, opts->stderr_path, sizeof b->stderr_path);
	rc = ca_child_spawn(&b->child, argv, &ro, b->stderr_path[0] ? b->stderr_path : NULL, d);
	close(pair[1]);
	if (rc)
		close(pair[0]);
	else
		b->fd_channel = pair[0];
	if (rc)
		return ca_fail_prefix(d, rc, "cannot start the torch bridge (%s)", python);
	ca_log_debug("torch bridge started (pid %d, %s)", (int)b->child.pid, python);
	return 0;
}

static int bridge_dead(struct bridge *b, int code, struct ca_diag *d)
{
	char tail[1024] = "";
	if (b->stderr_path[0])
		ca_file_tail(b->stderr_path, 3, tail, sizeof tail);
	for (char *p = tail; *p; p++)
		if (*p == '\n')
			*p = ' ';
	return ca_fail_prefix(d, code, "torch bridge failed%s%s%s", tail[0] ? " (" : "", tail,
			      tail[0] ? ")" : "");
}

static void copy_str(char *dst, size_t size, const json_t *obj, const char *key)
{
	const json_t *v = json_object_get(obj, key);
	ca_strlcpy(dst, json_is_string(v) ? json_string_value(v) : "", size);
}

int bridge_wait_ready(struct bridge *b, double timeout_s, struct ca_diag *d)
{
	char *line = NULL;
	json_t *msg = NULL;
	int rc;

	if (b->ready)
		return 0;
	rc = ca_child_read_line(&b->child, CA_BRIDGE_MAX_LINE, timeout_s, &line, d);
	if (rc) {
		rc = bridge_dead(b, rc, d);
		goto out;
	}
	msg = json_loads(line, 0, NULL);
	if (!msg || !json_is_object(msg) ||
	    !json_is_string(json_object_get(msg, "event")) ||
	    strcmp(json_string_value(json_object_get(msg, "event")), "ready") != 0) {
		rc = ca_fail(d, CA_ERR_PARSE, "torch bridge: expected a ready line, got: %.200s",
			     line);
		goto out;
	}
	copy_str(b->torch_version, sizeof b->torch_version, msg, "torch");
	copy_str(b->python_version, sizeof b->python_version, msg, "python");
	copy_str(b->device, sizeof b->device, msg, "device");
	copy_str(b->gpu_name, sizeof b->gpu_name, msg, "gpu_name");
	copy_str(b->cuda_version, sizeof b->cuda_version, msg, "cuda");
	b->l2_bytes = json_integer_value(json_object_get(msg, "l2_bytes"));
	b->ready = true;
	ca_log_debug("torch bridge ready: torch %s on %s %s", b->torch_version, b->device,
		     b->gpu_name);
out:
	json_decref(msg);
	free(line);
	return rc;
}

int bridge_call(struct bridge *b, const char *op, const json_t *req, double timeout_s,
		json_t **result, char *err_code, size_t err_code_size, struct ca_diag *d)
{
	json_t *msg = NULL, *answer = NULL;
	char *text = NULL, *line = NULL;
	long id;
	int rc;

	*result = NULL;
	if (err_code && err_code_size)
		err_code[0] = '\0';
	rc = bridge_wait_ready(b, timeout_s, d);
	if (rc)
		return rc;
	id = b->next_id++;
	msg = req ? json_deep_copy(req) : json_object();
	if (!msg) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	json_object_set_new(msg, "id", json_integer(id));
	json_object_set_new(msg, "op", json_string(op));
	text = json_dumps(msg, JSON_COMPACT);
	if (!text) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory");
		goto out;
	}
	rc = ca_child_write(&b->child, text, strlen(text), d);
	if (!rc)
		rc = ca_child_write(&b->child, "\n", 1, d);
	if (rc) {
		rc = bridge_dead(b, rc, d);
		goto out;
	}
	for (;;) {
		free(line);
		line = NULL;
		rc = ca_child_read_line(&b->child, CA_BRIDGE_MAX_LINE, timeout_s, &line, d);
		if (rc) {
			rc = rc == CA_ERR_TIMEOUT
				     ? ca_fail_prefix(d, rc, "torch bridge '%s'", op)
				     : bridge_dead(b, rc, d);
			goto out;
		}
		json_decref(answer);
		answer = json_loads(line, 0, NULL);
		if (!answer || !json_is_object(answer)) {
			rc = ca_fail(d, CA_ERR_PARSE, "torch bridge sent a malformed line: %.200s",
				     line);
			goto out;
		}
		if (json_integer_value(json_object_get(answer, "id")) == id)
			break;
		ca_log_debug("torch bridge: skipping a line for another request");
	}
	if (json_is_true(json_object_get(answer, "ok"))) {
		json_t *res = json_object_get(answer, "result");
		*result = res ? json_incref(res) : json_object();
	} else {
		const json_t *err = json_object_get(answer, "error");
		const json_t *code = json_object_get(err, "code");
		const json_t *message = json_object_get(err, "message");
		if (err_code && err_code_size)
			snprintf(err_code, err_code_size, "%s",
				 json_is_string(code) ? json_string_value(code) : "bridge.internal");
		rc = ca_fail(d, CA_ERR_INVALID, "%s",
			     json_is_string(message) ? json_string_value(message)
						     : "the torch bridge reported an error");
	}
out:
	json_decref(msg);
	json_decref(answer);
	free(text);
	free(line);
	return rc;
}

int bridge_recv_fds(struct bridge *b, int *fds, size_t want, double timeout_s, struct ca_diag *d)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * CA_MAX_PASS_FDS)];
		struct cmsghdr align;
	} ctl;
	char tag[16];
	struct iovec iov = {.iov_base = tag, .iov_len = sizeof tag};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof ctl.buf};
	struct pollfd pfd = {.fd = b->fd_channel, .events = POLLIN};
	size_t got = 0;
	int rc = 0;

	if (b->fd_channel < 0 || want == 0 || want > CA_MAX_PASS_FDS)
		return ca_fail(d, CA_ERR_INVALID, "bridge: no descriptor channel for %zu descriptors",
			       want);
	int ready = poll(&pfd, 1, (int)(timeout_s * 1000));
	if (ready <= 0)
		return ca_fail(d, ready == 0 ? CA_ERR_TIMEOUT : CA_ERR_IO,
			       "bridge: no descriptors arrived within %.0f s", timeout_s);
	ssize_t n = recvmsg(b->fd_channel, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	if (n < 0)
		return ca_fail(d, CA_ERR_IO, "bridge: recvmsg: %s", strerror(errno));
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		const unsigned char *data = CMSG_DATA(c);
		for (size_t i = 0; i < count; i++) {
			int fd;
			memcpy(&fd, data + i * sizeof fd, sizeof fd);
			if (got < want) {
				fds[got++] = fd;
			} else {
				close(fd);
				rc = CA_ERR_PARSE;
			}
		}
	}
	if ((msg.msg_flags & MSG_CTRUNC) || rc || got != want) {
		for (size_t i = 0; i < got; i++)
			close(fds[i]);
		return ca_fail(d, CA_ERR_PARSE,
			       "bridge: expected %zu descriptors, received %zu%s", want, got,
			       (msg.msg_flags & MSG_CTRUNC) ? " (truncated)" : "");
	}
	return 0;
}

void bridge_stop(struct bridge *b)
{
	if (b->child.pid > 0 && b->ready)
		(void)ca_child_write(&b->child, "{\"id\":0,\"op\":\"shutdown\"}\n", 25, NULL);
	ca_child_close(&b->child, 2.0);
	if (b->fd_channel >= 0)
		close(b->fd_channel);
	b->fd_channel = -1;
	b->ready = false;
}
