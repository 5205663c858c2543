/* proc: the candidate's process (the native GPU worker or the PyTorch-format runner) as the
 * supervisor drives it (docs/protocol.md, "The candidate's process: plan, commands, events").
 *
 * Everything that comes back from the process is the candidate's word, so it is read with caps
 * and checked: exactly one event answers each command, and it must be that command's answer,
 * `failed` or `error`; any other line (an event nobody asked for, a second answer, a reason code
 * that would blame the environment instead of the candidate) is hack.harness_tampering. Between
 * commands the process is stopped (SIGSTOP, and waited for until the whole thread group has
 * stopped), so none of its threads runs while the supervisor and the bridge prepare or check
 * data; the watchdog counts only the time it ran.
 *
 * Ownership: a cand_proc borrows the child (its pipes and pid) from the caller, who spawned it
 * and finishes it; it owns the answers it returns (valid until the next wait) and the device
 * event. */
#ifndef CA_EVAL_PROC_H
#define CA_EVAL_PROC_H

#include <limits.h>
#include <stdbool.h>

#include <jansson.h>

#include "protocol/loop.h"
#include "util/proc.h"

/* The candidate's stdout and stderr (its prints included) beyond this stop the run. */
#define PROC_MAX_OUTPUT (16ull << 20)
/* The whole run's running time may reach this many times one command's limit: a slow but
 * correct candidate finishes (issue 46), a slow one is still bounded. */
#define PROC_TOTAL_FACTOR 10.0
/* Answers are awaited by polling without sleep for this long, then by blocking. */
#define PROC_SPIN_S 0.002

struct cand_proc {
	struct ca_child *child;
	bool freeze;       /* stop the process between commands */
	bool stopped;
	double limit_s;    /* seconds one command may run (the watchdog) */
	double total_limit_s; /* seconds the process may run in all: PROC_TOTAL_FACTOR x limit_s */
	double ran_s;      /* seconds it has run so far */
	double cmd_from_s; /* ran_s when the outstanding command was sent */
	double max_call_s; /* the longest a `call` command has run */
	double resumed_at; /* when it last resumed */
	char err_path[PATH_MAX];
	const char *cmd;   /* the outstanding command, NULL when none */
	bool dead;         /* its events channel closed or it could not be stopped */
	bool fatal;        /* it answered with a fatal `error` event (the reason), then exits */
	bool timed_out;
	bool flooded;
	json_t *device;    /* its `device` event */
	json_t *answer;    /* the last answer */
	/* Called once, by the next cand_proc_wait, as soon as the answer has been read and before
	 * the process is stopped (the timed loop's loop_answered); then cleared. */
	void (*on_answer)(void *arg);
	void *on_answer_arg;
};

void cand_proc_init(struct cand_proc *p, struct ca_child *child, bool freeze, double limit_s,
		    const char *err_path);
void cand_proc_free(struct cand_proc *p);

/* Reads the unasked `device` event the process sends first (then stops it). */
int cand_proc_hello(struct cand_proc *p, struct loop_fail *f);
/* Resumes the process and sends {"cmd": cmd, ...fields} (fields stolen; may be NULL). */
int cand_proc_send(struct cand_proc *p, const char *cmd, json_t *fields, struct loop_fail *f);
/* Waits for the answer to the outstanding command and stops the process. 0 with *answer (the
 * event object) when it answered as expected; a negative code with f filled when it failed
 * (`failed`/`error`: its code, restricted to what a candidate can be blamed for), died
 * (fault.crash: the caller refines it once the process is reaped), ran past the watchdog
 * (timeout), flooded its output (fault.output_limit) or broke the protocol
 * (hack.harness_tampering). */
int cand_proc_wait(struct cand_proc *p, json_t **answer, struct loop_fail *f);
/* The verdict on one line the process wrote in answer to `cmd` (the unasked-output and
 * process-state parts of cand_proc_wait left out: this is the parser, fuzzed on its own). 0 with
 * *answer for the expected answer; CA_ERR_REJECTED with f filled, and *answer when it was a
 * `failed` or `error` event, otherwise. The caller owns *answer. */
int cand_proc_judge(const char *cmd, const char *line, json_t **answer, struct loop_fail *f);
/* send + wait. */
int cand_proc_command(struct cand_proc *p, const char *cmd, json_t *fields, json_t **answer,
		      struct loop_fail *f);
/* Resumes a stopped process (before the caller closes it). */
void cand_proc_resume(struct cand_proc *p);

/* Whether a reason code may come from the candidate's own process (protocol/reasons.h,
 * candidate_may_report): a code outside these (env., task., internal, or one not registered)
 * would turn the candidate's failure into "no reward" or invent a verdict. */
bool cand_proc_code_allowed(const char *code);

#endif
