/* twin: the reference process an evaluation session keeps from one timed evaluation to the next
 * (docs/protocol.md, "The reference process"; docs/service.md, "Scheduling").
 *
 * A timed evaluation on a GPU pairs every call of the candidate's process with an empty call of
 * a reference process: the native worker started from a plan that names no library, no spec and
 * no slots (worker/plan.h), so it answers `empty` and `quit` only. Started per evaluation it cost
 * a CUDA context made and ended each time (about 0.15 s of driver work each way, which other
 * evaluations' turns on the GPU wait behind: docs/service.md). Kept by the session it is made
 * once.
 *
 * Why keeping it is safe, for every candidate: nothing of a candidate ever runs in it or reaches
 * it. It loads no library, maps no slot (no memory a candidate's process maps), reads commands
 * only from the supervisor's pipe and runs outside the sandbox, while the candidate's process
 * runs in its own PID namespace (where no process outside it has a PID it could name), as
 * another uid when the supervisor is root, under a seccomp filter that kills ptrace and refuses
 * sched_setaffinity (docs/security.md), so it cannot signal, trace or move the twin. Without the
 * sandbox (CUDA_AGENT_SANDBOX=0) nothing holds, for the twin as for the supervisor. What a
 * candidate can do to the GPU it could do to a twin started beside it. And the offset between
 * the two processes' empty windows is calibrated afresh in every evaluation before the
 * candidate is loaded, so a constant difference between a warm twin and a new candidate's
 * process cancels (the fidelity measured both ways: bench/RESULTS.md, 2026-12-06).
 *
 * A twin that failed in any way (it died, broke the protocol, ran past its watchdog, or was left
 * with a command unanswered) is ended and the next evaluation starts a fresh one.
 *
 * Ownership: the session owns its twin (eval/session.h); an evaluation borrows it between
 * eval_twin_take and eval_twin_give. The twin owns its child, its directory (plan, stderr) and
 * its cand_proc. */
#ifndef CA_EVAL_TWIN_H
#define CA_EVAL_TWIN_H

#include <limits.h>
#include <stdbool.h>

#include <jansson.h>

#include "eval/proc.h"
#include "util/diag.h"
#include "util/proc.h"

struct eval_twin {
	struct ca_child child;
	struct cand_proc proc;
	bool started;  /* spawned and not ended */
	bool greeted;  /* its `device` event was read */
	bool failed;   /* a command to it failed (eval_twin_send, eval_twin_wait) */
	int served;    /* evaluations it took part in */
	char worker[PATH_MAX]; /* the program it runs */
	char dir[PATH_MAX];    /* its plan and stderr: a run-twin-* directory under the runs' base */
	char err_path[PATH_MAX];
};

void eval_twin_init(struct eval_twin *t);
/* For one evaluation: the running twin when it still lives and runs `worker` (*fresh false), or
 * a new one spawned from this thread (it is killed when this thread ends, and it inherits the
 * thread's CPU affinity; *fresh true: read
 * its hello with eval_twin_hello, after the candidate's process is spawned so that the two make
 * their contexts at once). Its watchdog is reset to limit_s seconds of running time. 0, or a
 * negative code with d filled (nothing running then). */
int eval_twin_take(struct eval_twin *t, const char *worker, const char *runs_base, double limit_s,
		   bool *fresh, struct ca_diag *d);
/* Reads a fresh twin's `device` event. 0, or -1 with d filled (the caller may read its stderr,
 * err_path, then ends it: eval_twin_end). */
int eval_twin_hello(struct eval_twin *t, struct ca_diag *d);
/* Moves every thread of the twin to cpu, or to the calling thread's CPUs when cpu < 0. 0, or -1
 * when one could not be moved. */
int eval_twin_pin(struct eval_twin *t, int cpu);
/* The timed loop's reference call (LOOP_SEND_REF): `empty` sent, then its answer awaited. A
 * failure of either (a refused or unexpected answer, death, the watchdog) is returned with f
 * filled and marks the twin, which eval_twin_give then ends. */
int eval_twin_send(struct eval_twin *t, json_t *fields, struct loop_fail *f);
int eval_twin_wait(struct eval_twin *t, struct loop_fail *f);
/* Whether an answer is awaited (sent, not yet waited for). */
bool eval_twin_waiting(const struct eval_twin *t);
/* Comparisons only: "0" ends the twin after every evaluation, as before it was kept (the timing
 * is the same either way: docs/runs/after_checks_h100_2026-12-06.txt). */
#define TWIN_KEEP_ENV "CUDA_AGENT_KEEP_REFERENCE"

/* After the evaluation: a twin that is idle and healthy is kept (stopped), any other is ended
 * (or every one, with TWIN_KEEP_ENV=0). */
void eval_twin_give(struct eval_twin *t);
/* Ends the twin (`quit` when it is healthy, then its process group) and removes its directory.
 * Safe to call when none runs. */
void eval_twin_end(struct eval_twin *t);

#endif
