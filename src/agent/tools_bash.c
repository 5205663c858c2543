/* tools_bash: the bash tool. /bin/bash -c COMMAND in the sandbox (src/sandbox/sandbox.h) with the
 * workspace bound writable at its own path, /tmp bound to the session's scratch directory, no
 * network, no GPU device nodes, process creation allowed by the seccomp filter; stdout and
 * stderr merged into one pipe read with a cap; the whole sandbox killed at the time limit. */
#include "agent/tools.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "util/clock.h"
#include "util/fs.h"
#include "util/proc.h"
#include "util/str.h"

#define BASH_PATH "/usr/local/cuda/bin:" SANDBOX_DEFAULT_PATH
#define SANDBOX_RUN_ID 65534u /* the sandbox's default uid/gid when the caller is root */
#define CHOWN_MAX_ENTRIES 100000

/* The outer bash merges stderr into stdout, then replaces itself with a bash that runs the
 * command as given (so $LINENO, syntax errors and `set -x` output are the command's own). */
static const char wrapper[] = "exec 2>&1; exec /bin/bash -c \"$1\"";

/* As root, the program runs as 65534 and only the workspace directory itself is handed to it by
 * the sandbox: hand over the entries below too (lchown, never following a symlink), except the
 * read-only names, which stay with their owner so that the program cannot chmod them. */
static void chown_tree(const char *dir, const char *rel, const struct tool_ctx *ctx, int depth,
		       size_t *count)
{
	DIR *dp;
	struct dirent *e;
	if (depth > 64 || !(dp = opendir(dir)))
		return;
	while ((e = readdir(dp)) && *count < CHOWN_MAX_ENTRIES) {
		char path[PATH_MAX], r[PATH_MAX];
		struct stat st;
		bool ro = false;
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		(*count)++;
		if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path ||
		    (size_t)snprintf(r, sizeof r, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name) >=
			    sizeof r ||
		    lstat(path, &st) != 0)
			continue;
		for (const char *const *n = ctx->read_only; n && *n; n++)
			ro = ro || strcmp(*n, r) == 0;
		if (ro || (S_ISREG(st.st_mode) && st.st_nlink > 1))
			continue;
		if (st.st_uid != SANDBOX_RUN_ID || st.st_gid != SANDBOX_RUN_ID)
			(void)lchown(path, SANDBOX_RUN_ID, SANDBOX_RUN_ID);
		if (S_ISDIR(st.st_mode))
			chown_tree(path, r, ctx, depth + 1, count);
	}
	closedir(dp);
}

#define SHIM_LINE_MAX 1024       /* a request: "cuda-agent ARGS" */
#define SHIM_REPLY_MAX (4u << 20) /* what one request may print */
/* Requests one bash command may make: their time extends its deadline, so a loop of them
 * must not keep the command alive for ever. */
#define SHIM_MAX_REQUESTS 16

/* The shim: one request line on fd 3, then "EXIT LENGTH" and LENGTH bytes back on fd 3 (dash's
 * read takes one byte at a time from a socket, so it stops at the newline; head -c takes the
 * rest). */
static const char shim_script[] =
	"#!/bin/sh\n"
	"# cuda-agent in the agent's sandbox: compile, verify and profile are sent to the agent loop,\n"
	"# which runs them outside the sandbox (on the GPU) and sends back what cuda-agent prints.\n"
	"case \"$*\" in *'\n'*) echo 'cuda-agent: arguments may not hold newlines' >&2; exit 2;; esac\n"
	"printf 'cuda-agent %s\\n' \"$*\" >&3 2>/dev/null || {\n"
	"  echo 'cuda-agent: the agent loop is not reachable from here' >&2; exit 4; }\n"
	"IFS=' ' read -r code len <&3 || { echo 'cuda-agent: no answer from the agent loop' >&2; exit 4; }\n"
	"head -c \"$len\" <&3\n"
	"exit \"$code\"\n";

