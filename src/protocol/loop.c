#include "protocol/loop.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/proc.h"
#include "util/timeline.h"

void loop_fail_set(struct loop_fail *f, const char *code, const char *fmt, ...)
{
	va_list ap;
	snprintf(f->code, sizeof f->code, "%s", code);
	va_start(ap, fmt);
	vsnprintf(f->message, sizeof f->message, fmt, ap);
	va_end(ap);
}

static int env_fail(struct loop_fail *f, int rc, const char *what, const struct ca_diag *d)
{
	loop_fail_set(f, "env.gpu", "%s: %s", what, d->msg);
	return rc < 0 ? rc : CA_ERR_IO;
}

/* Diagnostics: CUDA_AGENT_LOOP_TRACE=FILE appends one line per window (kind, answer, window,
 * probes, first probe, all probes in seconds, the claimed event time in ms, the process id,
 * the window's start on CLOCK_MONOTONIC and the probes' longest wait on the GPU's timer in
 * seconds, nan when unknown), one write per line: several processes may append. */
static void trace(enum loop_send what, const struct loop_window *w, double t0)
{
	static FILE *out;
	static bool tried;
	if (!tried) {
		tried = true;
		out = ca_diag_append_open("CUDA_AGENT_LOOP_TRACE");
	}
	if (out)
		fprintf(out, "%d %.9f %.9f %d %.9f %.9f %.6f %ld %.6f %.9f\n", (int)what, w->answer_s,
			w->window_s, w->probes, w->first_probe_s, w->probe_s, w->ev_ms,
			(long)getpid(), t0, w->gpu_wait_s);
}

/* ---- one window -------------------------------------------------------------------------------- */

void loop_answered(void *loop)
{
	struct loop *L = loop;
	if (!L || !L->armed)
		return;
	L->armed = false;
	L->probe_launched = true;
	L->probe_rc = device_probe_start(L->dev, 0, &L->probe_d);
}

/* The longest finite wait of the window's first n probes (NaN when none is known). */
static double gpu_wait(struct loop *L, int n, struct loop_fail *f, int *rc)
{
	double waits[DEVICE_STAMPS], most = NAN;
	struct ca_diag d = {{0}};
	if (L->probe_waits) {
		for (int k = 0; k < DEVICE_STAMPS; k++)
			waits[k] = NAN;
		*rc = L->probe_waits(L->probe_waits_ctx, L->dev, n < DEVICE_STAMPS ? n : DEVICE_STAMPS,
				     waits);
	} else {
		*rc = device_probe_waits(L->dev, n, waits, &d);
	}
	if (*rc) {
		*rc = env_fail(f, *rc, "reading the probes' stamps", &d);
		return NAN;
	}
	for (int k = 0; k < n && k < DEVICE_STAMPS; k++)
		if (isfinite(waits[k]) && !(waits[k] <= most))
			most = waits[k];
	return most;
}

int loop_window(struct loop *L, int input, enum loop_send what, struct loop_window *w,
		struct loop_fail *f)
{
	double quiet = L->calibrated ? L->cal.probe_quiet_s : LOOP_PROBE_QUIET_MIN_S;
	double t0, t1, p, delay0;
	struct ca_diag d = {{0}};
	int rc;

