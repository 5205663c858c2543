/* cuda-agent-worker PLAN.json: loads an untrusted candidate library and runs it (verification
 * trials, the shared timing protocol, a CUPTI profile), reporting JSON lines on stdout
 * (docs/protocol.md, "GPU worker"). Exit 0 after `done`, 1 after a fatal `error`.
 *
 * Phases: plan -> device (event `device`) -> memory check -> load (event `loaded`) -> buffers ->
 * verify trials (event `verify` each) -> optional gate (event `verified`, then a line on stdin)
 * -> timing (event `timing`) -> profile (event `profile`) -> ca_teardown -> `done`.
 * A per-call failure (abi.forward_failed, abi.setup_failed, verify.*) is reported in its phase's
 * event and ends the run early with `done`; a CUDA error or a problem with the plan, the inputs,
 * the device or memory is fatal: the phase's event (when one is running) then `error`, exit 1. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "worker/candidate.h"
#include "worker/audit.h"
#include "worker/events.h"
#include "worker/gpu.h"
#include "worker/plan.h"
#include "worker/profile.h"
#include "worker/timing.h"

#define GATE_LINE_MAX 64

struct worker {
	struct worker_plan plan;
	struct gpu_ctx g;
	bool g_open;
	struct gpu_nvml nvml;
	struct candidate cand;
	struct tensor_set params, outputs;
	struct tensor_set *slots; /* input buffer sets: one per rotation set (at least one) */
	int nslots;
	int gate_fd; /* the original stdin, kept away from the candidate */
	int trials_run;
	int audit_trial; /* the verification trial whose call is audited (from the secret seed) */
	bool call_failed;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: cuda-agent-worker PLAN.json\n"
		"\n"
		"Runs a candidate library (include/cuda_agent/abi.h) as the plan says: verification\n"
		"trials, the shared timing protocol, a CUPTI kernel profile. Events are JSON lines on\n"
		"stdout; diagnostics go to stderr. See docs/protocol.md, \"GPU worker\".\n");
}

static int fatal(const struct worker_error *e)
{
	events_error(e->code ? e->code : "worker.internal", e->diag.msg);
	return 1;
}

static json_t *nullable_int(int v)
{
	return v >= 0 ? json_integer(v) : json_null();
}

static void emit_device(struct worker *w)
{
	char drv[32], rt[32], cc[32];
	json_t *ev = json_object();
	gpu_format_version(w->g.driver_version, drv, sizeof drv);
	gpu_format_version(w->g.runtime_version, rt, sizeof rt);
	snprintf(cc, sizeof cc, "%d.%d", w->g.cc_major, w->g.cc_minor);
	json_object_set_new(ev, "name", json_str(w->g.name, 0));
	json_object_set_new(ev, "driver",
			    w->nvml.driver[0] ? json_str(w->nvml.driver, 0) : json_null());
	json_object_set_new(ev, "cuda_driver", json_string(drv));
	json_object_set_new(ev, "cuda_runtime", json_string(rt));
	json_object_set_new(ev, "sm_count", json_integer(w->g.sm_count));
	json_object_set_new(ev, "l2_bytes", json_integer((json_int_t)w->g.l2_bytes));
	json_object_set_new(ev, "sm_clock_mhz", nullable_int(gpu_nvml_sm_clock(&w->nvml)));
	json_object_set_new(ev, "compute_capability", json_string(cc));
	json_object_set_new(ev, "memory_bytes", json_integer((json_int_t)w->g.total_mem));
	json_object_set_new(ev, "pci_bus_id", json_str(w->g.pci_bus_id, 0));
	json_object_set_new(ev, "device", json_integer(w->g.device));
	events_emit("device", ev);
}

static size_t flush_bytes(const struct worker *w)
{
	double factor;
	if (!w->plan.has_timing && !w->plan.has_profile)
		return 0;
	factor = w->plan.has_timing ? w->plan.timing.protocol.l2_flush_factor : 2.0;
	return (size_t)(factor * (double)w->g.l2_bytes);
}

