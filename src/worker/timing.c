#include "worker/timing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "worker/audit.h"
#include "worker/events.h"
#include "worker/kernels.h"

/* State of one timing run. */
struct loop {
	struct gpu_ctx *g;
	struct candidate *c;
	const struct plan_timing *plan;
	const struct timing_protocol *p;
	struct tensor_set *params, *slots, *outputs;
	int nslots;
	struct stats_rng rng;
	unsigned long turn; /* calls so far (warm-up + timed): the rotation counter */
	int flush_value;
	double overhead_ms;       /* host: empty launch + device synchronize */
	double event_overhead_ms; /* events: start event, empty launch, end event */
};

int timing_prepare_common(struct gpu_ctx *g, struct tensor_set *args, struct tensor_set *params,
			  struct tensor_set *outputs, int flush_value, const char *what,
			  struct worker_error *e)
{
	char where[256];
	cudaError_t err;
	int rc;

	/* Poison first, then flush: the flush writes the poison back to memory and leaves L2 clean. */
	if ((rc = tensor_set_poison(outputs, g, e)))
		return rc;
	err = ca_launch_l2_flush(g->flush_buf, g->flush_bytes, flush_value & 0xff, g->stream);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "flushing L2 before %s", what);
	tensor_set_refresh(args);
	tensor_set_refresh(params);
	tensor_set_refresh(outputs);
	snprintf(where, sizeof where, "preparing %s", what);
	return gpu_sync(g, where, e);
}

int timing_plain_call(struct gpu_ctx *g, struct candidate *c, struct tensor_set *args,
		      struct tensor_set *params, struct tensor_set *outputs, const char *what,
		      struct worker_error *e)
{
	char where[256];
	int ret = candidate_forward(c, args, params, outputs, g->stream);
	int rc;
	snprintf(where, sizeof where, "after ca_forward (%s)", what);
	if ((rc = gpu_sync_after_call(g, where, e)))
		return rc;
	if (ret != 0)
		return werr(e, "abi.forward_failed", false, CA_ERR_REJECTED,
			    "ca_forward returned %d (%s)", ret, what);
	return 0;
}

/* Step 3 of the protocol: start event, host clock, the call, end event, device synchronize,
 * host clock. host_ms has the calibrated overhead removed (floored at 0). */
static int timed_call(struct loop *L, struct tensor_set *args, const char *what,
		      double *event_ms, double *host_ms, struct worker_error *e)
{
	struct gpu_ctx *g = L->g;
	cudaError_t err, rec, sync, last;
	float ms = 0.0f;
	double t0, t1;
	int ret;

	err = cudaEventRecord(g->ev_start, g->stream);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "cudaEventRecord (start of %s)", what);
	t0 = ca_now();
	ret = candidate_forward(L->c, args, L->params, L->outputs, g->stream);
	err = cudaSetDevice(g->device); /* the candidate may have switched devices */
	rec = cudaEventRecord(g->ev_end, g->stream);
	sync = cudaDeviceSynchronize();
	t1 = ca_now();
	last = cudaGetLastError();
	/* A fault of the candidate's kernels surfaces at the synchronize: report that first. */
	if (sync != cudaSuccess)
		err = sync;
	else if (err == cudaSuccess && rec != cudaSuccess)
		err = rec;
	else if (err == cudaSuccess)
		err = last;
	if (err != cudaSuccess)
		return werr_cuda_call(e, err, "after ca_forward (%s)", what);
	if (ret != 0)
		return werr(e, "abi.forward_failed", false, CA_ERR_REJECTED,
			    "ca_forward returned %d (%s)", ret, what);
	err = cudaEventElapsedTime(&ms, g->ev_start, g->ev_end);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "cudaEventElapsedTime (%s)", what);
	*event_ms = fmax(0.0, (double)ms - L->event_overhead_ms);
	*host_ms = fmax(0.0, (t1 - t0) * 1e3 - L->overhead_ms);
	return 0;
}

/* Median host time of an empty launch plus device synchronize, and median event time of an
 * empty launch between the two events (3 untimed first). Both are subtracted from every sample,
 * for the candidate as for the baselines: what remains is the call's own cost, not the fixed
 * cost of launching and observing anything at all. */
static int calibrate(struct loop *L, struct worker_error *e)
{
	double h[TIMING_CALIBRATION_RUNS], ev[TIMING_CALIBRATION_RUNS];
	struct gpu_ctx *g = L->g;
	for (int i = 0; i < 3 + TIMING_CALIBRATION_RUNS; i++) {
		float ms = 0.0f;
		double t0 = ca_now(), t1;
		cudaError_t err = cudaEventRecord(g->ev_start, g->stream);
		if (err == cudaSuccess)
			err = ca_launch_empty(g->stream);
		if (err == cudaSuccess)
			err = cudaEventRecord(g->ev_end, g->stream);
		if (err == cudaSuccess)
			err = cudaDeviceSynchronize();
		t1 = ca_now();
		if (err == cudaSuccess)
			err = cudaEventElapsedTime(&ms, g->ev_start, g->ev_end);
		if (err != cudaSuccess)
			return werr_cuda(e, err, "empty launch (overhead calibration)");
		if (i >= 3) {
			h[i - 3] = (t1 - t0) * 1e3;
			ev[i - 3] = (double)ms;
		}
	}
	stats_sort(h, TIMING_CALIBRATION_RUNS);
	stats_sort(ev, TIMING_CALIBRATION_RUNS);
	L->overhead_ms = stats_median_sorted(h, TIMING_CALIBRATION_RUNS);
	L->event_overhead_ms = stats_median_sorted(ev, TIMING_CALIBRATION_RUNS);
	return 0;
}