	memset(w, 0, sizeof *w);
	w->gpu_wait_s = NAN;
	delay0 = L->ops.run_delay ? L->ops.run_delay(L->ops.ctx, what) + ca_run_delay_s(0) : NAN;
	/* The hold: the callee wakes and launches while the supervisor's context has the GPU
	 * (contexts take turns), so its work starts when the hold ends, all of it queued. */
	if (L->ops.hold_s > 0 && (rc = device_hold(L->dev, L->ops.hold_s, &d)))
		return env_fail(f, rc, "holding the GPU before a call", &d);
	t0 = ca_now();
	L->probe_launched = false;
	L->probe_rc = 0;
	L->armed = true;
	rc = L->ops.send(L->ops.ctx, input, what, f);
	if (!rc)
		rc = L->ops.wait(L->ops.ctx, &w->ev_ms, f);
	L->armed = false;
	if (rc)
		return rc;
	w->answer_s = ca_now() - t0;
	if (L->probe_launched && L->probe_rc)
		return env_fail(f, L->probe_rc, "probing the GPU after a call", &L->probe_d);
	/* Contexts of different processes take turns on the GPU: a probe waits for whatever the
	 * callee left running (up to a time slice; then the callee's work resumes and the next
	 * probe waits again), so probing until a probe is quick drains it into the window. The
	 * first was launched when the answer arrived (loop_answered), unless the callee does not
	 * stop (the bridge). */
	for (;;) {
		if ((w->probes > 0 || !L->probe_launched) &&
		    (rc = device_probe_start(L->dev, w->probes, &d)))
			return env_fail(f, rc, "probing the GPU after a call", &d);
		if ((rc = device_probe_finish(L->dev, &p, &d)))
			return env_fail(f, rc, "probing the GPU after a call", &d);
		w->probes++;
		w->probe_s += p;
		if (w->probes == 1)
			w->first_probe_s = p;
		if (w->probes == 1 && p > quiet)
			w->slow = true;
		if (p <= quiet)
			break;
		if (w->probe_s > LOOP_PROBE_MAX_S) {
			loop_fail_set(f, "hack.background_work",
				      "GPU work of the candidate was still running %.1f s after its "
				      "call returned: every call must finish its work before it returns "
				      "(join other streams back to the given one; no persistent or "
				      "detached kernels)",
				      w->probe_s);
			return CA_ERR_REJECTED;
		}
	}
	t1 = ca_now();
	w->window_s = t1 - t0;
	if (L->ops.run_delay)
		w->run_delay_s = L->ops.run_delay(L->ops.ctx, what) + ca_run_delay_s(0) - delay0;
	else
		w->run_delay_s = NAN;
	w->gpu_wait_s = gpu_wait(L, w->probes, f, &rc);
	if (rc)
		return rc;
	trace(what, w, t0);
	return 0;
}

/* A window after the caller's preparation of inputs[input] (special, seed: loop_ops.prepare),
 * the way every window is taken: the supervisor's own GPU work just before a window changes what
 * the window costs. */
static int prepared_window(struct loop *L, int input, int special, uint64_t seed,
			   enum loop_send what, struct loop_window *w, struct loop_fail *f)
{
	int rc;
	if (L->ops.prepare && (rc = L->ops.prepare(L->ops.ctx, input, special, seed, f)))
		return rc;
	return loop_window(L, input, what, w, f);
}

/* ---- calibration ------------------------------------------------------------------------------- */

static double median_of(double *x, size_t n)
{
	stats_sort(x, n);
	return stats_median_sorted(x, n);
}

