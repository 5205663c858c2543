/* timing: the candidate's timed loop, its profile, and the baselines, all through the one loop
 * of src/protocol/loop.c (docs/protocol.md, "The timed loop"). The baselines are the same loop
 * with the bridge as callee: the same preparation of the same input sets in the same slots, the
 * same windows, the same rule for the median. */
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Decisions at the thresholds (step_decide): rounds of calls each, candidate and baseline. */
#define DECIDE_ROUNDS 5
#define DECIDE_CALLS  24

#include "eval/reward.h"
#include "protocol/reasons.h"
#include "eval/run.h"
#include "protocol/wire.h"
#include "store/baseline_cache.h"
#include "util/clock.h"
#include "util/log.h"

/* The timing sets: the rotation sets into inputs[0..R-1] and the timing model's state. */
int timing_fill_rotation(struct run *r)
{
	struct data_set sets[RUN_MAX_INPUTS];
	for (int i = 0; i < r->data.ninputs; i++)
		sets[i] = (struct data_set){.input = i, .seed = r->rotation_seeds[i]};
	return data_fill(r, r->timing_model_seed, true, sets, r->data.ninputs);
}

static json_t *nullable_int(int v)
{
	return v >= 0 ? json_integer(v) : json_null();
}

static json_t *array_of(const double *x, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(x[i]));
	return a;
}

json_t *timing_summary(const struct loop_result *t, const struct loop_calibration *cal,
		       size_t flush_bytes)
{
	const struct sample_verdict *v = &t->verdict;
	json_t *o = json_object();
	json_object_set_new(o, "median_ms", json_real(v->median_ms));
	json_object_set_new(o, "claims_median_ms", json_real(v->claims_median_ms));
	json_object_set_new(o, "outside_ms", json_real(v->outside_ms));
	json_object_set_new(o, "outside_median_ms", json_real(v->outside_median_ms));
	json_object_set_new(o, "outside_se_ms", json_real(v->outside_se_ms));
	json_object_set_new(o, "tol_ms", json_real(v->tol_ms));
	json_object_set_new(o, "bound", json_string(v->outside_bound ? "outside" : "claims"));
	json_object_set_new(o, "rse", isfinite(v->rse) ? json_real(v->rse) : json_null());
	json_object_set_new(o, "samples", json_integer((json_int_t)t->n));
	json_object_set_new(o, "event_overhead_ms", json_real(cal->ev_ms));
	json_object_set_new(o, "window_overhead_ms", json_real(cal->window_s * 1e3));
	json_object_set_new(o, "outside_reference",
			    json_string(t->paired ? "twin" : "calibration"));
	if (t->paired) {
		json_object_set_new(o, "reference_offset_ms", json_real(cal->ref_offset_s * 1e3));
		json_object_set_new(o, "reference_offset_se_ms", json_real(v->offset_se_ms));
		json_object_set_new(o, "reference_pairs", json_integer(cal->ref_pairs));
	}
	json_object_set_new(o, "warmup_calls", json_integer(t->warmup_calls));
	json_object_set_new(o, "stop_reason",
			    t->stop_reason ? json_string(t->stop_reason) : json_null());
	json_object_set_new(o, "budget_exhausted", json_boolean(t->budget_exhausted));
	json_object_set_new(o, "l2_flush_bytes", json_integer((json_int_t)flush_bytes));
	json_object_set_new(o, "probes_slow", json_integer(t->slow_probes));
	if (t->load_waived)
		json_object_set_new(o, "tampering_waived_by_load", json_true());
	if (t->paired) {
		json_object_set_new(o, "early_answers", json_integer(t->early_calls));
		json_object_set_new(o, "early_answer_max_ms", json_real(t->early_max_ms));
		json_object_set_new(o, "early_threshold_ms", json_real(cal->early_s * 1e3));
		json_object_set_new(o, "probe_wait_diff_ms", isfinite(cal->wait_diff_s)
								    ? json_real(cal->wait_diff_s * 1e3)
								    : json_null());
	}
	json_object_set_new(o, "claims_invalid", json_integer(t->claims_invalid));
	json_object_set_new(o, "loop_seconds", json_real(t->loop_s));
	json_object_set_new(o, "sm_clock_mhz_before", nullable_int(t->sm_clock_before));
	json_object_set_new(o, "sm_clock_mhz_after", nullable_int(t->sm_clock_after));
	json_object_set_new(o, "samples_ms", array_of(t->claims_ms, t->n));
	json_object_set_new(o, "outside_samples_ms", array_of(t->outside_ms, t->n));
	return o;
}