/* Step 2: rotate to the slot, perturb (or place a fresh set), flush, poison, synchronize. */
static int prepare(struct loop *L, int slot, const struct safetensors *fresh,
		   const char *fresh_path, const char *what, struct worker_error *e)
{
	struct tensor_set *a = &L->slots[slot];
	int rc = fresh ? tensor_set_upload(a, fresh, fresh_path, e)
		       : tensor_set_perturb(a, L->g, L->p->perturb_scale, &L->rng, e);
	if (rc)
		return rc;
	return timing_prepare_common(L->g, a, L->params, L->outputs, L->flush_value++, what, e);
}

static int open_checked(struct safetensors *st, const char *path, const struct tensor_set *like,
			struct worker_error *e)
{
	struct ca_diag d;
	int rc = safetensors_open(st, path, &d);
	if (rc) {
		memset(st, 0, sizeof *st);
		return werr(e, "worker.bad_input", true, rc, "%s", d.msg);
	}
	return tensor_set_check_file(like, st, path, e);
}

int timing_run(struct gpu_ctx *g, struct gpu_nvml *nvml, struct candidate *c,
	       const struct plan_timing *plan, struct tensor_set *params,
	       struct tensor_set *slots, struct tensor_set *outputs, struct timing_result *r,
	       struct worker_error *e)
{
	const struct timing_protocol *p = &plan->protocol;
	struct loop L;
	struct safetensors *checks = NULL, final;
	struct stats_running run;
	struct stats_summary sum;
	double *events = NULL, *hosts = NULL;
	size_t *check_at = NULL;
	size_t cap = (size_t)p->max_samples;
	int nchecks = plan->num_checks, next = 0;
	double loop_t0;
	char what[128];
	struct ca_diag d;
	int rc = 0;

	memset(r, 0, sizeof *r);
	memset(&run, 0, sizeof run);
	memset(&final, 0, sizeof final);
	r->sm_clock_mhz_before = r->sm_clock_mhz_after = -1;
	r->checks = nchecks;
	r->l2_flush_bytes = g->flush_bytes;
	r->median_ms = r->event_median_ms = r->host_median_ms = r->rse = NAN;
	memset(&L, 0, sizeof L);
	L.g = g;
	L.c = c;
	L.plan = plan;
	L.p = p;
	L.params = params;
	L.slots = slots;
	L.outputs = outputs;
	L.nslots = plan->num_rotation;
	stats_rng_seed(&L.rng, plan->seed);

	/* Inputs first: every file is read and validated before anything is timed. */
	if ((rc = tensor_set_load_file(params, plan->params, e)) ||
	    (rc = candidate_setup(c, g, params, "timing params", e)))
		goto out;
	for (int i = 0; i < L.nslots; i++)
		if ((rc = tensor_set_load_file(&slots[i], plan->rotation[i], e)))
			goto out;
	if (nchecks > 0) {
		checks = calloc((size_t)nchecks, sizeof *checks);
		check_at = calloc((size_t)nchecks, sizeof *check_at);
		if (!checks || !check_at) {
			rc = werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory");
			goto out;
		}
	}
	for (int i = 0; i < nchecks; i++)
		if ((rc = open_checked(&checks[i], plan->checks[i].inputs, &slots[0], e)))
			goto out;
	if ((rc = open_checked(&final, plan->final.inputs, &slots[0], e)))
		goto out;

	/* The checked calls: distinct indices among the first min_samples, from the seed alone. */
	if (nchecks > 0 &&
	    stats_choose_distinct(&L.rng, (size_t)p->min_samples, (size_t)nchecks, check_at, &d)) {
		rc = werr(e, "worker.bad_plan", true, CA_ERR_INVALID, "plan: timing: %s", d.msg);
		goto out;
	}

