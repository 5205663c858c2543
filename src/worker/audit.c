#include "worker/audit.h"

#include <stdio.h>
#include <string.h>

#include "util/clock.h"
#include "util/str.h"
#include "worker/activity.h"
#include "worker/events.h"
#include "worker/kernels.h"

#define MARKER_NAME "ca_worker_audit_marker"

/* Filled by the activity sink, under activity's lock. */
struct audit_state {
	struct audit_result *r;
	uint64_t marker_start;
	uint64_t latest_end;
	bool any;
};

static void note_end(struct audit_state *s, uint64_t end, const char *name, uint32_t stream)
{
	if (!s->any || end > s->latest_end) {
		s->any = true;
		s->latest_end = end;
		ca_strlcpy(s->r->late_name, name, sizeof s->r->late_name);
		s->r->late_stream = stream;
	}
}

static void audit_sink(const CUpti_Activity *rec, void *ctx)
{
	struct audit_state *s = ctx;
	struct audit_result *r = s->r;

	switch (rec->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)(const void *)rec;
		const char *name = k->name ? k->name : "(unnamed kernel)";
		if (strcmp(name, MARKER_NAME) == 0) {
			/* the last marker is the one after the call (the first only warms up) */
			if (!r->marker_seen || k->start > s->marker_start) {
				s->marker_start = k->start;
				r->harness_stream = k->streamId;
			}
			r->marker_seen = true;
			return;
		}
		if (strncmp(name, CA_WORKER_KERNEL_PREFIX, strlen(CA_WORKER_KERNEL_PREFIX)) == 0)
			return;
		r->kernels++;
		note_end(s, k->end, name, k->streamId);
		return;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)(const void *)rec;
		r->copies++;
		if (m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH)
			r->dtoh_bytes += m->bytes;
		else if (m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD)
			r->htod_bytes += m->bytes;
		note_end(s, m->end, "memcpy", m->streamId);
		return;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)(const void *)rec;
		r->sets++;
		note_end(s, m->end, "memset", m->streamId);
		return;
	}
	default:
		return;
	}
}

int audit_call(struct gpu_ctx *g, struct candidate *c, struct tensor_set *args,
	       struct tensor_set *params, struct tensor_set *outputs, const char *what,
	       const char *phase, struct audit_result *r, struct worker_error *e)
{
	static const CUpti_ActivityKind kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
						   CUPTI_ACTIVITY_KIND_MEMCPY,
						   CUPTI_ACTIVITY_KIND_MEMSET};
	struct audit_state s = {.r = r};
	struct worker_error ce = {0};
	cudaError_t err, mark, sync, last;
	bool on;
	double t0 = ca_now();
	int ret;

	memset(r, 0, sizeof *r);
	r->phase = phase;
	/* The marker once before recording: its first launch loads it (lazy module loading takes
	 * milliseconds), which would delay the recorded marker and hide an escape. */
	err = ca_launch_audit_marker(g->stream);
	if (err == cudaSuccess)
		err = cudaStreamSynchronize(g->stream);
	if (err != cudaSuccess)
		return werr_cuda(e, err, "launching the audit marker (%s)", what);
	on = activity_begin(kinds, sizeof kinds / sizeof kinds[0], audit_sink, &s,
			    "audit.unavailable", &ce) == 0;
	if (!on)
		ca_strlcpy(r->why_not, ce.diag.msg, sizeof r->why_not);
	/* And once more while recording: the first launch after CUPTI is enabled is delayed by
	 * milliseconds (measured on an H200), which would let the marker start late. */
	if (on) {
		err = ca_launch_audit_marker(g->stream);
		if (err == cudaSuccess)
			err = cudaStreamSynchronize(g->stream);
		if (err != cudaSuccess) {
			activity_abort();
			return werr_cuda(e, err, "launching the audit marker (%s)", what);
		}
	}

	ret = candidate_forward(c, args, params, outputs, g->stream);
	err = cudaSetDevice(g->device); /* the candidate may have switched devices */
	mark = ca_launch_audit_marker(g->stream);
	sync = cudaDeviceSynchronize();
	last = cudaGetLastError();
	if (sync != cudaSuccess)
		err = sync;
	else if (err == cudaSuccess && mark != cudaSuccess)
		err = mark;
	else if (err == cudaSuccess)
		err = last;
	if (err != cudaSuccess) {
		if (on)
			activity_abort();
		return werr_cuda_call(e, err, "after ca_forward (%s)", what);
	}
	if (on) {
		memset(&ce, 0, sizeof ce);
		if (activity_end(&r->dropped, "audit.unavailable", &ce) == 0) {
			r->ran = r->marker_seen;
			if (!r->marker_seen)
				ca_strlcpy(r->why_not, "CUPTI recorded no marker kernel",
					   sizeof r->why_not);
		} else {
			ca_strlcpy(r->why_not, ce.diag.msg, sizeof r->why_not);
		}
	}
	if (r->ran && s.any)
		r->late_ns = (int64_t)s.latest_end - (int64_t)s.marker_start;
	r->seconds = ca_now() - t0;
	if (ret != 0)
		return werr(e, "abi.forward_failed", false, CA_ERR_REJECTED,
			    "ca_forward returned %d (%s)", ret, what);
	return 0;
}

int audit_judge(const struct audit_result *r, size_t input_bytes, const char *what,
		struct worker_error *e)
{
	const double mib = 1024.0 * 1024.0;
	if (!r->ran)
		return 0;
	if (r->late_ns > (int64_t)AUDIT_LATE_SLACK_NS)
		return werr(e, "hack.stream_escape", false, CA_ERR_REJECTED,
			    "%s: the candidate's GPU work (%.120s, on stream %u) was still running "
			    "%.1f us after everything it ordered on the given stream had finished: "
			    "work on other streams must be joined back to the stream ca_forward "
			    "receives (cudaEventRecord + cudaStreamWaitEvent) before it returns",
			    what, r->late_name, r->late_stream, (double)r->late_ns / 1e3);
	if (r->dtoh_bytes >= AUDIT_MIN_DTOH_BYTES && r->dtoh_bytes >= input_bytes / 8)
		return werr(e, "hack.host_compute", false, CA_ERR_REJECTED,
			    "%s: ca_forward copied %.2f MiB of device memory to the host (inputs are "
			    "%.2f MiB): computing on the CPU is not a CUDA kernel; keep the work on "
			    "the GPU",
			    what, (double)r->dtoh_bytes / mib, (double)input_bytes / mib);
	return 0;
}

json_t *audit_result_json(const struct audit_result *r)
{
	json_t *o = json_pack("{s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:f}", "phase",
			      r->phase ? r->phase : "", "ran", r->ran, "kernels",
			      (json_int_t)r->kernels, "copies", (json_int_t)r->copies, "memsets",
			      (json_int_t)r->sets, "dtoh_bytes", (json_int_t)r->dtoh_bytes,
			      "htod_bytes", (json_int_t)r->htod_bytes, "dropped_records",
			      (json_int_t)r->dropped, "seconds", r->seconds);
	if (!o)
		return NULL;
	if (r->ran) {
		json_object_set_new(o, "late_us", json_real((double)r->late_ns / 1e3));
		json_object_set_new(o, "last_to_end", json_str(r->late_name, AUDIT_NAME_MAX));
	} else {
		json_object_set_new(o, "why_not", json_str(r->why_not, sizeof r->why_not));
	}
	return o;
}