/* Everything the run allocates on the device, against what is free: one clear worker.oom. */
static int check_memory(struct worker *w, struct worker_error *e)
{
	const struct task_spec *s = &w->plan.spec;
	size_t pd, ph, ad, ah, od, oh, need, free_bytes = 0, flush = flush_bytes(w);
	int rc;
	const double mib = 1024.0 * 1024.0;

	if ((rc = tensor_specs_bytes(s->params, s->num_params, "params", &pd, &ph, e)) ||
	    (rc = tensor_specs_bytes(s->args, s->num_args, "args", &ad, &ah, e)) ||
	    (rc = tensor_specs_bytes(s->outputs, s->num_outputs, "outputs", &od, &oh, e)))
		return rc;
	need = pd + (size_t)w->nslots * ad + od + flush;
	if ((rc = gpu_ctx_free_bytes(&w->g, &free_bytes, e)))
		return rc;
	if (need > free_bytes)
		return werr(e, "worker.oom", true, CA_ERR_NOMEM,
			    "this task needs %.1f MiB of GPU memory (params %.1f MiB, %d input "
			    "set%s of %.1f MiB, outputs %.1f MiB, L2 flush buffer %.1f MiB) but only "
			    "%.1f MiB are free on device %d",
			    (double)need / mib, (double)pd / mib, w->nslots,
			    w->nslots == 1 ? "" : "s", (double)ad / mib, (double)od / mib,
			    (double)flush / mib, (double)free_bytes / mib, w->g.device);
	return 0;
}

static int alloc_buffers(struct worker *w, struct worker_error *e)
{
	const struct task_spec *s = &w->plan.spec;
	int rc;

	if ((rc = tensor_set_alloc(&w->params, "params", s->params, s->num_params, w->g.device,
				   e)) ||
	    (rc = tensor_set_alloc(&w->outputs, "outputs", s->outputs, s->num_outputs,
				   w->g.device, e)))
		return rc;
	w->slots = calloc((size_t)w->nslots, sizeof *w->slots);
	if (!w->slots)
		return werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory");
	for (int i = 0; i < w->nslots; i++)
		if ((rc = tensor_set_alloc(&w->slots[i], "args", s->args, s->num_args, w->g.device,
					   e)))
			return rc;
	if ((rc = gpu_ctx_alloc_flush(&w->g, flush_bytes(w), e)))
		return rc;
	return gpu_ctx_alloc_checksums(&w->g,
				       (size_t)(s->num_args > s->num_params ? s->num_args
									    : s->num_params) + 1,
				       e);
}

static void free_buffers(struct worker *w)
{
	tensor_set_free(&w->params);
	tensor_set_free(&w->outputs);
	for (int i = 0; w->slots && i < w->nslots; i++)
		tensor_set_free(&w->slots[i]);
	free(w->slots);
	w->slots = NULL;
}

/* Index of the first tensor whose checksum changed, or -1. */
static int first_changed(const uint64_t *before, const uint64_t *after, int n)
{
	for (int i = 0; i < n; i++)
		if (before[i] != after[i])
			return i;
	return -1;
}

