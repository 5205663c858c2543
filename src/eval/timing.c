/* timing: the candidate's timed loop, its profile, and the baselines, all through the one loop
 * of src/protocol/loop.c (docs/protocol.md, "The timed loop"). The baselines are the same loop
 * with the bridge as callee: the same preparation of the same input sets in the same slots, the
 * same windows, the same rule for the median. */
#include <math.h>
#include <string.h>

#include "eval/run.h"
#include "protocol/wire.h"
#include "store/baseline_cache.h"
#include "util/clock.h"
#include "util/log.h"

/* The timing sets: the rotation sets into inputs[0..R-1] and the timing model's state. */
static int fill_rotation(struct run *r)
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

	if (fill_rotation(r))
		return -1;
	if (cand_proc_command(&r->proc, WIRE_CMD_SETUP, NULL, &ans, &f)) {
		reason_from_fail(r, &f);
		return -1;
	}
	cand_loop_audit_phase("timing");
	rc = loop_time(&r->loop, &r->o->protocol.timing, r->data.ninputs, r->loop_seed, &r->timing,
		       &f);
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

/* One baseline (eager or compile) timed by the loop; the summary or {"error", "code"}. */
static json_t *time_baseline(struct run *r, const char *mode, double *compile_s)
{
	struct bench b = {.r = r};
	struct loop L;
	struct loop_result res;
	struct loop_fail f = {0};
	json_t *req, *ans = NULL, *out = NULL, *settings = NULL;
	int rc;

	*compile_s = -1;
	if (fill_rotation(r))
		return NULL;
	req = json_pack("{s:s, s:I, s:s}", "task_dir", r->task.dir, "model_seed",
			(json_int_t)r->timing_model_seed, "mode", mode);
	{
		struct ca_diag d = {{0}};
		char code[64];
		rc = bridge_call(&r->s->bridge, "bench_open", req, 1800.0, &ans, code, sizeof code,
				 &d);
		json_decref(req);
		if (rc && strcmp(code, "baseline.compile_failed") == 0)
			return json_pack("{s:s, s:s}", "code", code, "error", d.msg);
		if (rc) {
			set_reason(r, code[0] && strncmp(code, "task.", 5) == 0 ? code : "env.bridge",
				   "torch bridge (bench_open %s): %s", mode, d.msg);
			return NULL;
		}
	}
	if (json_is_number(json_object_get(ans, "compile_seconds")))
		*compile_s = json_number_value(json_object_get(ans, "compile_seconds"));
	settings = json_incref(json_object_get(ans, "settings"));
	json_decref(ans);
	memset(&L, 0, sizeof L);
	L.ops = (struct loop_ops){.ctx = &b, .prepare = bench_prepare, .send = bench_send,
				  .wait = bench_wait, .trusted = true};
	L.dev = &r->data.dev;
	memset(&res, 0, sizeof res);
	rc = loop_calibrate(&L, LOOP_CALIBRATION_RUNS, &f);
	if (!rc)
		rc = loop_time(&L, &r->o->protocol.timing, r->data.ninputs, r->loop_seed ^ 0x5bd1e995u,
			       &res, &f);
	if (rc && strcmp(mode, "compile") == 0 && strncmp(f.code, "env.", 4) != 0) {
		out = json_pack("{s:s, s:s}", "code", "baseline.compile_failed", "error", f.message);
	} else if (rc) {
		set_reason(r, strncmp(f.code, "task.", 5) == 0 ? f.code : "env.bridge",
			   "timing the %s baseline: %s", mode, f.message);
	} else {
		out = timing_summary(&res, &L.cal, r->data.flush_bytes);
		if (*compile_s >= 0)
			json_object_set_new(out, "compile_seconds", json_real(*compile_s));
		/* what makes the number comparable: the bridge's settings, the GPU as measured */
		if (json_is_object(settings))
			json_object_set(out, "settings", settings);
		if (r->env_gpu)
			json_object_set(out, "gpu", r->env_gpu);
	}
	json_decref(settings);
	loop_result_free(&res);
	req = json_object();
	ans = NULL;
	{
		struct ca_diag d = {{0}};
		char code[64];
		(void)bridge_call(&r->s->bridge, "bench_close", req, 60.0, &ans, code, sizeof code, &d);
	}
	json_decref(req);
	json_decref(ans);
	return out;
}

int step_baselines(struct run *r, json_t **baselines, bool *cached)
{
	struct baseline_key key = {r->task.hash, r->s->bridge.gpu_name, r->s->bridge.torch_version,
				   CA_PROTOCOL_VERSION};
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