int tools_bash_write_shim(const char *dir, struct ca_diag *d)
{
	char path[PATH_MAX];
	if (ca_path_join(path, sizeof path, dir, "cuda-agent"))
		return ca_fail(d, CA_ERR_LIMIT, "tools: shim path too long");
	int rc = ca_write_file_atomic(path, shim_script, sizeof shim_script - 1, d);
	if (rc)
		return rc;
	if (chmod(path, 0755) != 0 || chmod(dir, 0755) != 0)
		return ca_fail(d, CA_ERR_IO, "tools: chmod %s: %s", path, strerror(errno));
	return 0;
}

/* The loop's side of the shim's socket: request lines in, "EXIT LENGTH\n" + output out. */
struct shim_server {
	int fd; /* -1: no shim */
	char line[SHIM_LINE_MAX];
	size_t len;
	bool overlong;
	int requests;
	double served_s; /* spent answering: added to the command's deadline */
};

static void shim_reply(struct shim_server *sv, int code, const char *text)
{
	char head[64];
	size_t n = text ? strlen(text) : 0;
	if (n > SHIM_REPLY_MAX)
		n = SHIM_REPLY_MAX;
	bool newline = n > 0 && text[n - 1] != '\n';
	int hl = snprintf(head, sizeof head, "%d %zu\n", code, n + (newline ? 1 : 0));
	/* blocking writes: the shim reads as we write; a shim that died gives EPIPE, not SIGPIPE */
	(void)fcntl(sv->fd, F_SETFL, fcntl(sv->fd, F_GETFL) & ~O_NONBLOCK);
	const char *parts[] = {head, text ? text : "", "\n"};
	size_t lens[] = {(size_t)hl, n, newline ? 1u : 0u};
	for (int i = 0; i < 3; i++)
		for (size_t off = 0; off < lens[i];) {
			ssize_t w = send(sv->fd, parts[i] + off, lens[i] - off, MSG_NOSIGNAL);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				goto out;
			off += (size_t)w;
		}
out:
	(void)fcntl(sv->fd, F_SETFL, fcntl(sv->fd, F_GETFL) | O_NONBLOCK);
}

/* Reads what the shim sent; answers every complete line. */
static void shim_serve(const struct tool_ctx *ctx, struct shim_server *sv)
{
	char buf[512];
	for (;;) {
		ssize_t n = recv(sv->fd, buf, sizeof buf, MSG_DONTWAIT);
		if (n <= 0)
			return;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (sv->len + 1 < sizeof sv->line)
					sv->line[sv->len++] = buf[i];
				else
					sv->overlong = true;
				continue;
			}
			sv->line[sv->len] = '\0';
			double t0 = ca_now();
			if (sv->overlong) {
				shim_reply(sv, 2, "cuda-agent: the command line is too long");
			} else if (++sv->requests > SHIM_MAX_REQUESTS) {
				shim_reply(sv, 2, "cuda-agent: at most 16 calls per bash command; "
						  "run the next ones in another call");
			} else {
				char *out = NULL;
				int code = 1;
				if (ctx->agent_cmd(ctx->agent_cmd_arg, sv->line, &out, &code) != 0 && !out)
					code = 4;
				shim_reply(sv, code, out ? out : "cuda-agent: the request failed");
				free(out);
			}
			sv->served_s += ca_now() - t0;
			sv->len = 0;
			sv->overlong = false;
		}
	}
}

/* Layers without which the command must not run. */
static const enum sandbox_layer required[] = {SANDBOX_MOUNT_NS, SANDBOX_PID_NS, SANDBOX_NET_NS,
					       SANDBOX_FILESYSTEM, SANDBOX_NO_NEW_PRIVS};

/* The command in the sandbox (bash tools run with processes allowed, no GPU, the workspace
 * writable), refused when a layer it needs is missing. */