static int verify_trial(struct worker *w, int k, struct worker_error *e)
{
	const struct plan_trial *t = &w->plan.verify[k];
	struct tensor_set *args = &w->slots[0];
	int na = args->n, np = w->params.n, changed, ret, rc;
	uint64_t *sums = calloc(2 * (size_t)(na + np) + 1, sizeof *sums);
	uint64_t *before = sums, *after = sums ? sums + na + np : NULL;
	char what[64], where[128];

	snprintf(what, sizeof what, "verification trial %d of %d", k + 1, w->plan.num_verify);
	if (!sums)
		return werr(e, "worker.oom", true, CA_ERR_NOMEM, "out of host memory");
	/* Checksums are taken as loaded, before ca_setup: ca_setup must not modify the params
	 * (or inputs) either; packing belongs in buffers of the candidate's own. */
	if ((rc = tensor_set_load_file(&w->params, t->params, e)) ||
	    (rc = tensor_set_load_file(args, t->inputs, e)) ||
	    (rc = tensor_set_checksums(args, &w->g, before, e)) ||
	    (rc = tensor_set_checksums(&w->params, &w->g, before + na, e)) ||
	    (rc = candidate_setup(&w->cand, &w->g, &w->params, what, e)) ||
	    (rc = tensor_set_poison(&w->outputs, &w->g, e)))
		goto out;
	tensor_set_refresh(args);
	tensor_set_refresh(&w->params);
	tensor_set_refresh(&w->outputs);
	snprintf(where, sizeof where, "preparing %s", what);
	if ((rc = gpu_sync(&w->g, where, e)))
		goto out;

	if (k == w->audit_trial) {
		/* This trial's call is recorded by CUPTI (audit.h); its outputs are checked as
		 * every trial's are. */
		struct audit_result ar;
		if ((rc = audit_call(&w->g, &w->cand, args, &w->params, &w->outputs, what,
				     "verify", &ar, e)))
			goto out;
		events_emit("audit", audit_result_json(&ar));
		if ((rc = audit_judge(&ar, tensor_set_bytes(args) + tensor_set_bytes(&w->params),
				      what, e)))
			goto out;
	} else {
		ret = candidate_forward(&w->cand, args, &w->params, &w->outputs, w->g.stream);
		snprintf(where, sizeof where, "after ca_forward (%s)", what);
		if ((rc = gpu_sync_after_call(&w->g, where, e)))
			goto out;
		if (ret != 0) {
			rc = werr(e, "abi.forward_failed", false, CA_ERR_REJECTED,
				  "ca_forward returned %d (%s)", ret, what);
			goto out;
		}
	}

	if ((rc = tensor_set_checksums(args, &w->g, after, e)) ||
	    (rc = tensor_set_checksums(&w->params, &w->g, after + na, e)))
		goto out;
	if ((changed = first_changed(before, after, na)) >= 0) {
		rc = werr(e, "verify.input_modified", false, CA_ERR_REJECTED,
			  "ca_setup or ca_forward modified input args.%d (%s); inputs are "
			  "read-only (write results only into the outputs)",
			  changed, args->t[changed].spec->name);
		goto out;
	}
	if ((changed = first_changed(before + na, after + na, np)) >= 0) {
		rc = werr(e, "verify.params_modified", false, CA_ERR_REJECTED,
			  "ca_setup or ca_forward modified parameter params.%d (%s); parameters "
			  "are read-only (pack them into your own buffers in ca_setup instead)",
			  changed, w->params.t[changed].spec->name);
		goto out;
	}
	rc = tensor_set_save(&w->outputs, t->outputs, e);
out:
	free(sums);
	return rc;
}

/* Returns 0 to go on, 1 when a fatal error was reported. */
static int run_verify(struct worker *w)
{
	for (int k = 0; k < w->plan.num_verify; k++) {
		struct worker_error e = {0};
		double t0 = ca_now();
		int rc = verify_trial(w, k, &e);
		w->trials_run = k + 1;
		json_t *ev = json_pack("{s:i, s:b, s:f}", "trial", k, "ok", rc == 0, "seconds",
				       ca_now() - t0);
		if (rc && worker_error_is_call_failure(&e)) {
			json_object_set_new(ev, "code", json_string(e.code));
			json_object_set_new(ev, "message", json_str(e.diag.msg, 4096));
			events_emit("verify", ev);
		} else if (rc) {
			json_decref(ev); /* not about this call: the error event says it all */
		} else {
			events_emit("verify", ev);
		}
		if (rc && e.fatal)
			return fatal(&e);
		if (rc) {
			w->call_failed = true;
			return 0;
		}
	}
	return 0;
}