int step_time_candidate(struct run *r)
{
	struct loop_fail f = {0};
	json_t *ans = NULL;
	double t0 = ca_now();
	int rc;

	if (timing_fill_rotation(r))
		return -1;
	if (cand_proc_command(&r->proc, WIRE_CMD_SETUP, NULL, &ans, &f)) {
		reason_from_fail(r, &f);
		return -1;
	}
	/* after the candidate's set-up: what it allocates there comes first */
	if (data_keep_reserve(r))
		return -1;
	cand_loop_audit_phase("timing");
	/* slow but correct (issue 46): as many samples as fit the slow budget, said in the result */
	struct timing_protocol q = r->o->protocol.timing;
	if (timing_protocol_slow(&q, r->proc.max_call_s)) {
		json_object_set_new(r->result, "slow",
				    json_pack("{s:f, s:i, s:f}", "call_s", r->proc.max_call_s,
					      "min_samples", q.min_samples, "budget_s",
					      q.slow_budget_s));
		ca_log_info("slow: calls of %.2f s; %d samples to fit %.0f s", r->proc.max_call_s,
			    q.min_samples, q.slow_budget_s);
	}
	rc = loop_time(&r->loop, &q, r->data.ninputs, r->loop_seed, &r->timing, &f);
	r->timed = true;
	note_seconds(r, "timing", t0);
	if (rc) {
		reason_from_fail(r, &f);
		return -1;
	}
	ca_log_info("timed: %zu calls, median %.4f ms (%s), %d checked", r->timing.n,
		    r->timing.verdict.median_ms,
		    r->timing.verdict.outside_bound ? "held to the outside bound" : "claims",
		    r->timing.special_checks + r->timing.spot_checks + r->timing.final_done);
	return 0;
}

/* The agent's per-kernel table: one call to warm up, then `calls` calls recorded, each
 * prepared like a timed call. Profiling problems never fail the candidate. */
void step_profile(struct run *r)
{
	int calls = r->o->profile_calls > 0 ? r->o->profile_calls : 5;
	struct loop_fail f = {0};
	struct loop_window w;
	double t0 = ca_now();

	if (r->loop.ops.prepare(r, 0, LOOP_NORMAL, 1, &f) ||
	    loop_window(&r->loop, 0, LOOP_SEND_CALL, &w, &f))
		goto failed;
	for (int i = 0; i < calls; i++) {
		json_t *fields, *ans = NULL;
		json_t *sc = r->data.scalars[0];
		if (r->loop.ops.prepare(r, 0, LOOP_NORMAL, 2 * (uint64_t)i + 3, &f))
			goto failed;
		fields = json_pack("{s:i, s:o, s:b}", "input", 0, "scalars",
				   sc ? json_incref(sc) : json_array(), "last", i == calls - 1);
		if (cand_proc_command(&r->proc, WIRE_CMD_PROFILE, fields, &ans, &f))
			goto failed;
		if (i == calls - 1) {
			json_decref(r->profile_event);
			r->profile_event = json_deep_copy(ans);
		}
	}
	note_seconds(r, "profile", t0);
	return;
failed:
	/* a candidate's failure is its own reason; the profiler's limits are not */
	if (strncmp(f.code, "profile.", 8) == 0 || strcmp(f.code, "worker.unsupported") == 0) {
		json_decref(r->profile_event);
		r->profile_event = json_pack("{s:b, s:s, s:s}", "ok", 0, "code", f.code, "message",
					     f.message);
	} else {
		reason_from_fail(r, &f);
	}
}