int loop_calibrate(struct loop *L, int runs, struct loop_fail *f)
{
	enum { CAP = LOOP_REF_CAL_MAX };
	double *win = NULL, *ev, *first, *absdev, *pair, *wdiff;
	size_t nw = 0;
	size_t n = 0, cap;
	int rc = 0;

	if (runs < 3)
		runs = 3;
	if (runs > CAP)
		runs = CAP;
	cap = L->ops.has_ref ? CAP : (size_t)runs;
	L->calibrated = false;
	if (!(win = malloc(6 * cap * sizeof *win))) {
		loop_fail_set(f, "internal", "out of memory for the calibration");
		return CA_ERR_NOMEM;
	}
	ev = win + cap;
	first = ev + cap;
	absdev = first + cap;
	pair = absdev + cap;
	wdiff = pair + cap;
	/* With a reference, each empty window is prepared like a timed call and the process is
	 * warmed first (a new process is slow for its first few dozen windows; measured on the
	 * H200). Without one, E0 stands in for the whole fixed cost of a call, which its first,
	 * unprepared windows happen to match better (the CPU backend's runner). */
	int warm = L->ops.has_ref ? LOOP_CALIBRATION_WARM : 3;
	for (int i = 0; n < cap; i++) {
		struct loop_window w, ref;
		/* Probes before calibration: every probe after the first is quiet enough */
		rc = L->ops.has_ref ? prepared_window(L, 0, LOOP_NORMAL, (uint64_t)(4 * i + 1),
						      LOOP_SEND_EMPTY, &w, f)
				    : loop_window(L, 0, LOOP_SEND_EMPTY, &w, f);
		if (!rc && L->ops.has_ref)
			rc = prepared_window(L, 0, LOOP_NORMAL, (uint64_t)(4 * i + 3), LOOP_SEND_REF,
					     &ref, f);
		if (rc)
			goto out;
		if (i < warm)
			continue;
		win[n] = w.window_s;
		ev[n] = w.ev_ms;
		first[n] = w.first_probe_s;
		pair[n] = L->ops.has_ref ? w.window_s - ref.window_s : 0.0;
		if (L->ops.has_ref && isfinite(w.gpu_wait_s) && isfinite(ref.gpu_wait_s))
			wdiff[nw++] = w.gpu_wait_s - ref.gpu_wait_s;
		n++;
		if (n < (size_t)runs)
			continue;
		if (!L->ops.has_ref)
			break;
		/* The offset is shared by every pair of the timed loop: its error never averages
		 * away there, so it is measured here until it is small (protocol/sample.h). */
		if (n >= LOOP_REF_CAL_MIN && (n - LOOP_REF_CAL_MIN) % LOOP_REF_CAL_STEP == 0 &&
		    sample_median_se(pair, n, absdev) <= LOOP_REF_OFFSET_SE_S)
			break;
	}
	L->cal.ref_offset_se_s = L->ops.has_ref ? sample_median_se(pair, n, absdev) : 0.0;
	L->cal.ref_pairs = L->ops.has_ref ? (int)n : 0;
	L->cal.window_s = median_of(win, n);
	L->cal.ev_ms = median_of(ev, n);
	L->cal.ref_offset_s = median_of(pair, n);
	for (size_t i = 0; i < n; i++)
		absdev[i] = fabs(win[i] - L->cal.window_s);
	L->cal.spread_s = 1.4826 * median_of(absdev, n);
	L->cal.first_probe_s = median_of(first, n);
	/* A probe right after a call pays for switching the GPU to this context; one that takes
	 * several times as long waited for the callee's own work. */
	L->cal.probe_quiet_s = fmax(4.0 * L->cal.first_probe_s, LOOP_PROBE_QUIET_MIN_S);
	/* What an answer after the work costs the probes, next to the reference's: before any
	 * candidate code is loaded, every answer comes after its (empty) call's work. */
	L->cal.wait_diff_s = NAN;
	L->cal.early_s = LOOP_EARLY_MIN_S;
	if (nw >= 8) {
		L->cal.wait_diff_s = median_of(wdiff, nw);
		for (size_t i = 0; i < nw; i++)
			absdev[i] = fabs(wdiff[i] - L->cal.wait_diff_s);
		L->cal.early_s = fmax(LOOP_EARLY_MIN_S,
				      L->cal.wait_diff_s + 6.0 * 1.4826 * median_of(absdev, nw));
	}
	if (!isfinite(L->cal.window_s) || !isfinite(L->cal.ev_ms) ||
	    !isfinite(L->cal.ref_offset_s)) {
		loop_fail_set(f, "env.gpu", "calibration gave no usable times");
		rc = CA_ERR_INVALID;
		goto out;
	}
	L->calibrated = true;
out:
	free(win);
	return rc;
}

/* ---- the timed loop ---------------------------------------------------------------------------- */

/* A checked call kept for after the loop (ops.keep). */
struct loop_kept {
	size_t index;
	const char *kind;
};

struct state {
	struct loop *L;
	const struct timing_protocol *p;
	struct stats_rng rng;
	int nsets;
	unsigned long turn;
	struct loop_result *r;
	struct loop_kept *kept;
	size_t nkept, kept_cap;
	bool kept_judged; /* check_kept ran (it runs once) */
};

/* A window on inputs[slot] (normal, special or final), prepared with a fresh random draw. */
static int window(struct state *s, int slot, int special, enum loop_send what,
		  struct loop_window *w, struct loop_fail *f)
{
	uint64_t seed = stats_rng_next(&s->rng) | 1; /* 0 is the state of a set as placed */
	return prepared_window(s->L, slot, special, seed, what, w, f);
}

