/* verify: the verification trials (docs/evaluation.md, "Verification"): per trial a fresh
 * secret seed makes the parameters and the inputs (the bridge, into the slots), the candidate
 * is set up and called once, stopped and drained, and the bridge compares its outputs with
 * the reference; inputs and parameters must be unchanged. One trial, chosen from the secret,
 * is audited by CUPTI in the candidate's process (a first layer: stream escapes and host
 * compute by name; the outside bound of the timed loop charges them anyway). */
#include <math.h>
#include <string.h>

#include "eval/run.h"
#include "protocol/reasons.h"
#include "protocol/wire.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/proc.h"
#include "util/str.h"
#include "util/timeline.h"

/* ---- the candidate as the loop's callee -------------------------------------------------------- */

struct callee_state {
	const char *audit_phase;
};

static struct callee_state callee = {"verify"};

static void keep_audit(struct run *r, const json_t *ans)
{
	const char *ev = json_string_value(json_object_get(ans, "event"));
	const json_t *a = ev && strcmp(ev, WIRE_EV_AUDITED) == 0 ? ans : json_object_get(ans, "audit");
	json_t *copy;
	if (!json_is_object(a))
		return;
	if (!r->audit)
		r->audit = json_array();
	if (json_array_size(r->audit) >= 4)
		return;
	copy = json_deep_copy(a);
	json_object_del(copy, "event");
	json_array_append_new(r->audit, copy);
}

static int cand_send(void *ctx, int input, enum loop_send what, struct loop_fail *f)
{
	struct run *r = ctx;
	json_t *fields = json_pack("{s:i}", "input", input);
	const char *cmd = WIRE_CMD_EMPTY;
	struct cand_proc *p = what == LOOP_SEND_REF ? &r->twin->proc : &r->proc;
	/* the first probe is launched the moment the answer arrives (loop_answered) */
	p->on_answer = loop_answered;
	p->on_answer_arg = &r->loop;
	if (what == LOOP_SEND_REF)
		return eval_twin_send(r->twin, fields, f);
	if (what != LOOP_SEND_EMPTY) {
		json_t *sc = r->data.scalars[input];
		json_object_set_new(fields, "scalars", sc ? json_incref(sc) : json_array());
		cmd = WIRE_CMD_CALL;
	}
	if (what == LOOP_SEND_AUDIT) {
		cmd = WIRE_CMD_AUDIT;
		json_object_set_new(fields, "phase", json_string(callee.audit_phase));
	}
	return cand_proc_send(&r->proc, cmd, fields, f);
}

static int cand_wait(void *ctx, double *ev_ms, struct loop_fail *f)
{
	struct run *r = ctx;
	json_t *ans = NULL;
	const json_t *ev;
	int rc;
	if (r->twin && eval_twin_waiting(r->twin)) {
		/* the reference's answer: trusted code, its time is not used */
		rc = eval_twin_wait(r->twin, f);
		r->twin->proc.on_answer = NULL;
		if (rc) {
			char why[sizeof f->message];
			ca_strlcpy(why, f->message, sizeof why);
			loop_fail_set(f, "env.no_worker", "the reference process failed: %s", why);
		}
		*ev_ms = -1.0;
		return rc ? CA_ERR_IO : 0;
	}
	rc = cand_proc_wait(&r->proc, &ans, f);
	r->proc.on_answer = NULL;
	if (ans)
		keep_audit(r, ans);
	if (rc)
		return rc;
	ev = json_object_get(ans, "ev_ms");
	*ev_ms = json_is_number(ev) ? json_number_value(ev) : -1.0;
	return 0;
}

/* The kernel's account of how long the process serving `what` waited for a CPU (loop_ops). */
static double cand_run_delay(void *ctx, enum loop_send what)
{
	struct run *r = ctx;
	if (what == LOOP_SEND_REF)
		return r->twin ? ca_run_delay_s(r->twin->child.pid) : NAN;
	return ca_run_delay_s(r->proc.child->pid);
}

