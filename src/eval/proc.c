#include "eval/proc.h"
#include "protocol/reasons.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "protocol/wire.h"
#include "util/clock.h"
#include "util/str.h"

void cand_proc_init(struct cand_proc *p, struct ca_child *child, bool freeze, double limit_s,
		    const char *err_path)
{
	memset(p, 0, sizeof *p);
	p->child = child;
	p->freeze = freeze;
	p->limit_s = limit_s;
	p->total_limit_s = PROC_TOTAL_FACTOR * limit_s;
	p->resumed_at = ca_now();
	ca_strlcpy(p->err_path, err_path ? err_path : "", sizeof p->err_path);
}

void cand_proc_free(struct cand_proc *p)
{
	json_decref(p->device);
	json_decref(p->answer);
	p->device = p->answer = NULL;
}

bool cand_proc_code_allowed(const char *code)
{
	return reason_candidate_may_report(code);
}

/* The answers a command may get besides `failed` and `error`. */
static bool expected(const char *cmd, const char *event)
{
	static const struct {
		const char *cmd, *event;
	} table[] = {
		{WIRE_CMD_EMPTY, WIRE_EV_CALLED},     {WIRE_CMD_CALL, WIRE_EV_CALLED},
		{WIRE_CMD_LOAD, WIRE_EV_LOADED},      {WIRE_CMD_SETUP, WIRE_EV_SET_UP},
		{WIRE_CMD_AUDIT, WIRE_EV_AUDITED},    {WIRE_CMD_PROFILE, WIRE_EV_CALLED},
		{WIRE_CMD_PROFILE, WIRE_EV_PROFILE},  {WIRE_CMD_QUIT, WIRE_EV_DONE},
		{"(start)", WIRE_EV_DEVICE},
	};
	for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
		if (strcmp(cmd, table[i].cmd) == 0 && strcmp(event, table[i].event) == 0)
			return true;
	return false;
}

void cand_proc_resume(struct cand_proc *p)
{
	if (p->stopped && p->child->pid > 0) {
		kill(p->child->pid, SIGCONT);
		p->stopped = false;
		p->resumed_at = ca_now();
	}
}

/* Stops the whole process and waits until it has stopped. A process that exited instead is
 * left for the caller to reap (its exit status stays waitable). */
static void stop(struct cand_proc *p)
{
	pid_t pid = p->child->pid;
	siginfo_t si;

	double now = ca_now();
	p->ran_s += now - p->resumed_at;
	p->resumed_at = now; /* a process left running (no freeze) is counted from here on */
	if (!p->freeze || p->dead || pid <= 0)
		return;
	if (kill(pid, SIGSTOP) != 0) {
		p->dead = true;
		return;
	}
	for (;;) {
		memset(&si, 0, sizeof si);
		if (waitid(P_PID, (id_t)pid, &si, WSTOPPED | WEXITED | WNOWAIT) != 0) {
			if (errno == EINTR)
				continue;
			p->dead = true;
			return;
		}
		if (si.si_code != CLD_STOPPED) {
			p->dead = true; /* exited or killed: reaped by the caller */
			return;
		}
		/* Consume the stop report (this does not reap). */
		memset(&si, 0, sizeof si);
		if (waitid(P_PID, (id_t)pid, &si, WSTOPPED) == 0 || errno != EINTR)
			break;
	}
	p->stopped = true;
}

static int output_flood(struct cand_proc *p, struct loop_fail *f)
{
	struct stat st;
	if (p->err_path[0] && stat(p->err_path, &st) == 0 &&
	    (unsigned long long)st.st_size > PROC_MAX_OUTPUT) {
		p->flooded = true;
		loop_fail_set(f, "fault.output_limit",
			      "the candidate wrote more than %llu MiB to stdout/stderr and was "
			      "stopped (print less: a few lines of debugging output are fine)",
			      PROC_MAX_OUTPUT >> 20);
		return CA_ERR_LIMIT;
	}
	return 0;
}

/* After the answer, with the process stopped: anything more it wrote came unasked (a second
 * answer, an answer written ahead for the next command). 1 when there is some. */
static int unasked_output(struct cand_proc *p)
{
	struct pollfd pfd = {.fd = p->child->from_child, .events = POLLIN};
	char c;
	ssize_t n;

	if (p->child->rlen > 0)
		return 1;
	if (poll(&pfd, 1, 0) <= 0 || !(pfd.revents & (POLLIN | POLLHUP)))
		return 0;
	n = read(p->child->from_child, &c, 1);
	if (n == 0)
		p->dead = true; /* it exited after answering: the next command finds out */
	return n > 0;
}

int cand_proc_send(struct cand_proc *p, const char *cmd, json_t *fields, struct loop_fail *f)
{
	json_t *obj = fields ? fields : json_object();
	struct ca_diag d = {{0}};
	char *line;
	int rc;

	if (p->dead) {
		json_decref(obj);
		loop_fail_set(f, "fault.crash", "the candidate's process is gone");
		return CA_ERR_CHILD;
	}
	json_object_set_new(obj, "cmd", json_string(cmd));
	line = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (!line) {
		loop_fail_set(f, "internal", "out of memory");
		return CA_ERR_NOMEM;
	}
	cand_proc_resume(p);
	rc = ca_child_write(p->child, line, strlen(line), &d);
	if (rc == 0)
		rc = ca_child_write(p->child, "\n", 1, &d);
	free(line);
	if (rc) {
		p->dead = true;
		loop_fail_set(f, "fault.crash", "the candidate's process stopped reading commands");
		return CA_ERR_CHILD;
	}
	p->cmd = cmd;
	p->cmd_from_s = p->ran_s;
	return 0;
}