/* ---- baselines --------------------------------------------------------------------------------- */

struct bench {
	struct run *r;
	int input;
	enum loop_send what;
};

static int bench_send(void *ctx, int input, enum loop_send what, struct loop_fail *f)
{
	struct bench *b = ctx;
	(void)f;
	b->input = input;
	b->what = what;
	return 0;
}

static int bench_wait(void *ctx, double *ev_ms, struct loop_fail *f)
{
	struct bench *b = ctx;
	struct run *r = b->r;
	json_t *req, *res = NULL, *sc = r->data.scalars[b->input];
	struct ca_diag d = {{0}};
	char code[64];
	int rc;

	req = json_pack("{s:i, s:o}", "input", b->input, "scalars",
			sc ? json_incref(sc) : json_array());
	rc = bridge_call(&r->s->bridge, b->what == LOOP_SEND_EMPTY ? "bench_empty" : "bench_call",
			 req, 600.0, &res, code, sizeof code, &d);
	json_decref(req);
	if (rc) {
		loop_fail_set(f, code[0] ? code : "env.bridge", "%s", d.msg);
		return rc;
	}
	*ev_ms = json_is_number(json_object_get(res, "ev_ms"))
			 ? json_number_value(json_object_get(res, "ev_ms"))
			 : -1.0;
	json_decref(res);
	return 0;
}

static int bench_prepare(void *ctx, int input, int special, uint64_t seed, struct loop_fail *f)
{
	struct bench *b = ctx;
	struct loop_ops data;
	data_loop_ops(b->r, &data);
	return data.prepare(b->r, input, special, seed, f);
}

/* A baseline callee opened in the bridge (bench_open) with its own calibrated loop. */
struct baseline_session {
	struct bench b;
	struct loop L;
	json_t *settings;  /* the bridge's baseline_settings, or NULL */
	double compile_s;  /* the compile's first call, -1 when not measured */
	bool open;
	bool pinned;       /* the bridge's main thread is on the claimed CPU; was on `before` */
	cpu_set_t before;
};

/* A baseline that launches several kernels from Python is as fast as the thread launching them
 * (the GPU waits between kernels): its time follows the core's frequency and idle depth, and
 * the scheduler moves the thread between cores. So its loop runs on the CPU this evaluation
 * claimed (eval/cpu_claim.h), idle then: the candidate's process is stopped and the reference
 * process waits; every re-measurement of the task uses the same core while it is free. */
static void bridge_pin(struct run *r, struct baseline_session *s)
{
	cpu_set_t one;
	pid_t pid = r->s->bridge.child.pid;
	if (r->cpu.cpu < 0 || pid <= 0 || sched_getaffinity(pid, sizeof s->before, &s->before))
		return;
	CPU_ZERO(&one);
	CPU_SET((size_t)r->cpu.cpu, &one);
	s->pinned = sched_setaffinity(pid, sizeof one, &one) == 0;
}

static void bridge_unpin(struct run *r, struct baseline_session *s)
{
	if (s->pinned)
		(void)sched_setaffinity(r->s->bridge.child.pid, sizeof s->before, &s->before);
	s->pinned = false;
}

/* bench_open + calibration. 0; 1 when torch.compile failed (*failed: {"code", "error"}); -1
 * with the run's reason set otherwise. */
