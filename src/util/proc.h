/* proc: child processes (nvcc, the torch bridge, the GPU worker).
 *
 * Every child runs in its own process group so that a timeout kills it and everything it
 * started. Captured output is capped: a child printing gigabytes costs at most `cap` bytes of
 * memory, and the rest is counted and dropped. */
#ifndef CA_UTIL_PROC_H
#define CA_UTIL_PROC_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/diag.h"

struct ca_run_opts {
	const char *cwd;          /* NULL: inherit */
	const char *const *env_add; /* NULL-terminated "K=V" list added to the environment */
	double timeout_s;         /* <= 0: no limit */
	size_t stdout_cap;        /* bytes kept of stdout (0: 1 MiB) */
	size_t stderr_cap;        /* bytes kept of stderr (0: 256 KiB) */
	const char *stdin_data;   /* written to the child's stdin, then closed; NULL: /dev/null */
	size_t stdin_len;
	/* Descriptors the child gets as 3, 4, ... (ca_child_spawn only; the caller keeps its own) */
	const int *pass_fds;
	size_t n_pass_fds; /* at most CA_MAX_PASS_FDS */
	/* The child is killed (SIGKILL) when the thread that spawned it ends, the whole process
	 * included: for long-lived helpers that may sit stopped (SIGSTOP), which would neither
	 * read EOF on their stdin nor be reached by the hangup of an orphaned process group under
	 * a subreaper. A caller whose thread ends before its helper is done must not set it. */
	bool kill_with_parent;
};

#define CA_MAX_PASS_FDS 32

struct ca_run_result {
	int exit_code;      /* valid when !signaled && !timed_out */
	int term_signal;    /* nonzero when killed by a signal */
	bool timed_out;
	double seconds;
	char *out;          /* captured stdout, NUL-terminated, owned */
	size_t out_len;
	size_t out_dropped; /* bytes past the cap */
	char *err;          /* captured stderr, NUL-terminated, owned */
	size_t err_len;
	size_t err_dropped;
};

/* Runs argv[0] (searched in PATH) to completion. Returns 0 if the child was started and reaped
 * (inspect result for its fate), or a negative code if it could not be started. */
int ca_run(const char *const *argv, const struct ca_run_opts *opts, struct ca_run_result *result,
	   struct ca_diag *d);
void ca_run_result_free(struct ca_run_result *result);

/* One-line description of how a child ended, e.g. "exit code 2", "killed by signal 11 (SIGSEGV)",
 * "timed out after 10.0 s". */
void ca_run_describe(const struct ca_run_result *result, char *out, size_t out_size);

/* A long-lived child with pipes to its stdin and stdout (stderr is inherited or sent to a file). */
struct ca_child {
	pid_t pid;
	int to_child;   /* write end of the child's stdin */
	int from_child; /* read end of the child's stdout */
	char *rbuf;     /* line buffer */
	size_t rlen, rcap;
	bool reaped;    /* ca_child_alive() saw it exit; wait_status holds how */
	int wait_status;
};

/* How long task `pid` (its main thread; 0: the calling thread) has waited, runnable, for a CPU
 * since it started, in seconds: the kernel's own account (/proc/PID/schedstat, second field),
 * which the task cannot change. NaN when unknown (no such task, no schedstat). */
double ca_run_delay_s(pid_t pid);

int ca_child_spawn(struct ca_child *c, const char *const *argv, const struct ca_run_opts *opts,
		   const char *stderr_path, struct ca_diag *d);
/* Writes all of buf. */
int ca_child_write(struct ca_child *c, const char *buf, size_t len, struct ca_diag *d);
/* Reads one '\n'-terminated line (without the newline) into a heap string owned by the caller.
 * Lines longer than max_line are an error. timeout_s <= 0 waits forever. */
int ca_child_read_line(struct ca_child *c, size_t max_line, double timeout_s, char **line,
		       struct ca_diag *d);
/* The same, polling without sleeping for the first spin_s seconds (low-latency answers). */
int ca_child_read_line_spin(struct ca_child *c, size_t max_line, double timeout_s,
			    double spin_s, char **line, struct ca_diag *d);
/* Closes the pipes, waits up to grace_s for the child to exit, then kills its group. */
void ca_child_close(struct ca_child *c, double grace_s);
/* Like ca_child_close, and reports how the child ended in r (exit_code, term_signal,
 * timed_out when it had to be killed after grace_s); r's buffers stay NULL. */
void ca_child_finish(struct ca_child *c, double grace_s, struct ca_run_result *r);
bool ca_child_alive(struct ca_child *c);

/* Blocks SIGINT and SIGTERM in this thread and the threads it starts from now on (set: the two,
 * for sigwait in the thread that ends the program), and ignores SIGPIPE. */
void ca_block_stop_signals(sigset_t *set);

#endif
