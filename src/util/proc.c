#include "util/proc.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/clock.h"

extern char **environ;

struct capture {
	char *buf;
	size_t len, cap, dropped;
};

static int capture_init(struct capture *c, size_t cap)
{
	c->cap = cap;
	c->len = 0;
	c->dropped = 0;
	c->buf = malloc(cap + 1);
	if (!c->buf)
		return CA_ERR_NOMEM;
	c->buf[0] = '\0';
	return 0;
}

static void capture_add(struct capture *c, const char *data, size_t n)
{
	size_t room = c->cap - c->len;
	size_t take = n < room ? n : room;
	memcpy(c->buf + c->len, data, take);
	c->len += take;
	c->buf[c->len] = '\0';
	c->dropped += n - take;
}

/* In the child, after fork: apply cwd and env, exec. Never returns. */
/* In the forked child: opts->pass_fds become 3, 4, ... without FD_CLOEXEC (copied high first,
 * so that a descriptor already at a target number is not clobbered before it is copied). */
static void place_pass_fds(const struct ca_run_opts *opts)
{
	int high[CA_MAX_PASS_FDS];
	size_t n = opts ? opts->n_pass_fds : 0;
	if (n > CA_MAX_PASS_FDS)
		_exit(127);
	for (size_t i = 0; i < n; i++)
		if ((high[i] = fcntl(opts->pass_fds[i], F_DUPFD_CLOEXEC, 3 + CA_MAX_PASS_FDS)) < 0)
			_exit(127);
	for (size_t i = 0; i < n; i++)
		if (dup2(high[i], 3 + (int)i) < 0)
			_exit(127);
}