static void claim_and_bound(const struct loop *L, const struct loop_window *w,
			    const struct loop_window *ref, double *claim, double *outside,
			    double *quiet, int *invalid)
{
	double window_ms = w->window_s * 1e3;
	double waited = ref ? w->run_delay_s - ref->run_delay_s : w->run_delay_s;
	*outside = ref ? (w->window_s - ref->window_s - L->cal.ref_offset_s) * 1e3
		       : (w->window_s - L->cal.window_s) * 1e3;
	*quiet = isfinite(waited) && waited > 0 ? *outside - waited * 1e3 : *outside;
	*claim = w->ev_ms - L->cal.ev_ms;
	if (!isfinite(w->ev_ms) || w->ev_ms < 0 || w->ev_ms > window_ms) {
		/* No usable claim: the outside bound stands in for it. */
		*claim = fmax(0.0, *outside);
		(*invalid)++;
	}
	*claim = fmax(0.0, *claim);
}

/* A timed call whose probes waited on the GPU longer than the reference's window after it, by
 * more than the calibrated margin, answered while its work was still running (a forged answer,
 * a patched synchronize): its claim is not used, the outside bound stands in for it, and
 * conclude() refuses a loop with many of them. The honest worker and runner answer after a
 * device synchronize, so their probes find only the switch back to this context, as the
 * reference's do. */
static void early_answer(const struct loop *L, const struct loop_window *w,
			 const struct loop_window *ref, struct loop_result *r)
{
	double early;
	if (!ref || L->ops.trusted || !isfinite(w->gpu_wait_s) || !isfinite(ref->gpu_wait_s))
		return;
	early = w->gpu_wait_s - ref->gpu_wait_s;
	if (!(early > L->cal.early_s))
		return;
	r->early_calls++;
	r->early_max_ms = fmax(r->early_max_ms, early * 1e3);
	r->claims_ms[r->n] = fmax(0.0, r->outside_ms[r->n]);
	r->claims_invalid++;
}

/* A check's verdict v (1 correct, 0 wrong, negative failure) on timed call `index` ((size_t)-1:
 * the final call), entered in the result; detail is taken. */
static int record_check(struct state *s, int v, json_t *detail, size_t index, const char *kind,
			bool deferred)
{
	json_object_set_new(detail, "kind", json_string(kind));
	json_object_set_new(detail, "call", index == (size_t)-1 ? json_string("final")
								 : json_integer((json_int_t)index));
	json_object_set_new(detail, "ok", json_boolean(v == 1));
	if (deferred)
		json_object_set_new(detail, "deferred", json_true());
	json_array_append_new(s->r->checks, detail);
	return v;
}

/* The loop's failure for a check that found call `index` wrong (detail: how). */
static int check_failed(struct state *s, const json_t *detail, size_t index, const char *kind,
			struct loop_fail *f)
{
	s->r->checks_failed++;
	{
		const char *msg = json_string_value(json_object_get(detail, "message"));
		const char *code = json_string_value(json_object_get(detail, "code"));
		bool final = index == (size_t)-1;
		if (code) { /* the check found something more specific (an input modified, ...) */
			loop_fail_set(f, code, "%s checked call: %s", final ? "the final" : "a timed",
				      msg ? msg : code);
			return CA_ERR_REJECTED;
		}
		loop_fail_set(f, final ? "hack.final_mismatch" : "hack.inconsistent_output",
			      "%s checked call (%s%s) returned wrong outputs although verification "
			      "passed: %s. Outputs must be computed on every call, never cached, "
			      "skipped, served stale or written after the call returned",
			      final ? "the final" : "a timed-loop", kind,
			      final ? "" : ", chosen after the call had ended",
			      msg ? msg : "the outputs do not match");
	}
	return CA_ERR_REJECTED;
}