int cand_proc_wait(struct cand_proc *p, json_t **answer, struct loop_fail *f)
{
	const char *cmd = p->cmd ? p->cmd : "(none)";
	struct ca_diag d = {{0}};
	char *line = NULL;
	double running = ca_now() - p->resumed_at;
	double left_cmd = p->limit_s - (p->ran_s - p->cmd_from_s) - running;
	double left_total = p->total_limit_s - p->ran_s - running;
	bool total_first = left_total < left_cmd;
	double left = total_first ? left_total : left_cmd;
	json_t *ev = NULL;
	int rc;

	*answer = NULL;
	json_decref(p->answer);
	p->answer = NULL;
	p->cmd = NULL;
	if (left <= 0)
		left = 0.001;
	rc = ca_child_read_line_spin(p->child, WIRE_MAX_EVENT, left, PROC_SPIN_S, &line, &d);
	if (p->on_answer) {
		void (*hook)(void *) = p->on_answer;
		p->on_answer = NULL;
		hook(p->on_answer_arg);
	}
	stop(p);
	if (strcmp(cmd, WIRE_CMD_CALL) == 0 && p->ran_s - p->cmd_from_s > p->max_call_s)
		p->max_call_s = p->ran_s - p->cmd_from_s;
	if (output_flood(p, f)) {
		free(line);
		return CA_ERR_LIMIT;
	}
	if (rc == CA_ERR_TIMEOUT) {
		p->timed_out = true;
		if (total_first)
			loop_fail_set(f, "timeout",
				      "the candidate's process ran %.0f s in all (%s unanswered), the "
				      "watchdog's limit for a whole run, and was killed",
				      p->total_limit_s, cmd);
		else
			loop_fail_set(f, "timeout",
				      "the candidate did not answer (%s) within the %.0f s watchdog limit "
				      "and was killed",
				      cmd, p->limit_s);
		return rc;
	}
	if (rc == CA_ERR_LIMIT) {
		loop_fail_set(f, "hack.harness_tampering",
			      "the candidate's process sent a line longer than %u bytes",
			      WIRE_MAX_EVENT);
		return rc;
	}
	if (rc) {
		p->dead = true;
		loop_fail_set(f, "fault.crash", "the candidate's process died (%s)", cmd);
		return CA_ERR_CHILD;
	}
	rc = cand_proc_judge(cmd, line, &ev, f);
	free(line);
	if (ev && strcmp(json_string_value(json_object_get(ev, "event")), WIRE_EV_ERROR) == 0)
		p->dead = p->fatal = true; /* it exits after a fatal error */
	if (rc == 0 && strcmp(json_string_value(json_object_get(ev, "event")), WIRE_EV_DONE) != 0 &&
	    unasked_output(p)) {
		loop_fail_set(f, "hack.harness_tampering",
			      "the candidate's process wrote more than one answer to the command %s "
			      "(events written ahead or nobody asked for)",
			      cmd);
		json_decref(ev);
		return CA_ERR_REJECTED;
	}
	p->answer = ev;
	*answer = ev;
	return rc;
}

int cand_proc_judge(const char *cmd, const char *line, json_t **answer, struct loop_fail *f)
{
	json_t *ev = json_loads(line, JSON_REJECT_DUPLICATES, NULL);
	const char *name = json_string_value(json_object_get(ev, "event"));
	const char *code, *msg;

	*answer = NULL;
	if (!json_is_object(ev) || !name) {
		json_decref(ev);
		loop_fail_set(f, "hack.harness_tampering",
			      "the candidate's process wrote something that is not an event on its "
			      "events channel (answering %s)",
			      cmd);
		return CA_ERR_REJECTED;
	}
	if (strcmp(name, WIRE_EV_FAILED) == 0 || strcmp(name, WIRE_EV_ERROR) == 0) {
		code = json_string_value(json_object_get(ev, "code"));
		msg = json_string_value(json_object_get(ev, "message"));
		if (!cand_proc_code_allowed(code))
			loop_fail_set(f, "hack.harness_tampering",
				      "the candidate's process reported a failure with a code it may "
				      "not use (%.48s): %.400s",
				      code ? code : "none", msg ? msg : "");
		else
			loop_fail_set(f, code, "%.2000s", msg ? msg : "the call failed");
		*answer = ev;
		return CA_ERR_REJECTED;
	}
	if (!expected(cmd, name)) {
		loop_fail_set(f, "hack.harness_tampering",
			      "the candidate's process answered %.32s to the command %s: an event "
			      "nobody asked for (a process tampering with its own harness)",
			      name, cmd);
		json_decref(ev);
		return CA_ERR_REJECTED;
	}
	*answer = ev;
	return 0;
}

int cand_proc_command(struct cand_proc *p, const char *cmd, json_t *fields, json_t **answer,
		      struct loop_fail *f)
{
	int rc = cand_proc_send(p, cmd, fields, f);
	return rc ? rc : cand_proc_wait(p, answer, f);
}

int cand_proc_hello(struct cand_proc *p, struct loop_fail *f)
{
	json_t *ev = NULL;
	int rc;

	p->cmd = "(start)";
	rc = cand_proc_wait(p, &ev, f);
	if (rc)
		return rc;
	p->device = json_incref(ev);
	return 0;
}