static int baseline_open(struct run *r, const char *mode, struct baseline_session *s,
			 json_t **failed)
{
	struct loop_fail f = {0};
	struct ca_diag d = {{0}};
	char code[64];
	json_t *req, *ans = NULL;
	int rc;

	memset(s, 0, sizeof *s);
	s->compile_s = -1;
	*failed = NULL;
	req = json_pack("{s:s, s:I, s:s, s:s}", "task_dir", r->task.dir, "model_seed",
			(json_int_t)r->timing_model_seed, "mode", mode, "module_mode",
			run_module_mode(r));
	rc = bridge_call(&r->s->bridge, "bench_open", req, 1800.0, &ans, code, sizeof code, &d);
	json_decref(req);
	if (rc && strcmp(code, "baseline.compile_failed") == 0) {
		*failed = json_pack("{s:s, s:s}", "code", code, "error", d.msg);
		return 1;
	}
	if (rc) {
		set_reason(r, code[0] && reason_class_of(code) == REASON_TASK ? code : "env.bridge",
			   "torch bridge (bench_open %s): %s", mode, d.msg);
		return -1;
	}
	s->open = true;
	if (json_is_number(json_object_get(ans, "compile_seconds")))
		s->compile_s = json_number_value(json_object_get(ans, "compile_seconds"));
	s->settings = json_incref(json_object_get(ans, "settings"));
	json_decref(ans);
	s->b.r = r;
	bridge_pin(r, s);
	s->L.ops = (struct loop_ops){.ctx = &s->b, .prepare = bench_prepare, .send = bench_send,
				     .wait = bench_wait, .trusted = true,
				     .hold_s = 1e-6 * r->o->protocol.timing.hold_python_us};
	s->L.dev = &r->data.dev;
	rc = loop_calibrate(&s->L, LOOP_CALIBRATION_RUNS, &f);
	if (rc && strcmp(mode, "compile") == 0 && reason_class_of(f.code) != REASON_ENV) {
		*failed = json_pack("{s:s, s:s}", "code", "baseline.compile_failed", "error",
				    f.message);
		return 1;
	}
	if (rc) {
		set_reason(r, reason_class_of(f.code) == REASON_TASK ? f.code : "env.bridge",
			   "calibrating the %s baseline: %s", mode, f.message);
		return -1;
	}
	return 0;
}

static void baseline_close(struct run *r, struct baseline_session *s)
{
	struct ca_diag d = {{0}};
	char code[64];
	json_t *req = json_object(), *ans = NULL;
	if (s->open)
		(void)bridge_call(&r->s->bridge, "bench_close", req, 60.0, &ans, code, sizeof code,
				  &d);
	json_decref(req);
	json_decref(ans);
	json_decref(s->settings);
	s->settings = NULL;
	s->open = false;
	bridge_unpin(r, s);
}

/* One baseline (eager or compile) timed by the loop; the summary or {"error", "code"}. */
static json_t *time_baseline(struct run *r, const char *mode, double *compile_s)
{
	struct baseline_session s;
	struct loop_result res;
	struct loop_fail f = {0};
	json_t *out = NULL;
	int rc;

	*compile_s = -1;
	if (timing_fill_rotation(r))
		return NULL;
	rc = baseline_open(r, mode, &s, &out);
	if (rc) {
		baseline_close(r, &s);
		return rc > 0 ? out : NULL;
	}
	*compile_s = s.compile_s;
	memset(&res, 0, sizeof res);
	rc = loop_time(&s.L, &r->o->protocol.timing, r->data.ninputs, r->loop_seed ^ 0x5bd1e995u,
		       &res, &f);
	if (rc && strcmp(mode, "compile") == 0 && reason_class_of(f.code) != REASON_ENV) {
		out = json_pack("{s:s, s:s}", "code", "baseline.compile_failed", "error", f.message);
	} else if (rc) {
		set_reason(r, reason_class_of(f.code) == REASON_TASK ? f.code : "env.bridge",
			   "timing the %s baseline: %s", mode, f.message);
	} else {
		out = timing_summary(&res, &s.L.cal, r->data.flush_bytes);
		if (s.compile_s >= 0)
			json_object_set_new(out, "compile_seconds", json_real(s.compile_s));
		/* what makes the number comparable: the bridge's settings, the GPU as measured */
		if (json_is_object(s.settings))
			json_object_set(out, "settings", s.settings);
		if (r->env_gpu)
			json_object_set(out, "gpu", r->env_gpu);
	}
	loop_result_free(&res);
	baseline_close(r, &s);
	return out;
}