	events = malloc(cap * sizeof *events);
	hosts = malloc(cap * sizeof *hosts);
	r->samples_ms = malloc(cap * sizeof *r->samples_ms);
	if (!events || !hosts || !r->samples_ms || stats_running_init(&run, cap, &d)) {
		rc = werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory for %zu samples",
			  cap);
		goto out;
	}

	if ((rc = calibrate(&L, e)))
		goto out;
	r->overhead_ms = L.overhead_ms;
	r->event_overhead_ms = L.event_overhead_ms;

	/* Warm-up: prepared exactly like timed calls, until both minima hold: calls, and
	 * milliseconds of warm-up wall time (as the bridge counts them; summing call times instead
	 * would make a 2 us kernel warm up for thousands of calls). */
	{
		double w0 = ca_now();
		/* One of the first warm-up calls is audited (audit.h), chosen from the seed. */
		int audit_at = (int)stats_rng_below(
			&L.rng, (uint64_t)(p->warmup_min_calls > 0 ? p->warmup_min_calls : 1));
		while (r->warmup_calls < p->warmup_min_calls || r->warmup_ms < p->warmup_min_ms) {
			double ev, host;
			int slot = (int)(L.turn++ % (unsigned long)L.nslots);
			snprintf(what, sizeof what, "warm-up call %d", r->warmup_calls + 1);
			if ((rc = prepare(&L, slot, NULL, NULL, what, e)))
				goto out;
			if (r->warmup_calls == audit_at) {
				struct audit_result ar;
				if ((rc = audit_call(g, c, &slots[slot], params, outputs, what,
						     "timing", &ar, e)))
					goto out;
				events_emit("audit", audit_result_json(&ar));
				if ((rc = audit_judge(&ar,
						      tensor_set_bytes(&slots[slot]) +
							      tensor_set_bytes(params),
						      what, e)))
					goto out;
			} else if ((rc = timed_call(&L, &slots[slot], what, &ev, &host, e))) {
				goto out;
			}
			r->warmup_calls++;
			r->warmup_ms = (ca_now() - w0) * 1e3;
		}
	}

	r->sm_clock_mhz_before = gpu_nvml_sm_clock(nvml);
	loop_t0 = ca_now();
	for (size_t i = 0;; i++) {
		double ev, host, sample;
		int slot = (int)(L.turn++ % (unsigned long)L.nslots);
		bool is_check = next < nchecks && check_at[next] == i;
		enum timing_stop stop;

		if (is_check)
			snprintf(what, sizeof what, "timed call %zu, checked call %d", i + 1,
				 next + 1);
		else
			snprintf(what, sizeof what, "timed call %zu", i + 1);
		if ((rc = prepare(&L, slot, is_check ? &checks[next] : NULL,
				  is_check ? plan->checks[next].inputs : NULL, what, e)) ||
		    (rc = timed_call(&L, &slots[slot], what, &ev, &host, e)))
			goto out;
		sample = fmax(ev, host);
		events[r->samples] = ev;
		hosts[r->samples] = host;
		r->samples_ms[r->samples] = sample;
		r->samples++;
		if (stats_running_add(&run, sample, &d)) {
			rc = werr(e, "fault.cuda_error", true, CA_ERR_INVALID,
				  "timing: unusable sample %g ms (%s)", sample, d.msg);
			goto out;
		}
		if (is_check) {
			if ((rc = tensor_set_save(outputs, plan->checks[next].outputs, e)))
				goto out;
			next++;
			r->checks_done = next;
		}
		stop = timing_protocol_stop(p, r->samples, stats_running_rse(&run),
					    ca_now() - loop_t0, next < nchecks);
		if (stop != TIMING_CONTINUE) {
			r->budget_exhausted = stop != TIMING_STOP_CONVERGED;
			r->stop_reason = stop == TIMING_STOP_CONVERGED ? "converged"
					 : stop == TIMING_STOP_BUDGET  ? "budget"
								       : "max_samples";
			break;
		}
	}
	r->loop_s = ca_now() - loop_t0;
	r->sm_clock_mhz_after = gpu_nvml_sm_clock(nvml);

	if ((rc = stats_summarize(r->samples_ms, r->samples, &sum, &d)))
		goto nomem;
	r->median_ms = sum.median;
	r->rse = sum.rse;
	if ((rc = stats_summarize(events, r->samples, &sum, &d)))
		goto nomem;
	r->event_median_ms = sum.median;
	if ((rc = stats_summarize(hosts, r->samples, &sum, &d)))
		goto nomem;
	r->host_median_ms = sum.median;

	/* The final call: a fresh set in a used buffer (slot 0), checked like the others. */
	{
		double ev, host;
		if ((rc = prepare(&L, 0, &final, plan->final.inputs, "final call", e)) ||
		    (rc = timed_call(&L, &slots[0], "final call", &ev, &host, e)) ||
		    (rc = tensor_set_save(outputs, plan->final.outputs, e)))
			goto out;
		r->final_ms = fmax(ev, host);
		r->final_done = true;
	}
	goto out;
nomem:
	rc = werr(e, "worker.oom", true, rc, "%s", d.msg);
out:
	if (checks)
		for (int i = 0; i < nchecks; i++)
			safetensors_close(&checks[i]);
	free(checks);
	safetensors_close(&final);
	free(check_at);
	free(events);
	free(hosts);
	stats_running_free(&run);
	return rc;
}

void timing_result_free(struct timing_result *r)
{
	free(r->samples_ms);
	r->samples_ms = NULL;
	r->samples = 0;
}