/* The supervisor's go-ahead after verification: true to continue. */
static bool gate(struct worker *w)
{
	char line[GATE_LINE_MAX + 1];
	size_t n = 0;

	events_emit("verified", json_pack("{s:i, s:b}", "trials", w->trials_run, "ok",
					  !w->call_failed));
	if (w->gate_fd < 0)
		return false;
	while (n < GATE_LINE_MAX) {
		char ch;
		ssize_t r = read(w->gate_fd, &ch, 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || ch == '\n')
			break;
		line[n++] = ch;
	}
	line[n] = '\0';
	if (n > 0 && line[n - 1] == '\r')
		line[n - 1] = '\0';
	return strcmp(line, "continue") == 0;
}

static json_t *timing_event(const struct timing_result *r, double seconds)
{
	json_t *ev = json_object();
	json_t *samples = json_array();
	for (size_t i = 0; i < r->samples; i++)
		json_array_append_new(samples, json_num(r->samples_ms[i]));
	json_object_set_new(ev, "ok", json_true());
	json_object_set_new(ev, "method", json_string("cuda_event+host"));
	json_object_set_new(ev, "median_ms", json_num(r->median_ms));
	json_object_set_new(ev, "event_median_ms", json_num(r->event_median_ms));
	json_object_set_new(ev, "host_median_ms", json_num(r->host_median_ms));
	json_object_set_new(ev, "overhead_ms", json_num(r->overhead_ms));
	json_object_set_new(ev, "event_overhead_ms", json_num(r->event_overhead_ms));
	json_object_set_new(ev, "rse", json_num(r->rse));
	json_object_set_new(ev, "samples", json_integer((json_int_t)r->samples));
	json_object_set_new(ev, "samples_ms", samples);
	json_object_set_new(ev, "warmup_calls", json_integer(r->warmup_calls));
	json_object_set_new(ev, "warmup_ms", json_num(r->warmup_ms));
	json_object_set_new(ev, "budget_exhausted", json_boolean(r->budget_exhausted));
	json_object_set_new(ev, "stop_reason",
			    r->stop_reason ? json_string(r->stop_reason) : json_null());
	json_object_set_new(ev, "l2_flush_bytes", json_integer((json_int_t)r->l2_flush_bytes));
	json_object_set_new(ev, "checks", json_integer(r->checks));
	json_object_set_new(ev, "checks_done", json_integer(r->checks_done));
	json_object_set_new(ev, "final_done", json_boolean(r->final_done));
	json_object_set_new(ev, "final_ms", json_num(r->final_ms));
	json_object_set_new(ev, "loop_seconds", json_num(r->loop_s));
	json_object_set_new(ev, "sm_clock_mhz_before", nullable_int(r->sm_clock_mhz_before));
	json_object_set_new(ev, "sm_clock_mhz_after", nullable_int(r->sm_clock_mhz_after));
	json_object_set_new(ev, "seconds", json_num(seconds));
	return ev;
}

static int run_timing(struct worker *w)
{
	struct timing_result r;
	struct worker_error e = {0};
	double t0 = ca_now();
	int rc = timing_run(&w->g, &w->nvml, &w->cand, &w->plan.timing, &w->params, w->slots,
			    &w->outputs, &r, &e);
	if (rc == 0) {
		events_emit("timing", timing_event(&r, ca_now() - t0));
	} else if (worker_error_is_call_failure(&e)) {
		events_emit("timing",
			    json_pack("{s:b, s:s, s:o, s:I, s:i, s:i, s:f}", "ok", 0, "code",
				      e.code, "message", json_str(e.diag.msg, 4096), "samples",
				      (json_int_t)r.samples, "warmup_calls", r.warmup_calls,
				      "checks_done", r.checks_done, "seconds", ca_now() - t0));
	}
	timing_result_free(&r);
	if (rc && e.fatal)
		return fatal(&e);
	if (rc)
		w->call_failed = true;
	return 0;
}