int step_baselines(struct run *r, json_t **baselines, bool *cached)
{
	char task[sizeof r->task.hash + 8];
	struct baseline_key key = run_baseline_key(r, task, sizeof task);
	struct ca_diag d = {{0}};
	double t0 = ca_now(), compile_s;
	json_t *eager, *comp;

	*cached = false;
	*baselines = r->cached_baselines;
	r->cached_baselines = NULL;
	if (*baselines) {
		*cached = true;
		return 0;
	}
	ca_log_info("measuring eager and torch.compile baselines (once per task and GPU)");
	if (!(eager = time_baseline(r, "eager", &compile_s)))
		return -1;
	if (!(comp = time_baseline(r, "compile", &compile_s))) {
		json_decref(eager);
		return -1;
	}
	*baselines = json_pack("{s:o, s:o}", "eager", eager, "compile", comp);
	note_seconds(r, "baselines", t0);
	if (!json_object_get(comp, "code") && r->s->cache_open &&
	    baseline_cache_put(&r->s->cache, &key, *baselines, &d))
		ca_log_warn("cannot store baselines: %s", d.msg);
	return 0;
}

/* ---- decisions at the thresholds ------------------------------------------------------------- */

/* The median's standard error of a timing summary: rse x median (the side that decided). */
static double summary_se(const json_t *t)
{
	const json_t *rse = json_object_get(t, "rse"), *m = json_object_get(t, "median_ms");
	if (!json_is_number(rse) || !json_is_number(m))
		return -1.0;
	return json_number_value(rse) * json_number_value(m);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The rounds' protocol: a short loop each, no special sets (the candidate met them already),
 * spot checks as before. */
static struct timing_protocol round_protocol(const struct timing_protocol *p)
{
	struct timing_protocol q = *p;
	q.min_samples = q.max_samples = DECIDE_CALLS;
	q.budget_s = 1.0;
	q.warmup_min_calls = 2;
	q.warmup_min_ms = 0;
	q.checks = 0;
	return q;
}

/* Interleaved rounds against one baseline: DECIDE_ROUNDS x (the candidate's loop, the
 * baseline's loop), each DECIDE_CALLS calls, alternating, so that slow drifts of the machine fall
 * on both. The decision is the median of the rounds' speed-ups; the interval their range. 0, or
 * -1 with the run's reason set (a failed check in a round fails the candidate). */
static int interleave(struct run *r, const char *mode, json_t *decision)
{
	struct baseline_session s;
	struct timing_protocol q = round_protocol(&r->o->protocol.timing);
	double cand[DECIDE_ROUNDS], base[DECIDE_ROUNDS], ratio[DECIDE_ROUNDS], sorted[DECIDE_ROUNDS];
	json_t *failed = NULL;
	bool audit = r->loop.ops.can_audit;
	int rc = 0, k;

	rc = baseline_open(r, mode, &s, &failed);
	if (rc) {
		json_decref(failed);
		baseline_close(r, &s);
		return rc > 0 ? 0 : -1; /* a compile that fails now: the first figures stand */
	}
	r->loop.ops.can_audit = false; /* the audit was made; the rounds time plain calls */
	for (k = 0; k < DECIDE_ROUNDS && rc == 0; k++) {
		struct loop_result rc_res, rb_res;
		struct loop_fail f = {0};
		memset(&rc_res, 0, sizeof rc_res);
		memset(&rb_res, 0, sizeof rb_res);
		uint64_t seed = r->loop_seed ^ (0x9e3779b97f4a7c15u * (uint64_t)(k + 1));
		rc = loop_time(&r->loop, &q, r->data.ninputs, seed, &rc_res, &f);
		if (rc == CA_ERR_REJECTED && strcmp(f.code, "hack.timer_tampering") == 0) {
			/* Claims far below the outside bound in a short round: the round's time is
			 * the bound (held), as for any claim below it; rejection stays the main
			 * loop's verdict, where the sample is large. */
			rc_res.verdict.median_ms = rc_res.verdict.outside_ms - rc_res.verdict.tol_ms;
			rc = 0;
		}
		if (rc) {
			reason_from_fail(r, &f);
		} else {
			rc = loop_time(&s.L, &q, r->data.ninputs, seed ^ 0xc2b2ae3d27d4eb4fu,
				       &rb_res, &f);
			if (rc)
				ca_log_warn("interleaved %s baseline round: %s", mode, f.message);
		}
		cand[k] = rc_res.verdict.median_ms;
		base[k] = rb_res.verdict.median_ms;
		loop_result_free(&rc_res);
		loop_result_free(&rb_res);
	}
	r->loop.ops.can_audit = audit;
	baseline_close(r, &s);
	if (rc)
		return strcmp(reason_code(r), "ok") == 0 ? 0 : -1; /* a baseline round failed: keep
								       the first figures */
	for (k = 0; k < DECIDE_ROUNDS; k++)
		sorted[k] = ratio[k] = cand[k] > 0 ? base[k] / cand[k] : 0.0;
	qsort(sorted, DECIDE_ROUNDS, sizeof sorted[0], cmp_double);
	json_t *rounds = json_array(), *cm = json_array(), *bm = json_array();
	for (k = 0; k < DECIDE_ROUNDS; k++) {
		json_array_append_new(rounds, json_real(ratio[k]));
		json_array_append_new(cm, json_real(cand[k]));
		json_array_append_new(bm, json_real(base[k]));
	}
	json_object_set_new(
		decision, "interleaved",
		json_pack("{s:i, s:i, s:f, s:[f, f], s:o, s:o, s:o}", "rounds", DECIDE_ROUNDS,
			  "calls_per_round", DECIDE_CALLS, "speedup", sorted[DECIDE_ROUNDS / 2],
			  "interval", sorted[0], sorted[DECIDE_ROUNDS - 1], "speedups", rounds,
			  "candidate_ms", cm, "baseline_ms", bm));
	return 0;
}

int step_decide(struct run *r, json_t *timing)
{
	static const char *const modes[] = {"eager", "compile"};
	const json_t *cand = json_object_get(timing, "candidate");
	json_t *decisions = json_object();
	double t_c = json_number_value(json_object_get(cand, "median_ms"));
	double se_c = summary_se(cand);
	int rc = 0;

	json_object_set_new(timing, "decision", decisions);
	for (size_t m = 0; m < 2 && rc == 0; m++) {
		const json_t *base = json_object_get(timing, modes[m]);
		double t_b = json_number_value(json_object_get(base, "median_ms"));
		struct reward_interval iv;
		json_t *decision;
		bool run;
		if (!json_is_number(json_object_get(base, "median_ms")) ||
		    reward_interval(t_c, se_c, t_b, summary_se(base), &iv) != 0)
			continue;
		run = r->o->interleave == EVAL_INTERLEAVE_ALWAYS ||
		      (r->o->interleave == EVAL_INTERLEAVE_AUTO && iv.near);
		decision = json_pack("{s:f, s:[f, f], s:f, s:b, s:b}", "speedup", iv.speedup,
				     "interval", iv.lo, iv.hi, "threshold", CA_REWARD_THRESHOLD,
				     "near_threshold", iv.near, "retimed", run);
		json_object_set_new(decisions, modes[m], decision);
		if (!run)
			continue;
		ca_log_info("the speed-up against %s is %.3fx (%.3f..%.3f)%s: re-timing the "
			    "candidate and the baseline interleaved", modes[m], iv.speedup, iv.lo,
			    iv.hi, iv.near ? ", which holds the 5% threshold" : "");
		rc = interleave(r, modes[m], decision);
	}
	return rc;
}