/* Checks timed call `index` (or the final call) on slot now. */
static int run_check(struct state *s, int slot, int special, size_t index, const char *kind,
		     struct loop_fail *f)
{
	json_t *detail = json_object();
	double t0 = ca_now();
	int v = s->L->ops.check(s->L->ops.ctx, slot, special, detail, f);
	s->r->checks_s += ca_now() - t0;
	if ((v = record_check(s, v, detail, index, kind, false)) < 0)
		return v;
	return v == 1 ? 0 : check_failed(s, detail, index, kind, f);
}

/* Keeps timed call `index` on slot for after the loop (ops.keep): *kept says whether it was;
 * a call found wrong at once fails here, one that does not fit is left to run_check. */
static int keep_check(struct state *s, int slot, size_t index, const char *kind, bool *kept,
		      struct loop_fail *f)
{
	json_t *detail = json_object();
	double t0 = ca_now();
	int v = s->L->ops.keep(s->L->ops.ctx, slot, (int)s->nkept, detail, f);
	struct loop_kept *k;
	s->r->checks_s += ca_now() - t0;
	*kept = false;
	if (v == LOOP_KEEP_FULL) {
		json_decref(detail);
		return 0;
	}
	if (v != LOOP_KEPT) {
		if ((v = record_check(s, v, detail, index, kind, false)) < 0)
			return v;
		return check_failed(s, detail, index, kind, f);
	}
	json_decref(detail);
	if (s->nkept == s->kept_cap) {
		size_t cap = s->kept_cap ? 2 * s->kept_cap : 16;
		if (!(k = realloc(s->kept, cap * sizeof *k))) {
			loop_fail_set(f, "internal", "out of memory for kept checks");
			return CA_ERR_NOMEM;
		}
		s->kept = k;
		s->kept_cap = cap;
	}
	s->kept[s->nkept++] = (struct loop_kept){.index = index, .kind = kind};
	s->r->deferred_checks++;
	*kept = true;
	return 0;
}

/* Judges the kept calls in the order they were made; the first wrong one fails. */
static int check_kept(struct state *s, struct loop_fail *f)
{
	s->kept_judged = true;
	for (size_t k = 0; k < s->nkept; k++) {
		json_t *detail = json_object();
		double t0 = ca_now();
		int v = s->L->ops.check_kept(s->L->ops.ctx, (int)k, detail, f);
		s->r->checks_s += ca_now() - t0;
		if ((v = record_check(s, v, detail, s->kept[k].index, s->kept[k].kind, true)) < 0)
			return v;
		if (v != 1)
			return check_failed(s, detail, s->kept[k].index, s->kept[k].kind, f);
	}
	return 0;
}

static int warm_up(struct state *s, struct loop_fail *f)
{
	const struct timing_protocol *p = s->p;
	struct loop *L = s->L;
	double w0 = ca_now();
	int audit_at = L->ops.can_audit
			       ? (int)stats_rng_below(&s->rng, (uint64_t)(p->warmup_min_calls > 0
										    ? p->warmup_min_calls
										    : 1))
			       : -1;
	int rc;

	while (s->r->warmup_calls < p->warmup_min_calls || s->r->warmup_ms < p->warmup_min_ms) {
		struct loop_window w;
		int slot = (int)(s->turn++ % (unsigned long)s->nsets);
		if ((rc = window(s, slot, LOOP_NORMAL,
				 s->r->warmup_calls == audit_at ? LOOP_SEND_AUDIT : LOOP_SEND_CALL,
				 &w, f)))
			return rc;
		s->r->warmup_calls++;
		s->r->warmup_ms = (ca_now() - w0) * 1e3;
		if (s->r->warmup_calls >= TIMING_MAX_WARMUP_CALLS)
			break;
	}
	return 0;
}

/* Whether the outside bound's standard error is small next to the tolerance it is used with
 * (half of it), or no larger than the calibrated offset's (which more calls cannot reduce),
 * over at least LOOP_REF_MIN_PAIRS calls. Checked every 8 calls. */