static void exec_child(const char *const *argv, const struct ca_run_opts *opts, pid_t parent)
{
	setpgid(0, 0);
	if (opts && opts->kill_with_parent &&
	    (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent))
		_exit(127); /* the parent is gone already */
	signal(SIGPIPE, SIG_DFL);
	{
		sigset_t pipe_set;
		sigemptyset(&pipe_set);
		sigaddset(&pipe_set, SIGPIPE);
		sigprocmask(SIG_UNBLOCK, &pipe_set, NULL);
	}
	if (opts && opts->cwd && chdir(opts->cwd) != 0) {
		dprintf(2, "cannot enter %s: %s\n", opts->cwd, strerror(errno));
		_exit(127);
	}
	if (opts && opts->env_add)
		for (const char *const *e = opts->env_add; *e; e++)
			putenv((char *)*e);
	execvp(argv[0], (char *const *)argv);
	dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

/* write() that reports a closed pipe as EPIPE instead of killing the whole process with SIGPIPE
 * (a child may exit without reading its stdin): SIGPIPE is blocked in this thread for the call
 * and a SIGPIPE the write raised is consumed before the mask is restored. */
static ssize_t write_nosigpipe(int fd, const void *buf, size_t len)
{
	sigset_t pipe_set, old, pending;
	ssize_t n;
	int saved;
	bool was_pending;

	sigemptyset(&pipe_set);
	sigaddset(&pipe_set, SIGPIPE);
	sigemptyset(&pending);
	sigpending(&pending);
	was_pending = sigismember(&pending, SIGPIPE) == 1;
	pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
	n = write(fd, buf, len);
	saved = errno;
	if (n < 0 && saved == EPIPE && !was_pending) {
		const struct timespec zero = {0, 0};
		while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
			;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	return n;
}

static void kill_group(pid_t pid)
{
	kill(-pid, SIGKILL);
	kill(pid, SIGKILL);
}

/* Feeds stdin_data and captures stdout and stderr until both close or the deadline passes
 * (then the process group is killed and r->timed_out set). */
static void pump_pipes(pid_t pid, int out_pipe[2], int err_pipe[2], int in_pipe[2],
		       const struct ca_run_opts *opts, struct capture *out, struct capture *err,
		       double start, double timeout, struct ca_run_result *r)
{
	size_t in_off = 0;
	while (out_pipe[0] >= 0 || err_pipe[0] >= 0) {
		struct pollfd fds[3];
		int nfds = 0, wait_ms = -1;
		if (timeout > 0) {
			double left = start + timeout - ca_now();
			if (left <= 0) {
				r->timed_out = true;
				kill_group(pid);
				break;
			}
			wait_ms = (int)(left * 1000) + 1;
		}
		if (out_pipe[0] >= 0)
			fds[nfds++] = (struct pollfd){.fd = out_pipe[0], .events = POLLIN};
		if (err_pipe[0] >= 0)
			fds[nfds++] = (struct pollfd){.fd = err_pipe[0], .events = POLLIN};
		if (in_pipe[1] >= 0)
			fds[nfds++] = (struct pollfd){.fd = in_pipe[1], .events = POLLOUT};
		if (poll(fds, (nfds_t)nfds, wait_ms) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		for (int i = 0; i < nfds; i++) {
			char buf[65536];
			if (!fds[i].revents)
				continue;
			if (fds[i].fd == in_pipe[1]) {
				ssize_t n = write_nosigpipe(in_pipe[1], opts->stdin_data + in_off,
							    opts->stdin_len - in_off);
				if (n > 0)
					in_off += (size_t)n;
				if (n < 0 && errno != EAGAIN && errno != EINTR)
					in_off = opts->stdin_len;
				if (in_off >= opts->stdin_len) {
					close(in_pipe[1]);
					in_pipe[1] = -1;
				}
				continue;
			}
			ssize_t n = read(fds[i].fd, buf, sizeof buf);
			if (n > 0) {
				capture_add(fds[i].fd == out_pipe[0] ? out : err, buf, (size_t)n);
			} else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
				if (fds[i].fd == out_pipe[0]) {
					close(out_pipe[0]);
					out_pipe[0] = -1;
				} else {
					close(err_pipe[0]);
					err_pipe[0] = -1;
				}
			}
		}
	}
}

/* Reaps pid, bounded by the deadline too (then the group is killed). */
static void reap(pid_t pid, double start, double timeout, int *status, struct ca_run_result *r)
{
	for (;;) {
		pid_t w = waitpid(pid, status, timeout > 0 ? WNOHANG : 0);
		if (w == pid)
			break;
		if (w < 0 && errno != EINTR)
			break;
		if (timeout > 0 && ca_now() > start + timeout) {
			r->timed_out = true;
			kill_group(pid);
			waitpid(pid, status, 0);
			break;
		}
		if (timeout > 0)
			usleep(1000);
	}
}

int ca_run(const char *const *argv, const struct ca_run_opts *opts, struct ca_run_result *r,
	   struct ca_diag *d)
{
	int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, in_pipe[2] = {-1, -1};
	struct capture out = {0}, err = {0};
	int rc = 0, status = 0;
	pid_t pid, parent;
	double start = ca_now();
	double timeout = opts ? opts->timeout_s : 0;

	memset(r, 0, sizeof *r);
	if (capture_init(&out, opts && opts->stdout_cap ? opts->stdout_cap : 1u << 20) ||
	    capture_init(&err, opts && opts->stderr_cap ? opts->stderr_cap : 256u << 10)) {
		rc = ca_fail(d, CA_ERR_NOMEM, "out of memory starting %s", argv[0]);
		goto fail;
	}
	if (pipe2(out_pipe, O_CLOEXEC) || pipe2(err_pipe, O_CLOEXEC) || pipe2(in_pipe, O_CLOEXEC)) {
		rc = ca_fail(d, CA_ERR_IO, "pipe: %s", strerror(errno));
		goto fail;
	}
	parent = getpid();
	pid = fork();
	if (pid < 0) {
		rc = ca_fail(d, CA_ERR_CHILD, "fork: %s", strerror(errno));
		goto fail;
	}
	if (pid == 0) {
		dup2(in_pipe[0], 0);
		dup2(out_pipe[1], 1);
		dup2(err_pipe[1], 2);
		exec_child(argv, opts, parent);
	}
	setpgid(pid, pid);
	close(out_pipe[1]);
	close(err_pipe[1]);
	close(in_pipe[0]);
	out_pipe[1] = err_pipe[1] = in_pipe[0] = -1;
	if (!opts || !opts->stdin_data) {
		close(in_pipe[1]);
		in_pipe[1] = -1;
	} else {
		fcntl(in_pipe[1], F_SETFL, O_NONBLOCK);
	}

	pump_pipes(pid, out_pipe, err_pipe, in_pipe, opts, &out, &err, start, timeout, r);
	reap(pid, start, timeout, &status, r);
	kill(-pid, SIGKILL); /* leftovers of the group (daemonized grandchildren) */
	r->seconds = ca_now() - start;
	if (WIFSIGNALED(status) && !r->timed_out)
		r->term_signal = WTERMSIG(status);
	else if (WIFEXITED(status))
		r->exit_code = WEXITSTATUS(status);
	r->out = out.buf;
	r->out_len = out.len;
	r->out_dropped = out.dropped;
	r->err = err.buf;
	r->err_len = err.len;
	r->err_dropped = err.dropped;
	out.buf = err.buf = NULL;
fail:
	free(out.buf);
	free(err.buf);
	for (int i = 0; i < 2; i++) {
		if (out_pipe[i] >= 0)
			close(out_pipe[i]);
		if (err_pipe[i] >= 0)
			close(err_pipe[i]);
		if (in_pipe[i] >= 0)
			close(in_pipe[i]);
	}
	return rc;
}

void ca_run_result_free(struct ca_run_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

void ca_run_describe(const struct ca_run_result *r, char *out, size_t out_size)
{
	if (r->timed_out)
		snprintf(out, out_size, "timed out after %.1f s", r->seconds);
	else if (r->term_signal)
		snprintf(out, out_size, "killed by signal %d (%s)", r->term_signal,
			 strsignal(r->term_signal));
	else
		snprintf(out, out_size, "exit code %d", r->exit_code);
}

int ca_child_spawn(struct ca_child *c, const char *const *argv, const struct ca_run_opts *opts,
		   const char *stderr_path, struct ca_diag *d)
{
	int in_pipe[2], out_pipe[2];
	pid_t pid, parent;

	memset(c, 0, sizeof *c);
	c->pid = -1;
	c->to_child = c->from_child = -1;
	if (pipe2(in_pipe, O_CLOEXEC))
		return ca_fail(d, CA_ERR_IO, "pipe: %s", strerror(errno));
	if (pipe2(out_pipe, O_CLOEXEC)) {
		close(in_pipe[0]);
		close(in_pipe[1]);
		return ca_fail(d, CA_ERR_IO, "pipe: %s", strerror(errno));
	}
	parent = getpid();
	pid = fork();
	if (pid < 0) {
		close(in_pipe[0]);
		close(in_pipe[1]);
		close(out_pipe[0]);
		close(out_pipe[1]);
		return ca_fail(d, CA_ERR_CHILD, "fork: %s", strerror(errno));
	}
	if (pid == 0) {
		/* Above 2 first: a caller whose stdin or stdout was closed got pipe ends 0 or 1,
		 * and dup2 onto itself would keep FD_CLOEXEC (the child's stdin closed at exec) or
		 * one dup2 would overwrite the other end. */
		int in_fd = fcntl(in_pipe[0], F_DUPFD_CLOEXEC, 3);
		int out_fd = fcntl(out_pipe[1], F_DUPFD_CLOEXEC, 3);
		if (in_fd < 0 || out_fd < 0 || dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0)
			_exit(127);
		place_pass_fds(opts);
		if (stderr_path) {
			int fd = open(stderr_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
			if (fd == 2)
				(void)fcntl(2, F_SETFD, 0); /* stderr was closed: it is fd 2 already */
			else if (fd >= 0)
				dup2(fd, 2);
		}
		exec_child(argv, opts, parent);
	}
	setpgid(pid, pid);
	close(in_pipe[0]);
	close(out_pipe[1]);
	c->pid = pid;
	c->to_child = in_pipe[1];
	c->from_child = out_pipe[0];
	return 0;
}

int ca_child_write(struct ca_child *c, const char *buf, size_t len, struct ca_diag *d)
{
	size_t off = 0;
	while (off < len) {
		ssize_t n = write_nosigpipe(c->to_child, buf + off, len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return ca_fail(d, CA_ERR_CHILD, "the child process (pid %d) stopped reading: %s",
				       (int)c->pid, strerror(errno));
		off += (size_t)n;
	}
	return 0;
}

static int read_line(struct ca_child *c, size_t max_line, double timeout_s, double spin_s,
		     char **line, struct ca_diag *d)
{
	double now = ca_now(), deadline = timeout_s > 0 ? now + timeout_s : 0;
	double spin_until = spin_s > 0 ? now + spin_s : 0;
	*line = NULL;
	for (;;) {
		char *nl = c->rlen ? memchr(c->rbuf, '\n', c->rlen) : NULL;
		if (nl) {
			size_t n = (size_t)(nl - c->rbuf);
			char *s = malloc(n + 1);
			if (!s)
				return ca_fail(d, CA_ERR_NOMEM, "out of memory reading a line");
			memcpy(s, c->rbuf, n);
			s[n] = '\0';
			memmove(c->rbuf, nl + 1, c->rlen - n - 1);
			c->rlen -= n + 1;
			*line = s;
			return 0;
		}
		if (c->rlen > max_line)
			return ca_fail(d, CA_ERR_LIMIT, "the child sent a line longer than %zu bytes",
				       max_line);
		if (c->rcap - c->rlen < 65536) {
			size_t ncap = c->rcap ? c->rcap * 2 : 131072;
			char *nb = realloc(c->rbuf, ncap);
			if (!nb)
				return ca_fail(d, CA_ERR_NOMEM, "out of memory reading a line");
			c->rbuf = nb;
			c->rcap = ncap;
		}
		struct pollfd p = {.fd = c->from_child, .events = POLLIN};
		int wait_ms = -1;
		if (deadline > 0) {
			double left = deadline - ca_now();
			if (left <= 0)
				return ca_fail(d, CA_ERR_TIMEOUT, "no answer within %.0f s", timeout_s);
			wait_ms = (int)(left * 1000) + 1;
		}
		/* Spinning first: an answer that comes within spin_s is seen at once instead of
		 * after a wake-up (the timed loop stamps answers on this clock). */
		if (spin_until > 0 && ca_now() < spin_until)
			wait_ms = 0;
		int pr = poll(&p, 1, wait_ms);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr == 0)
			continue;
		ssize_t n = read(c->from_child, c->rbuf + c->rlen, c->rcap - c->rlen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return ca_fail(d, CA_ERR_CHILD, "the child process (pid %d) exited",
				       (int)c->pid);
		c->rlen += (size_t)n;
	}
}

int ca_child_read_line(struct ca_child *c, size_t max_line, double timeout_s, char **line,
		       struct ca_diag *d)
{
	return read_line(c, max_line, timeout_s, 0, line, d);
}

int ca_child_read_line_spin(struct ca_child *c, size_t max_line, double timeout_s,
			    double spin_s, char **line, struct ca_diag *d)
{
	return read_line(c, max_line, timeout_s, spin_s, line, d);
}

bool ca_child_alive(struct ca_child *c)
{
	if (c->pid <= 0 || c->reaped)
		return false;
	if (waitpid(c->pid, &c->wait_status, WNOHANG) == c->pid) {
		c->reaped = true;
		return false;
	}
	return true;
}

void ca_child_close(struct ca_child *c, double grace_s)
{
	struct ca_run_result r;
	ca_child_finish(c, grace_s, &r);
}

void ca_child_finish(struct ca_child *c, double grace_s, struct ca_run_result *r)
{
	int status = 0;
	double end = ca_now() + grace_s;
	memset(r, 0, sizeof *r);
	if (c->to_child >= 0)
		close(c->to_child);
	if (c->from_child >= 0)
		close(c->from_child);
	c->to_child = c->from_child = -1;
	if (c->pid > 0 && c->reaped)
		status = c->wait_status;
	if (c->pid > 0 && !c->reaped) {
		while (waitpid(c->pid, &status, WNOHANG) == 0) {
			if (ca_now() > end) {
				kill_group(c->pid);
				waitpid(c->pid, &status, 0);
				r->timed_out = true;
				break;
			}
			usleep(1000);
		}
	}
	if (c->pid > 0) {
		kill(-c->pid, SIGKILL);
		if (WIFSIGNALED(status) && !r->timed_out)
			r->term_signal = WTERMSIG(status);
		else if (WIFEXITED(status))
			r->exit_code = WEXITSTATUS(status);
	}
	c->pid = -1;
	c->reaped = false;
	free(c->rbuf);
	c->rbuf = NULL;
	c->rlen = c->rcap = 0;
}

void ca_block_stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	signal(SIGPIPE, SIG_IGN);
}

double ca_run_delay_s(pid_t pid)
{
	char path[64], buf[128];
	unsigned long long run = 0, wait = 0;
	ssize_t n;
	int fd;

	if (pid > 0)
		snprintf(path, sizeof path, "/proc/%ld/schedstat", (long)pid);
	else
		snprintf(path, sizeof path, "/proc/thread-self/schedstat");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NAN;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return NAN;
	buf[n] = '\0';
	if (sscanf(buf, "%llu %llu", &run, &wait) != 2)
		return NAN;
	return (double)wait * 1e-9;
}
