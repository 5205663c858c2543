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
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandbox.h"
#include "util/clock.h"
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

/* Layers without which the command must not run. */
static const enum sandbox_layer required[] = {SANDBOX_MOUNT_NS, SANDBOX_PID_NS, SANDBOX_NET_NS,
					       SANDBOX_FILESYSTEM, SANDBOX_NO_NEW_PRIVS};

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
	bool timed_out = false, eof = false;
	double start = ca_now(), deadline, drain_until = 0;
	char trailer[256] = "", home[PATH_MAX + 8];
	int rc;

	if (jt && json_number_value(jt) < limit)
		limit = json_number_value(jt);
	if (tool_capture_init(&cp, cap) != 0)
		return ca_fail(d, CA_ERR_NOMEM, "tools: bash: out of memory");
	if (ctx->sandbox) {
		const char *env[] = {"PATH=" BASH_PATH, "HOME=/tmp", "LANG=C.UTF-8", NULL};
		struct sandbox_bind bind = {.src = ws, .writable = true};
		struct sandbox_opts so = {0};
		size_t count = 0;
		so.env = env;
		so.cwd = ws;
		so.binds = &bind;
		so.n_binds = 1;
		so.tmp_dir = ctx->scratch_dir; /* NULL: a private tmpfs */
		so.no_gpu = true;
		so.allow_processes = true;
		so.cpu_seconds = (uint64_t)ceil(limit) + 30;
		if (geteuid() == 0)
			chown_tree(ws, "", ctx, 0, &count);
		if ((rc = sandbox_spawn(&sb, argv, &so, "/dev/null", d)) != 0) {
			tool_capture_free(&cp);
			return ca_fail_prefix(d, rc, "tools: bash");
		}
		for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
			if (!sb.report.layer[required[i]].on) {
				char why[SANDBOX_DETAIL_MAX + 64];
				snprintf(why, sizeof why, "%s (%s)",
					 sandbox_layer_name(required[i]),
					 sb.report.layer[required[i]].detail);
				sandbox_finish(&sb, 0, &fate);
				tool_capture_free(&cp);
				return ca_fail(d, CA_ERR_UNSUPPORTED,
					       "tools: bash: the sandbox lacks a layer it needs: %s",
					       why);
			}
		c = &sb.child;
	} else {
		snprintf(home, sizeof home, "HOME=%s", ctx->scratch_dir ? ctx->scratch_dir : "/tmp");
		const char *eargv[] = {"/usr/bin/env", "-i", "PATH=" BASH_PATH, home, "LANG=C.UTF-8",
				       "/bin/bash", "-c", wrapper, "bash", cmd, NULL};
		struct ca_run_opts ro = {.cwd = ws};
		if ((rc = ca_child_spawn(&plain, eargv, &ro, "/dev/null", d)) != 0) {
			tool_capture_free(&cp);
			return ca_fail_prefix(d, rc, "tools: bash");
		}
		c = &plain;
	}
	close(c->to_child); /* stdin: end of file */
	c->to_child = -1;
	(void)fcntl(c->from_child, F_SETFL, fcntl(c->from_child, F_GETFL) | O_NONBLOCK);
	deadline = start + limit;
	while (!eof) {
		double now = ca_now();
		if (now >= deadline) {
			timed_out = true;
			break;
		}
		if (drain_until > 0 && now >= drain_until)
			break; /* the command ended; something it left behind holds the pipe */
		struct pollfd pf = {.fd = c->from_child, .events = POLLIN};
		double wait = deadline - now < 0.1 ? deadline - now : 0.1;
		int pr = poll(&pf, 1, (int)(wait * 1000) + 1);
		if (pr < 0 && errno != EINTR)
			break;
		if (pr > 0) {
			char buf[65536];
			for (;;) {
				ssize_t n = read(c->from_child, buf, sizeof buf);
				if (n > 0) {
					tool_capture_add(&cp, buf, (size_t)n);
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
	if (timed_out) {
		res->exit_code = -1;
		snprintf(trailer, sizeof trailer,
			 "\n[timed out after %.1f s: the command and everything it started were "
			 "killed]",
			 limit);
	} else if (fate.term_signal) {
		res->exit_code = -1;
		snprintf(trailer, sizeof trailer, "\n[killed by signal %d (%s)]", fate.term_signal,
			 strsignal(fate.term_signal));
	} else {
		res->exit_code = fate.exit_code;
		if (fate.exit_code != 0)
			snprintf(trailer, sizeof trailer, "\n[exit code %d]", fate.exit_code);
		else if (cp.total == 0)
			snprintf(trailer, sizeof trailer, "(no output)");
	}
	res->ok = !timed_out && res->exit_code == 0;
	res->output = tool_capture_finish(&cp, trailer, &res->bytes_omitted);
	if (!res->output)
		return ca_fail(d, CA_ERR_NOMEM, "tools: bash: out of memory");
	return 0;
}