static int run_profile(struct worker *w)
{
	struct profile_result r;
	struct worker_error e = {0};
	double t0 = ca_now();
	int rc = profile_run(&w->g, &w->cand, &w->plan.profile, &w->params, &w->slots[0],
			     &w->outputs, &r, &e);
	if (rc == 0) {
		json_t *ev = profile_result_json(&r);
		json_object_set_new(ev, "ok", json_true());
		json_object_set_new(ev, "seconds", json_real(ca_now() - t0));
		events_emit("profile", ev);
	} else if (worker_error_is_call_failure(&e) || !e.fatal) {
		events_emit("profile",
			    json_pack("{s:b, s:s, s:o, s:[], s:i, s:f}", "ok", 0, "code", e.code,
				      "message", json_str(e.diag.msg, 4096), "kernels", "total_ns",
				      0, "seconds", ca_now() - t0));
	}
	profile_result_free(&r);
	if (rc && e.fatal)
		return fatal(&e);
	if (rc && worker_error_is_call_failure(&e))
		w->call_failed = true;
	return 0;
}

/* Keeps the original stdin for the gate and gives the candidate /dev/null instead. */
static int hide_stdin(void)
{
	int fd = fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 3);
	int null = open("/dev/null", O_RDONLY);
	if (null > STDIN_FILENO) {
		dup2(null, STDIN_FILENO);
		close(null);
	}
	return fd;
}

int main(int argc, char **argv)
{
	struct worker w;
	struct worker_error e = {0};
	struct ca_diag d = {{0}};
	int status = 1;

	if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage(stdout);
		return 0;
	}
	memset(&w, 0, sizeof w);
	if (events_open(&d) != 0) {
		fprintf(stderr, "cuda-agent-worker: %s\n", d.msg);
		return 1;
	}
	w.gate_fd = hide_stdin();
	if (argc != 2) {
		usage(stderr);
		events_error("worker.bad_plan", "usage: cuda-agent-worker PLAN.json");
		return 1;
	}
	if (worker_plan_load(&w.plan, argv[1], &d) != 0) {
		events_error("worker.bad_plan", d.msg);
		return 1;
	}
	w.nslots = w.plan.has_timing ? w.plan.timing.num_rotation : 1;
	/* The audited trial comes from the secret timing seed; without timing, the last one. */
	w.audit_trial = w.plan.num_verify < 1 ? -1
			: w.plan.has_timing
			    ? (int)(w.plan.timing.seed % (uint64_t)w.plan.num_verify)
			    : w.plan.num_verify - 1;

	if (gpu_ctx_open(&w.g, w.plan.device, &e) != 0) {
		status = fatal(&e);
		goto out;
	}
	w.g_open = true;
	gpu_nvml_open(&w.nvml, w.g.pci_bus_id);
	emit_device(&w);
	if (check_memory(&w, &e) != 0) {
		status = fatal(&e);
		goto out;
	}

	if (candidate_load(&w.cand, w.plan.library, &e) != 0) {
		status = fatal(&e);
		goto out;
	}
	events_emit("loaded", json_pack("{s:b, s:b}", "has_setup", w.cand.setup != NULL,
					"has_teardown", w.cand.teardown != NULL));
	if (alloc_buffers(&w, &e) != 0) {
		status = fatal(&e);
		goto out;
	}

	if (run_verify(&w))
		goto out;
	if (w.plan.gate_after_verify) {
		if (!gate(&w))
			goto teardown;
	} else if (w.call_failed) {
		goto teardown;
	}
	if (w.plan.has_timing && run_timing(&w))
		goto out;
	if (!w.call_failed && w.plan.has_profile && run_profile(&w))
		goto out;

teardown:
	if (candidate_teardown(&w.cand, &w.g, &e) != 0) {
		status = fatal(&e);
		goto out;
	}
	free_buffers(&w);
	gpu_ctx_close(&w.g);
	w.g_open = false;
	events_emit("done", json_object());
	status = 0;
out:
	free_buffers(&w);
	if (w.g_open)
		gpu_ctx_close(&w.g);
	gpu_nvml_close(&w.nvml);
	worker_plan_free(&w.plan);
	if (w.gate_fd >= 0)
		close(w.gate_fd);
	return status;
}