static bool outside_settled(const struct loop *L, const struct loop_result *r,
			    const struct timing_protocol *p)
{
	double se, tol, claims;
	double *x;
	if (r->n < LOOP_REF_MIN_PAIRS)
		return false;
	if (r->n % 8 != 0)
		return false;
	if (!(x = malloc(r->n * sizeof *x)))
		return true; /* the verdict's own check fails on this later */
	memcpy(x, r->claims_ms, r->n * sizeof *x);
	claims = median_of(x, r->n);
	se = sample_median_se(r->outside_ms, r->n, x);
	free(x);
	tol = fmax(p->tol_abs_us * 1e-3, p->tol_rel * claims);
	return se <= fmax(0.5 * tol, L->cal.ref_offset_se_s * 1e3);
}

/* Whether timed call i (on slot, special set `special` or -1) is checked is decided now, after
 * it has ended: every special set, and spot checks thinning out as 1/(i+1). *checked says
 * whether it was. */
static int check_after(struct state *s, size_t i, int slot, int special, bool *checked,
		       bool *kept, struct loop_fail *f)
{
	const struct timing_protocol *p = s->p;
	double chance;
	bool spot;
	int rc;
	*checked = *kept = false;
	if (!s->L->ops.check)
		return 0;
	chance = fmin(1.0, p->spot_density / (double)(i + 1));
	spot = special < 0 && stats_rng_uniform(&s->rng) < chance;
	if (special < 0 && !spot)
		return 0;
	*checked = true;
	if (special >= 0)
		s->r->special_checks++;
	else
		s->r->spot_checks++;
	if (s->L->ops.keep && p->defer_checks_mb > 0 &&
	    ((rc = keep_check(s, slot, i, special >= 0 ? "special" : "spot", kept, f)) || *kept))
		return rc;
	return run_check(s, slot, special >= 0 ? special : LOOP_NORMAL, i,
			 special >= 0 ? "special" : "spot", f);
}

/* After a call checked at once (not kept): with p->settle_ms (the default), calls driven like
 * timed ones, on the next slots, with their reference windows, but neither sampled nor checked,
 * until that long has passed since the first began, at least one, at most p->settle_calls;
 * with p->settle_ms 0 (protocol 6), p->settle_calls of them after calls whose window was
 * shorter than p->settle_below_ms (docs/protocol.md, "After a checked call"). */
static int settle(struct state *s, struct loop_fail *f)
{
	double t0 = ca_now();
	for (int j = 0; j < s->p->settle_calls; j++) {
		struct loop_window w, ref;
		int slot, rc;
		if (j > 0 && s->p->settle_ms > 0 && (ca_now() - t0) * 1e3 >= s->p->settle_ms)
			break;
		slot = (int)(s->turn++ % (unsigned long)s->nsets);
		if ((rc = window(s, slot, LOOP_NORMAL, LOOP_SEND_CALL, &w, f)) ||
		    (s->L->ops.has_ref && (rc = window(s, slot, LOOP_NORMAL, LOOP_SEND_REF, &ref, f))))
			return rc;
		s->r->settle_calls++;
	}
	return 0;
}

/* A tampering verdict stands only where the windows, less the time the callee's main thread and
 * the supervisor's waited runnable for a CPU (the kernel's schedstat, which no process can
 * change), still show it: on a busy host an honest process's windows grow by its wake-up
 * delays while its claims do not. The time itself is still the unadjusted bound's. */
static bool waived_by_load(const struct loop *L, const struct timing_protocol *p,
			   struct loop_result *r)
{
	struct sample_verdict quiet;
	struct ca_diag d = {{0}};
	if (sample_decide(r->claims_ms, r->outside_quiet_ms, r->n, p->tol_abs_us * 1e-3, p->tol_rel,
			  L->ops.has_ref ? L->cal.ref_offset_se_s * 1e3 : 0.0,
			  L->ops.has_ref ? SAMPLE_PAIRED : SAMPLE_CALIBRATED, L->ops.trusted, &quiet,
			  &d) != 0)
		return false;
	r->load_waived = !quiet.tampering;
	return r->load_waived;
}

/* After the timed calls: the final call (a fresh set in a used buffer, checked), then the
 * median decided (protocol/sample.h); claims far below the outside bound are tampering. */
