/* audit: one call of the candidate recorded by CUPTI, to see what it really ran.
 *
 * Events on the harness stream time only work ordered on that stream; host-synchronized time
 * catches the rest, but a correct candidate that hides its work from the events still earns a
 * result. The audit turns such candidates into rejections with a name:
 *   - hack.stream_escape: GPU work of the call (a kernel, copy or memset on any stream) was still
 *     running after everything the call ordered on the harness stream had finished, i.e. it was
 *     not joined back to the given stream. A marker kernel the worker launches on the harness
 *     stream right after ca_forward returns fixes that moment on the GPU's clock.
 *   - hack.host_compute: the call copied device data to the host (at least
 *     AUDIT_MIN_DTOH_BYTES and an eighth of the input bytes): computing on the CPU is not a
 *     CUDA kernel.
 * The worker audits one verification trial and one warm-up call of the timing run, both chosen
 * from the supervisor's secret seed, so a candidate cannot tell an audited call from another.
 *
 * When CUPTI cannot record (an old driver, a tool already attached), the call runs unaudited and
 * the result says why (`ran` false): timing still charges hidden work through the host clock.
 *
 * Ownership: plain values only. */
#ifndef CA_WORKER_AUDIT_H
#define CA_WORKER_AUDIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "worker/candidate.h"
#include "worker/gpu.h"

#define AUDIT_LATE_SLACK_NS  2000u       /* timestamp jitter allowed after the marker */
#define AUDIT_MIN_DTOH_BYTES (64u << 10) /* a few scalars read back are fine */
#define AUDIT_NAME_MAX       160

struct audit_result {
	bool ran;              /* CUPTI recorded the call */
	char why_not[256];     /* when !ran */
	const char *phase;     /* "verify" or "timing" (static string) */
	uint64_t kernels;      /* the candidate's kernels (the worker's own are left out) */
	uint64_t copies, sets; /* memcpy and memset records */
	uint64_t dtoh_bytes, htod_bytes;
	uint64_t dropped;     /* records CUPTI dropped (0 expected) */
	bool marker_seen;     /* the marker kernel's record arrived */
	int64_t late_ns;      /* latest end of the candidate's work minus the marker's start */
	char late_name[AUDIT_NAME_MAX]; /* what ended last ("memcpy", "memset" or a kernel) */
	uint32_t late_stream, harness_stream;
	double seconds; /* wall time of the audited call, CUPTI set-up included */
};

/* One call (the caller has prepared and synchronized the sets, as for any call): CUPTI on, the
 * call, the marker, device synchronize, CUPTI off. Failures of the call are reported as for a
 * plain call (abi.forward_failed, fault.*); CUPTI's own failures only clear r->ran. */
int audit_call(struct gpu_ctx *g, struct candidate *c, struct tensor_set *args,
	       struct tensor_set *params, struct tensor_set *outputs, const char *what,
	       const char *phase, struct audit_result *r, struct worker_error *e);

/* 0, or a non-fatal hack.stream_escape / hack.host_compute with a message that says what was
 * seen and what to do instead. input_bytes: the call's args plus params. */
int audit_judge(const struct audit_result *r, size_t input_bytes, const char *what,
		struct worker_error *e);

json_t *audit_result_json(const struct audit_result *r);

#endif
