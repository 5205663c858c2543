/* run: a program run to completion inside the sandbox, its output captured (sandbox_run, the
 * sandbox's ca_run), and the build profile every build of candidate code runs in. See
 * sandbox.h for the contract. */
#include "sandbox/sandbox.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"

#define RUN_DEFAULT_OUT_CAP (1u << 20)
#define RUN_DEFAULT_ERR_CAP (256u << 10)
#define RUN_DRAIN_S         0.2 /* after the program ended, while something holds its pipes */

void sandbox_build_opts(struct sandbox_opts *o)
{
	memset(o, 0, sizeof *o);
	o->no_gpu = true;
	o->allow_processes = true;
	o->minimal_etc = true;
	o->as_bytes = SANDBOX_BUILD_AS_BYTES;
	o->tmp_bytes = SANDBOX_BUILD_TMP_BYTES;
	o->nproc = SANDBOX_BUILD_NPROC;
	o->require = SANDBOX_BUILD_REQUIRED;
	o->kill_with_parent = true;
}

/* A capped capture, as util/proc.c keeps one: the first `cap` bytes, the rest counted. */
struct cap_buf {
	char *data;
	size_t len, cap, dropped;
};

static int cap_init(struct cap_buf *c, size_t cap)
{
	c->data = malloc(cap + 1);
	c->len = c->dropped = 0;
	c->cap = cap;
	if (!c->data)
		return CA_ERR_NOMEM;
	c->data[0] = '\0';
	return 0;
}

static void cap_add(struct cap_buf *c, const char *s, size_t n)
{
	size_t room = c->cap - c->len, take = n < room ? n : room;
	memcpy(c->data + c->len, s, take);
	c->len += take;
	c->data[c->len] = '\0';
	c->dropped += n - take;
}

/* Reads what fd has; false at end of file (or an error: the pipe is done). */
static bool drain(int fd, struct cap_buf *c)
{
	char buf[65536];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n > 0) {
			cap_add(c, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 && errno == EAGAIN;
	}
}

struct pump {
	int fds[3]; /* stdout, stderr, stdin (write) */
	struct cap_buf *bufs[2];
	const char *in;
	size_t in_len, in_off;
};

/* Writes what stdin takes now; closes it when all is written or the program stopped reading. */
static void feed(struct pump *pp)
{
	while (pp->in_off < pp->in_len) {
		ssize_t n = write(pp->fds[2], pp->in + pp->in_off, pp->in_len - pp->in_off);
		if (n > 0) {
			pp->in_off += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		break; /* EPIPE: it does not read */
	}
	close(pp->fds[2]);
	pp->fds[2] = -1;
}

/* Moves data until both output pipes end, the deadline (true), or a short drain after the
 * program ended while something it left behind (without a PID namespace) holds a pipe. */
static bool pump_until(struct pump *pp, struct ca_child *c, double deadline)
{
	double drain_until = 0;
	while (pp->fds[0] >= 0 || pp->fds[1] >= 0) {
		struct pollfd pf[3];
		nfds_t n = 0;
		int map[3];
		double now = ca_now();
		if (deadline > 0 && now >= deadline)
			return true;
		if (drain_until > 0 && now >= drain_until)
			break;
		for (int i = 0; i < 3; i++)
			if (pp->fds[i] >= 0) {
				pf[n] = (struct pollfd){.fd = pp->fds[i],
							.events = i == 2 ? POLLOUT : POLLIN};
				map[n++] = i;
			}
		double wait = deadline > 0 && deadline - now < 0.1 ? deadline - now : 0.1;
		int pr = poll(pf, n, (int)(wait * 1000) + 1);
		if (pr < 0 && errno != EINTR)
			break;
		for (nfds_t k = 0; pr > 0 && k < n; k++) {
			int i = map[k];
			if (!pf[k].revents)
				continue;
			if (i == 2) {
				feed(pp);
			} else if (!drain(pp->fds[i], pp->bufs[i])) {
				close(pp->fds[i]);
				pp->fds[i] = -1;
			}
		}
		if (drain_until == 0 && !ca_child_alive(c))
			drain_until = ca_now() + RUN_DRAIN_S;
	}
	return false;
}

int sandbox_run(const char *const *argv, const struct sandbox_opts *opts,
		const struct ca_run_opts *ro, struct ca_run_result *r, struct sandbox_report *rep,
		struct ca_diag *d)
{
	static const struct ca_run_opts no_ro = {0};
	struct sandbox_opts o = {0};
	struct sandbox *sb = NULL;
	struct cap_buf out = {0}, err = {0};
	struct pump pp = {.fds = {-1, -1, -1}, .bufs = {&out, &err}};
	double start = ca_now(), deadline;
	bool timed_out;
	int rc;

	memset(r, 0, sizeof *r);
	if (!ro)
		ro = &no_ro;
	if (opts)
		o = *opts;
	o.capture_stderr = true;
	if ((rc = cap_init(&out, ro->stdout_cap ? ro->stdout_cap : RUN_DEFAULT_OUT_CAP)) ||
	    (rc = cap_init(&err, ro->stderr_cap ? ro->stderr_cap : RUN_DEFAULT_ERR_CAP)) ||
	    !(sb = malloc(sizeof *sb))) {
		rc = ca_fail(d, CA_ERR_NOMEM, "sandbox: out of memory");
		goto fail;
	}
	if ((rc = sandbox_spawn(sb, argv, &o, NULL, d)) != 0)
		goto fail;
	if (rep)
		*rep = sb->report;
	pp.fds[0] = sb->child.from_child;
	pp.fds[1] = sb->err_from_child;
	pp.fds[2] = sb->child.to_child;
	sb->child.from_child = sb->err_from_child = sb->child.to_child = -1; /* pp's now */
	pp.in = ro->stdin_data;
	pp.in_len = ro->stdin_data ? ro->stdin_len : 0;
	for (int i = 0; i < 3; i++)
		(void)fcntl(pp.fds[i], F_SETFL, fcntl(pp.fds[i], F_GETFL) | O_NONBLOCK);
	if (pp.in_len == 0) { /* end of file at once */
		close(pp.fds[2]);
		pp.fds[2] = -1;
	}
	deadline = ro->timeout_s > 0 ? start + ro->timeout_s : 0;
	timed_out = pump_until(&pp, &sb->child, deadline);
	for (int i = 0; i < 3; i++)
		if (pp.fds[i] >= 0)
			close(pp.fds[i]);
	/* after end of file it may still run: wait for it until the deadline, then kill it all */
	double grace = timed_out ? 0 : deadline > 0 ? deadline - ca_now() : 1e9;
	sandbox_finish(sb, grace > 0 ? grace : 0, r);
	r->timed_out = r->timed_out || timed_out;
	if (r->timed_out)
		r->term_signal = 0;
	r->seconds = ca_now() - start;
	r->out = out.data;
	r->out_len = out.len;
	r->out_dropped = out.dropped;
	r->err = err.data;
	r->err_len = err.len;
	r->err_dropped = err.dropped;
	free(sb);
	return 0;
fail:
	free(out.data);
	free(err.data);
	free(sb);
	return rc;
}