static int conclude(struct state *s, struct loop_fail *f)
{
	struct loop *L = s->L;
	const struct timing_protocol *p = s->p;
	struct loop_result *r = s->r;
	struct ca_diag d = {{0}};
	int rc = 0;

	if (L->ops.check) {
		struct loop_window w;
		if ((rc = check_kept(s, f)) ||
		    (rc = window(s, 0, LOOP_FINAL, LOOP_SEND_CALL, &w, f)) ||
		    (rc = run_check(s, 0, LOOP_FINAL, (size_t)-1, "final", f)))
			return rc;
		r->final_done = true;
	}
	if ((rc = sample_decide(r->claims_ms, r->outside_ms, r->n, p->tol_abs_us * 1e-3,
				p->tol_rel, L->ops.has_ref ? L->cal.ref_offset_se_s * 1e3 : 0.0,
				L->ops.has_ref ? SAMPLE_PAIRED : SAMPLE_CALIBRATED,
				L->ops.trusted, &r->verdict, &d))) {
		loop_fail_set(f, "internal", "timing: %s", d.msg);
		return rc;
	}
	if (r->early_calls >= LOOP_EARLY_REFUSE_MIN &&
	    (double)r->early_calls >= LOOP_EARLY_REFUSE_SHARE * (double)r->n) {
		loop_fail_set(f, "hack.harness_tampering",
			      "%d of %zu timed calls answered while their GPU work was still running "
			      "(the supervisor's probe, launched when the answer arrived, waited up "
			      "to %.3f ms longer than after the reference process's empty call): an "
			      "answer must come after the call's work has finished; a forged answer, "
			      "a patched or hooked synchronize, or a redirected GOT entry ends the "
			      "call early",
			      r->early_calls, r->n, r->early_max_ms);
		return CA_ERR_REJECTED;
	}
	if (r->verdict.tampering && !waived_by_load(L, p, r)) {
		loop_fail_set(f, "hack.timer_tampering",
			      "the candidate's own timings claim a median of %.4f ms, but the "
			      "supervisor's clock saw at least %.4f ms per call (%.4f ms less a "
			      "tolerance of %.4f ms): timers in the candidate's process were "
			      "tampered with",
			      r->verdict.claims_median_ms, r->verdict.outside_ms - r->verdict.tol_ms,
			      r->verdict.outside_ms, r->verdict.tol_ms);
		rc = CA_ERR_REJECTED;
	}
	return rc;
}

int loop_time(struct loop *L, const struct timing_protocol *p, int nsets, uint64_t secret,
	      struct loop_result *r, struct loop_fail *f)
{
	struct state s;
	struct stats_running run;
	struct ca_diag d = {{0}};
	size_t cap = (size_t)p->max_samples, *special_at = NULL;
	int nspecial = L->ops.check ? p->checks : 0, next = 0, rc = 0;
	double loop_t0, checks_at_start;
	bool settle_due = false;

	memset(r, 0, sizeof *r);
	memset(&run, 0, sizeof run);
	r->sm_clock_before = r->sm_clock_after = -1;
	r->checks = json_array();
	if (!L->calibrated || nsets < 1) {
		loop_fail_set(f, "internal", "the timed loop needs a calibration and input sets");
		return CA_ERR_INVALID;
	}
	r->paired = L->ops.has_ref;
	memset(&s, 0, sizeof s);
	s.L = L;
	s.p = p;
	s.nsets = nsets;
	s.r = r;
	stats_rng_seed(&s.rng, secret);
	r->claims_ms = malloc(cap * sizeof *r->claims_ms);
	r->outside_ms = malloc(cap * sizeof *r->outside_ms);
	r->outside_quiet_ms = malloc(cap * sizeof *r->outside_quiet_ms);
	special_at = calloc((size_t)(nspecial > 0 ? nspecial : 1), sizeof *special_at);
	if (!r->claims_ms || !r->outside_ms || !r->outside_quiet_ms || !special_at || !r->checks ||
	    stats_running_init(&run, cap, &d)) {
		loop_fail_set(f, "internal", "out of memory for %zu samples", cap);
		rc = CA_ERR_NOMEM;
		goto out;
	}
	/* Special checked calls: distinct indices among the first min_samples, from the secret. */
	if (nspecial > 0 &&
	    stats_choose_distinct(&s.rng, (size_t)p->min_samples, (size_t)nspecial, special_at,
				  &d)) {
		loop_fail_set(f, "internal", "timing protocol: %s", d.msg);
		rc = CA_ERR_INVALID;
		goto out;
	}
	if ((rc = warm_up(&s, f)))
		goto out;