static int start_sandboxed(const struct tool_ctx *ctx, const char *ws, const char *const *argv,
			   const char *path_env, int shim_fd, bool shim, double limit,
			   struct sandbox *sb, struct ca_diag *d)
{
	struct ca_run_result fate;
	int rc;
	const char *env[] = {path_env, "HOME=/tmp", "LANG=C.UTF-8", NULL};
	struct sandbox_bind binds[2] = {{.src = ws, .writable = true}, {.src = ctx->shim_dir}};
	struct sandbox_opts so = {0};
	size_t count = 0;
	so.env = env;
	so.cwd = ws;
	so.binds = binds;
	so.n_binds = shim ? 2 : 1;
	so.pass_fds = &shim_fd;
	so.n_pass_fds = shim ? 1 : 0;
	so.tmp_dir = ctx->scratch_dir; /* NULL: a private tmpfs */
	so.no_gpu = true;
	so.allow_processes = true;
	so.cpu_seconds = (uint64_t)ceil(limit) + 30;
	if (geteuid() == 0)
		chown_tree(ws, "", ctx, 0, &count);
	if ((rc = sandbox_spawn(sb, argv, &so, "/dev/null", d)) != 0)
		return ca_fail_prefix(d, rc, "tools: bash");
	for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
		if (!sb->report.layer[required[i]].on) {
			char why[SANDBOX_DETAIL_MAX + 64];
			snprintf(why, sizeof why, "%s (%s)", sandbox_layer_name(required[i]),
				 sb->report.layer[required[i]].detail);
			sandbox_finish(sb, 0, &fate);
			return ca_fail(d, CA_ERR_UNSUPPORTED,
				       "tools: bash: the sandbox lacks a layer it needs: %s", why);
		}
	return 0;
}

/* Reads the command's output (and serves its `cuda-agent` requests, whose time extends the
 * deadline) until end of file, the deadline, or a short drain after the command ended while
 * something it left behind holds the pipe. True when the deadline passed. */
static bool pump(const struct tool_ctx *ctx, struct ca_child *c, struct shim_server *sv,
		 struct tool_capture *cp, double *deadline)
{
	bool timed_out = false, eof = false;
	double drain_until = 0;
	while (!eof) {
		double now = ca_now();
		if (now >= *deadline) {
			timed_out = true;
			break;
		}
		if (drain_until > 0 && now >= drain_until)
			break; /* the command ended; something it left behind holds the pipe */
		struct pollfd pf[2] = {{.fd = c->from_child, .events = POLLIN},
				       {.fd = sv->fd, .events = POLLIN}};
		double wait = *deadline - now < 0.1 ? *deadline - now : 0.1;
		int pr = poll(pf, sv->fd >= 0 ? 2 : 1, (int)(wait * 1000) + 1);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr > 0 && sv->fd >= 0 && (pf[1].revents & POLLIN)) {
			double before = sv->served_s;
			shim_serve(ctx, sv);
			*deadline += sv->served_s - before; /* the request's time is not the command's */
		}
		if (pr > 0 && (pf[0].revents & (POLLIN | POLLHUP | POLLERR))) {
			char buf[65536];
			for (;;) {
				ssize_t n = read(c->from_child, buf, sizeof buf);
				if (n > 0) {
					tool_capture_add(cp, buf, (size_t)n);
					continue;
				}
				if (n == 0)
					eof = true;
				else if (errno == EINTR)
					continue;
				else if (errno != EAGAIN)
					eof = true;
				break;
			}
		}
		if (!eof && drain_until == 0 && !ca_child_alive(c))
			drain_until = ca_now() + 0.2;
	}
	return timed_out;
}

/* The exit code and the line after the output: a timeout, a signal, an exit code, or
 * "(no output)". */
static void outcome(struct tool_result *res, const struct ca_run_result *fate, bool timed_out,
		    double limit, size_t total, char *trailer, size_t size)
{
	if (timed_out) {
		res->exit_code = -1;
		snprintf(trailer, size,
			 "\n[timed out after %.1f s: the command and everything it started were "
			 "killed]",
			 limit);
	} else if (fate->term_signal) {
		res->exit_code = -1;
		snprintf(trailer, size, "\n[killed by signal %d (%s)]", fate->term_signal,
			 strsignal(fate->term_signal));
	} else {
		res->exit_code = fate->exit_code;
		if (fate->exit_code != 0)
			snprintf(trailer, size, "\n[exit code %d]", fate->exit_code);
		else if (total == 0)
			snprintf(trailer, size, "(no output)");
	}
}