void cand_loop_init(struct run *r)
{
	memset(&r->loop, 0, sizeof r->loop);
	data_loop_ops(r, &r->loop.ops);
	r->loop.ops.send = cand_send;
	r->loop.ops.wait = cand_wait;
	r->loop.ops.run_delay = cand_run_delay;
	r->loop.ops.can_audit = r->format == CANDIDATE_NATIVE;
	r->loop.ops.has_ref = r->twin != NULL;
	r->loop.ops.hold_s = 1e-6 * (r->format == CANDIDATE_NATIVE
					     ? r->o->protocol.timing.hold_us
					     : r->o->protocol.timing.hold_python_us);
	r->loop.dev = &r->data.dev;
	callee.audit_phase = "verify";
}

void cand_loop_audit_phase(const char *phase)
{
	callee.audit_phase = phase;
}

/* ---- the trials -------------------------------------------------------------------------------- */

/* One trial: 0 correct, 1 failed (entry says how), -1 the evaluation cannot go on (reason set). */
static int trial(struct run *r, int k, bool audited, json_t *entry)
{
	struct data_set set = {.input = 0, .seed = r->trial_seeds[k]};
	struct loop_fail f = {0};
	struct loop_window w;
	json_t *ans = NULL;
	int v;

	/* The parameters are checksummed as filled, before ca_setup: setup may not modify them
	 * either (packing belongs in buffers of the candidate's own). */
	double t = ca_now();
	if (data_fill(r, r->trial_seeds[k], true, &set, 1))
		return -1;
	ca_timeline_span("trial.fill", t, ca_now());
	t = ca_now();
	if (cand_proc_command(&r->proc, WIRE_CMD_SETUP, NULL, &ans, &f) == 0) {
		ca_timeline_span("trial.setup", t, ca_now());
		t = ca_now();
		if (data_ready(r, 0, false))
			return -1;
		ca_timeline_span("trial.ready", t, ca_now());
		t = ca_now();
		loop_window(&r->loop, 0, audited ? LOOP_SEND_AUDIT : LOOP_SEND_CALL, &w, &f);
		ca_timeline_span(audited ? "trial.audited_call" : "trial.call", t, ca_now());
	}
	if (f.code[0]) {
		if (!reason_judged(f.code)) {
			reason_from_fail(r, &f);
			return -1;
		}
		json_object_set_new(entry, "ok", json_false());
		json_object_set_new(entry, "code", json_string(f.code));
		json_object_set_new(entry, "message", json_string(f.message));
		return 1;
	}
	t = ca_now();
	v = data_check(r, 0, entry);
	ca_timeline_span("trial.check", t, ca_now());
	if (v < 0)
		return -1;
	json_object_set_new(entry, "ok", json_boolean(v == 1));
	if (v == 0 && !json_object_get(entry, "code"))
		json_object_set_new(entry, "code", json_string("verify.mismatch"));
	return v == 1 ? 0 : 1;
}

int step_verify(struct run *r)
{
	int trials = r->o->protocol.trials;
	int audited = (int)(r->audit_seed % (uint64_t)trials);
	double t0 = ca_now();

	r->verify_ok = false;
	cand_loop_audit_phase("verify");
	for (int k = 0; k < trials; k++) {
		double s0 = ca_now();
		json_t *entry = json_pack("{s:i}", "trial", k);
		int rc = trial(r, k, r->loop.ops.can_audit && k == audited, entry);
		json_object_set_new(entry, "seconds", json_real(ca_now() - s0));
		json_array_append_new(r->trials, entry);
		if (rc < 0)
			return -1;
		if (rc > 0) {
			const char *code = json_string_value(json_object_get(entry, "code"));
			const char *msg = json_string_value(json_object_get(entry, "message"));
			struct loop_fail f = {0};
			loop_fail_set(&f, code ? code : "verify.mismatch", "trial %d: %s", k + 1,
				      msg ? msg : "failed");
			reason_from_fail(r, &f);
			return -1;
		}
	}
	r->verify_ok = true;
	note_seconds(r, "verify", t0);
	ca_log_info("verified %d/%d trials", trials, trials);
	return 0;
}