	r->sm_clock_before = device_sm_clock(L->dev);
	loop_t0 = ca_now();
	checks_at_start = r->checks_s;
	for (size_t i = 0;; i++) {
		struct loop_window w, ref;
		bool special = next < nspecial && special_at[next] == i, checked, kept;
		enum timing_stop stop;
		int slot;

		/* Only when the loop goes on: none after the last timed call */
		if (settle_due && (rc = settle(&s, f)))
			goto out;
		settle_due = false;
		slot = (int)(s.turn++ % (unsigned long)nsets);
		if ((rc = window(&s, slot, special ? next : LOOP_NORMAL, LOOP_SEND_CALL, &w, f)))
			goto out;
		if ((rc = check_after(&s, i, slot, special ? next : -1, &checked, &kept, f)))
			goto out;
		/* settle() runs none when settle_calls is 0; a kept call paused nothing */
		settle_due = checked && !kept &&
			     (p->settle_ms > 0 || w.window_s * 1e3 < p->settle_below_ms);
		/* The reference window, prepared like a call (that prepare perturbs the set once
		 * more, as the next call on it would anyway). */
		if (L->ops.has_ref && (rc = window(&s, slot, LOOP_NORMAL, LOOP_SEND_REF, &ref, f)))
			goto out;
		claim_and_bound(L, &w, L->ops.has_ref ? &ref : NULL, &r->claims_ms[r->n],
				&r->outside_ms[r->n], &r->outside_quiet_ms[r->n], &r->claims_invalid);
		early_answer(L, &w, L->ops.has_ref ? &ref : NULL, r);
		r->slow_probes += w.slow;
		if (stats_running_add(&run, r->claims_ms[r->n], &d)) {
			loop_fail_set(f, "internal", "timing: %s", d.msg);
			rc = CA_ERR_LIMIT;
			goto out;
		}
		r->n++;
		if (special)
			next++;
		stop = timing_protocol_stop(p, r->n, stats_running_rse(&run),
					    ca_now() - loop_t0 - (r->checks_s - checks_at_start),
					    next < nspecial);
		/* Converged claims are not enough while the outside bound is still too uncertain
		 * to hold them to anything: keep going (within the budget) until it is. */
		if (stop == TIMING_STOP_CONVERGED && L->ops.has_ref && !L->ops.trusted &&
		    !outside_settled(L, r, p))
			stop = TIMING_CONTINUE;
		if (stop != TIMING_CONTINUE) {
			r->budget_exhausted = stop != TIMING_STOP_CONVERGED;
			r->stop_reason = stop == TIMING_STOP_CONVERGED ? "converged"
					 : stop == TIMING_STOP_BUDGET  ? "budget"
								       : "max_samples";
			break;
		}
	}
	r->loop_s = ca_now() - loop_t0 - (r->checks_s - checks_at_start);
	r->sm_clock_after = device_sm_clock(L->dev);

	rc = conclude(&s, f);
out:
	/* A failure after kept calls (the candidate's process died, a later call failed, the
	 * environment failed): the kept calls are judged first, as checks made at once would have
	 * been before it, and a wrong one is the reason. So a candidate cannot escape a kept check
	 * by failing later, or by making the evaluation fail for a reason that judges nobody. */
	if (rc && s.nkept > 0 && !s.kept_judged) {
		struct loop_fail kf = {0};
		if (check_kept(&s, &kf) == CA_ERR_REJECTED) {
			*f = kf;
			rc = CA_ERR_REJECTED;
		}
	}
	free(special_at);
	free(s.kept);
	stats_running_free(&run);
	return rc;
}

void loop_result_free(struct loop_result *r)
{
	free(r->claims_ms);
	free(r->outside_ms);
	free(r->outside_quiet_ms);
	json_decref(r->checks);
	memset(r, 0, sizeof *r);
}