int tools_bash_run(const struct tool_ctx *ctx, const char *ws, size_t cap, const json_t *args,
		   struct tool_result *res, struct ca_diag *d)
{
	const char *cmd = json_string_value(json_object_get(args, "command"));
	const json_t *jt = json_object_get(args, "timeout_s");
	double limit = ctx->bash_timeout_s > 0 ? ctx->bash_timeout_s : TOOLS_DEFAULT_TIMEOUT;
	const char *argv[] = {"/bin/bash", "-c", wrapper, "bash", cmd, NULL};
	struct tool_capture cp;
	struct sandbox sb;
	struct ca_child plain, *c;
	struct ca_run_result fate;
	bool timed_out;
	double start = ca_now(), deadline;
	char trailer[256] = "", home[PATH_MAX + 8];
	int rc;

	struct shim_server sv = {.fd = -1};
	int pair[2] = {-1, -1};
	char path_env[PATH_MAX + sizeof BASH_PATH + 8];
	bool shim = ctx->agent_cmd && ctx->shim_dir;

	if (jt && json_number_value(jt) < limit)
		limit = json_number_value(jt);
	snprintf(path_env, sizeof path_env, "PATH=%s%s" BASH_PATH, shim ? ctx->shim_dir : "",
		 shim ? ":" : "");
	if (shim && socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
		return ca_fail(d, CA_ERR_IO, "tools: bash: socketpair: %s", strerror(errno));
	if (tool_capture_init(&cp, cap) != 0) {
		rc = ca_fail(d, CA_ERR_NOMEM, "tools: bash: out of memory");
		goto fail;
	}
	if (ctx->sandbox) {
		if ((rc = start_sandboxed(ctx, ws, argv, path_env, pair[1], shim, limit, &sb, d))) {
			tool_capture_free(&cp);
			goto fail;
		}
		c = &sb.child;
	} else {
		snprintf(home, sizeof home, "HOME=%s", ctx->scratch_dir ? ctx->scratch_dir : "/tmp");
		const char *eargv[] = {"/usr/bin/env", "-i", path_env, home, "LANG=C.UTF-8",
				       "/bin/bash", "-c", wrapper, "bash", cmd, NULL};
		struct ca_run_opts ro = {.cwd = ws, .pass_fds = &pair[1],
					 .n_pass_fds = shim ? 1 : 0};
		if ((rc = ca_child_spawn(&plain, eargv, &ro, "/dev/null", d)) != 0) {
			tool_capture_free(&cp);
			rc = ca_fail_prefix(d, rc, "tools: bash");
			goto fail;
		}
		c = &plain;
	}
	if (shim) { /* the command has its end; ours is served below */
		close(pair[1]);
		pair[1] = -1;
		sv.fd = pair[0];
		(void)fcntl(sv.fd, F_SETFL, fcntl(sv.fd, F_GETFL) | O_NONBLOCK);
	}
	close(c->to_child); /* stdin: end of file */
	c->to_child = -1;
	(void)fcntl(c->from_child, F_SETFL, fcntl(c->from_child, F_GETFL) | O_NONBLOCK);
	deadline = start + limit;
	timed_out = pump(ctx, c, &sv, &cp, &deadline);
	/* after EOF the command may still run (it closed its stdout): wait for it until the
	 * deadline, then kill everything */
	double grace = timed_out ? 0 : deadline - ca_now();
	if (grace < 0)
		grace = 0;
	if (ctx->sandbox)
		sandbox_finish(&sb, grace, &fate);
	else
		ca_child_finish(c, grace, &fate);
	if (fate.timed_out)
		timed_out = true;
	res->timed_out = timed_out;
	outcome(res, &fate, timed_out, limit, cp.total, trailer, sizeof trailer);
	res->ok = !timed_out && res->exit_code == 0;
	res->output = tool_capture_finish(&cp, trailer, &res->bytes_omitted);
	rc = res->output ? 0 : ca_fail(d, CA_ERR_NOMEM, "tools: bash: out of memory");
fail:
	for (int i = 0; i < 2; i++)
		if (pair[i] >= 0)
			close(pair[i]);
	return rc;
}
